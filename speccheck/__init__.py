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

__all__ = ["BatteryOutcome", "battery", "measure_acceptance"]


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: the API loads on first use (torch is heavy)
    if name in __all__:
        from speccheck import api

        return getattr(api, name)
    raise AttributeError(f"module 'speccheck' has no attribute {name!r}")
