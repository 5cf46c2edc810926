"""Drift providers (velocity fields on the linear path x_t = (1 - t) x_0 + t xi) and time grids.

See :mod:`speccheck.targets.base` for the protocol every target implements. The EDM, SD3 and
digits adapters live in their own modules (they import heavier code): ``speccheck.targets.edm``,
``speccheck.targets.sd3``, ``speccheck.targets.digits``.
"""

from speccheck.targets.base import VelocityModel, check_rows, denoised_from_velocity
from speccheck.targets.gaussian import ChainLaw, GaussianData, chain_law
from speccheck.targets.gmm import GMM_PRESETS, GaussianMixture, draw_mixture, gmm_preset
from speccheck.targets.schedules import GRIDS, Schedule, edm, flow_matching, make_schedule, shifted, uniform

__all__ = [
    "GMM_PRESETS", "GRIDS", "ChainLaw", "GaussianData", "GaussianMixture", "Schedule", "VelocityModel", "chain_law",
    "check_rows", "denoised_from_velocity", "draw_mixture", "edm", "flow_matching", "gmm_preset", "make_schedule",
    "shifted", "uniform",
]
