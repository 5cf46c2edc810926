"""speccheck: check exact speculative sampling for diffusion models.

Subpackages (data flows one way: theory <- verifiers <- sampler <- validation/figures):

- :mod:`speccheck.theory`     closed forms, bounds, rank-weight LP, speed-up predictions (no torch)
- :mod:`speccheck.verifiers`  scalar kernels (rmc, dgrs, rass), rank-1 projection, registry
- :mod:`speccheck.sampler`    draft trees, Algorithm 1, NFE accounting, proposals
- :mod:`speccheck.targets`    drift providers: Gaussian, Gaussian mixture, EDM, SD3
- :mod:`speccheck.validation` statistical tests, the exactness battery, mutants
- :mod:`speccheck.figures`    one function per figure
"""

from speccheck._version import __version__ as __version__

__all__ = ["BatteryOutcome", "PlainResult", "battery", "measure_acceptance", "sample"]

_HOMES = {"BatteryOutcome": "speccheck.api", "battery": "speccheck.api", "measure_acceptance": "speccheck.api",
          "PlainResult": "speccheck.sampler.plain", "sample": "speccheck.sampler.plain"}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: the API loads on first use (torch is heavy)
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'speccheck' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
