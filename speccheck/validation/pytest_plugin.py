"""pytest plugin (entry point ``pytest11``): the ``speccheck_battery`` fixture.

A verifier author's CI test is one line::

    def test_mine(speccheck_battery):
        speccheck_battery("pkg.module:Rule")
"""

from __future__ import annotations

from typing import Callable

import pytest


@pytest.fixture
def speccheck_battery() -> Callable:
    """Run the battery on a verifier spec; fail the test with the report if a defect is found."""
    from speccheck.validation.battery import assert_battery_passes

    return assert_battery_passes
