"""Re-export of :mod:`speccheck.theory.validate` (the public home of the validators)."""

from speccheck.theory.validate import MAX_K, check_delta, check_K, check_omega

__all__ = ["MAX_K", "check_delta", "check_K", "check_omega"]
