"""pytest plugin (entry point ``pytest11``): the ``speccheck_battery`` fixture.

A verifier author's CI test is one line::

    def test_mine(speccheck_battery):
        speccheck_battery("pkg.module:Rule")

The fixture runs :func:`speccheck.api.battery`, the same call as ``speccheck battery``: the
verifier in its own process, the same units and the same verdict rule. A defect fails the test
with the report; no verdict (no evidence, no power, a crash, a timeout, out of memory) fails it
with the reason. A verifier object (not a spec string) runs in the test's process: its
``sys.exit`` and ``os._exit`` are caught there (:func:`speccheck.isolation.exits_guarded`) and fail
the test with no verdict, so the session cannot end with exit 0; an exit from native code
(``posix._exit``, ``ctypes``), a crash or a signal cannot be caught in a process and ends the
session; pass the spec string ``"pkg.module:Rule"`` to run such a verifier isolated.
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
