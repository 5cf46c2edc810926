"""The public names of the former single MCRS module, for importers that still name it
(speccheck.theory.table); new code imports :mod:`speccheck.theory.mcrs` or the concept module
(the package docstring lists them)."""

from speccheck.theory.mcrs import (  # noqa: F401
    KERNEL_G,
    KERNEL_MAX_K,
    acceptance_mcrs,
    shipped_policies,
)

__all__ = ["KERNEL_G", "KERNEL_MAX_K", "acceptance_mcrs", "shipped_policies"]
