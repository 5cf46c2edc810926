"""speccheck: check exact speculative sampling for diffusion models.

Subpackages (data flows one way: theory <- verifiers <- sampler <- validation/figures):

- :mod:`speccheck.theory`     closed forms, bounds, rank-weight LP, speed-up predictions (no torch)
- :mod:`speccheck.verifiers`  scalar kernels (rmc, dgrs, rass), rank-1 projection, registry
- :mod:`speccheck.sampler`    draft trees, Algorithm 1, NFE accounting, proposals
- :mod:`speccheck.targets`    drift providers: Gaussian, Gaussian mixture, EDM, SD3
- :mod:`speccheck.validation` statistical tests, the exactness battery, mutants
- :mod:`speccheck.figures`    one function per figure

The researcher's calls are here at the top level: :func:`battery` (the exactness battery),
:func:`measure_acceptance`, :func:`sample` (the plain sampler), :func:`speedup` and :func:`sweep`
(speed-ups on a Gaussian mixture), :func:`calibrate`, :func:`mutants`, :func:`contract_check`,
:func:`e2e`, :func:`theory_table` (the ``speccheck theory`` table) and :func:`export_table`
(the results store as a DataFrame).
"""

from speccheck._version import __version__ as __version__

__all__ = ["BatteryOutcome", "CheckOutcome", "PlainResult", "battery", "calibrate", "contract_check", "e2e",
           "export_table", "measure_acceptance", "mutants", "sample", "speedup", "sweep", "theory_table"]

# where each name lives: the API loads on first use (torch is heavy; theory_table and
# export_table need no torch)
_HOMES = {**dict.fromkeys(("BatteryOutcome", "CheckOutcome", "battery", "calibrate", "contract_check", "e2e",
                           "measure_acceptance", "mutants", "speedup", "sweep"), "speccheck.api"),
          "PlainResult": "speccheck.sampler.plain", "sample": "speccheck.sampler.plain",
          "theory_table": "speccheck.theory.table", "export_table": "speccheck.scale.results"}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: the API loads on first use (torch is heavy)
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'speccheck' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
