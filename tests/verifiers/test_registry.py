"""The registry: built-in names, 'package.module:attr' paths, entry points, the CLI listing."""

from __future__ import annotations

import textwrap
from importlib import metadata

import pytest
import torch

from speccheck.verifiers import available, get, registry, verify_states

from .helpers import assert_normal

THIRD_PARTY = textwrap.dedent('''
    """A third-party rule: reflection coupling on the first child (exact for every K)."""
    import torch


    class FirstChildRMC:
        name = "first-child-rmc"
        description = "RMC on the first child, whatever K"

        def verify(self, delta, s, generator=None):
            s1 = s[:, 0]
            u = 1.0 - torch.rand(s1.shape, generator=generator, dtype=s.dtype)
            acc = torch.log(u) <= delta * s1 - 0.5 * delta * delta
            out = torch.where(acc, s1, delta - s1)
            return out, acc, torch.where(acc, 0, s.shape[1]).long()


    INSTANCE = FirstChildRMC()


    def make():
        return FirstChildRMC()


    class Broken:
        name = "broken"

    NOT_A_RULE = 3.0
''')


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    (tmp_path / "sc_thirdparty_rules.py").write_text(THIRD_PARTY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "sc_thirdparty_rules"


def test_builtins():
    for name in ("rmc", "dgrs", "rass", "rass-icdf"):
        v = get(name)
        assert v.name == name and callable(v.verify)
        assert name in available() and available()[name]


@pytest.mark.parametrize("attr", ["FirstChildRMC", "INSTANCE", "make"])
def test_module_attr_loads_and_runs(third_party, attr):
    v = get(f"{third_party}:{attr}")
    assert v.name == "first-child-rmc"
    n = 1 << 16
    g = torch.Generator().manual_seed(0)
    s = torch.randn(n, 3, generator=g, dtype=torch.float64)
    s_out, accepted, index = v.verify(torch.full((n,), 0.8, dtype=torch.float64), s, g)
    assert_normal(s_out, 0.8, label="third-party rule")  # false-failure rate 1e-6
    mu_p = torch.zeros(8, 5, dtype=torch.float64)
    mu_q = mu_p + 0.1
    children = mu_p[:, None] + torch.randn(8, 3, 5, generator=g, dtype=torch.float64)
    y, acc, idx = verify_states(v, mu_p, mu_q, 1.0, children, g)
    assert y.shape == (8, 5)


def test_errors(third_party):
    with pytest.raises(ValueError, match="unknown verifier 'nope'.*dgrs"):
        get("nope")
    with pytest.raises(ValueError, match="cannot import module"):
        get("sc_no_such_module_xyz:Rule")
    with pytest.raises(ValueError, match="has no attribute"):
        get(f"{third_party}:Missing")
    with pytest.raises(ValueError, match="without a callable 'verify'"):
        get(f"{third_party}:Broken")
    with pytest.raises(ValueError, match="without a callable 'verify'"):
        get(f"{third_party}:NOT_A_RULE")
    with pytest.raises(ValueError, match="package.module:attr"):
        get(":x")
    with pytest.raises(ValueError):
        get(42)


def test_object_passthrough(third_party):
    v = get(f"{third_party}:INSTANCE")
    assert get(v) is v


def test_entry_point(third_party, monkeypatch, capsys):
    ep = metadata.EntryPoint(name="fcrmc", value=f"{third_party}:FirstChildRMC", group=registry.ENTRY_POINT_GROUP)
    broken = metadata.EntryPoint(name="broken-ep", value="sc_no_such_module_xyz:R", group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: {"fcrmc": ep, "broken-ep": broken})
    assert get("fcrmc").name == "first-child-rmc"
    av = available()
    assert av["fcrmc"] == "RMC on the first child, whatever K"
    assert "failed to load" in av["broken-ep"]
    with pytest.raises(ValueError, match="failed to load"):
        get("broken-ep")
    from speccheck.cli import main

    assert main(["verifiers"]) == 0
    out = capsys.readouterr().out
    assert "fcrmc" in out and "rass-icdf" in out and "dgrs" in out
    assert main(["verifiers", "--check", f"{third_party}:make"]) == 0
    assert main(["verifiers", "--check", "sc_no_such_module_xyz:R"]) == 2


def test_real_entry_point_group_is_queried():
    eps = registry._entry_points()
    assert isinstance(eps, dict)


def test_module_in_the_current_directory_loads_without_pythonpath(tmp_path, monkeypatch):
    import sys

    from speccheck.errors import LoadError

    (tmp_path / "sc_cwd_rule.py").write_text(THIRD_PARTY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "sc_cwd_rule", raising=False)
    v = get("sc_cwd_rule:FirstChildRMC")
    assert v.name == "first-child-rmc"
    with pytest.raises(LoadError, match="cannot import module 'sc_no_such_module'"):
        get("sc_no_such_module:Rule")
    with pytest.raises(LoadError, match="no attribute"):
        get("sc_cwd_rule:Missing")
