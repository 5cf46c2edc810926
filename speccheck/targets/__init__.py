"""Drift providers (velocity fields on the linear path x_t = (1 - t) x_0 + t xi).

See :mod:`speccheck.targets.base` for the protocol every target implements.
"""

from speccheck.targets.base import VelocityModel

__all__ = ["VelocityModel"]
