"""Suite TOML loading/validation and the report formats."""

from __future__ import annotations

import pytest

from speccheck.validation.battery import run_battery
from speccheck.validation.mutants import ReferenceRMC
from speccheck.validation.report import format_kill_matrix, format_report, junit_xml, report_dict
from speccheck.validation.suites import BUILTIN_SUITES, load_suite, parse_suite


def test_builtin_suites_load_and_are_sized():
    s = {name: load_suite(name) for name in BUILTIN_SUITES}
    assert s["full"].scalar.n >= 2 ** 24
    assert max(s["gate"].scalar.K) == 16 and set(s["gate"].wrapper.dims) == {1, 2, 64, 1024}
    assert min(s["gate"].scalar.deltas) <= 0.05 and max(s["gate"].scalar.deltas) >= 10
    assert all(x.family_alpha == 1e-3 for x in s.values())
    assert len({x.seed for x in s.values()}) == 3
    assert (1.0, 2, 2 ** 19) in s["gate"].scalar.extra


@pytest.mark.parametrize("bad,match", [
    ({"family_alpha": 2.0}, "family_alpha"),
    ({"scalar": {"deltas": [-1.0], "K": [1], "n": 10}}, "deltas"),
    ({"scalar": {"deltas": [1.0], "K": [0], "n": 10}}, "K"),
    ({"scalar": {"deltas": [1.0], "K": [1], "n": 0}}, "n"),
    ({"wrapper": {"dims": [], "n": 10}}, "dims"),
    ({"seed": -3}, "seed"),
    ({"scalar": {"deltas": [1.0], "K": [1], "n": 10, "extra": [{"delta": -1, "K": 1, "n": 5}]}}, "extra"),
])
def test_bad_suites_are_rejected(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_suite(bad)


def test_bad_toml_file(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("this is = = not toml")
    with pytest.raises(ValueError, match="TOML"):
        load_suite(str(p))


def test_report_formats(tiny):
    rep = run_battery(ReferenceRMC(), tiny(Ks=(1,)))
    txt = format_report(rep)
    for col in ("cell", "test", "statistic", "threshold", "min.det.dev", "verdict", "seed=11"):
        assert col in txt
    d = report_dict(rep)
    assert d["passed"] is True and d["per_test_alpha"] == pytest.approx(1e-3 / 4)
    assert "<testsuite" in junit_xml(rep)
    bad = run_battery(ReferenceRMC("reflect_delta"), tiny(Ks=(1,)))
    m = format_kill_matrix({"rmc-reflect_delta": bad, "ref-rmc": rep})
    assert "1/2 mutants killed" in m and "NO" in m
