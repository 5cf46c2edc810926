"""pytest plugin (entry point ``pytest11``): the ``speccheck_battery`` fixture.

A verifier author's CI test is one line::

    def test_mine(speccheck_battery):
        speccheck_battery("pkg.module:Rule")

The fixture runs :func:`speccheck.api.battery`, the same call as ``speccheck battery``: the
verifier in its own process, the same units and the same verdict rule. A defect fails the test
with the report; no verdict (no evidence, no power, a crash, a timeout, out of memory) fails it
with the reason. A verifier object (not a spec string) runs in the test's process.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest


def _assert_exact(verifier: Any, suite: str = "smoke", **options: Any) -> Any:
    from speccheck.api import battery
    from speccheck.validation.report import format_report

    if not isinstance(verifier, str):
        options.setdefault("isolate", False)
    outcome = battery(verifier, suite, **options)
    if outcome.verdict == "defect":
        raise AssertionError("speccheck battery found a defect:\n" + format_report(outcome.report))
    if outcome.verdict != "exact":
        raise AssertionError(f"speccheck battery gave no verdict: {outcome.reason}")
    return outcome


@pytest.fixture
def speccheck_battery() -> Callable:
    """Run the battery on a verifier spec; fail the test on a defect or on no verdict."""
    return _assert_exact
