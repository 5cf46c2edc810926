"""The battery on known-good and known-bad rules (tiny suites; family-wise false-failure
rate 1e-3 per battery run, so each 'passes' assertion below fails by chance w.p. <= 1e-3)."""

from __future__ import annotations

import pytest
import torch

from speccheck.validation.battery import run_battery
from speccheck.validation.mutants import (
    MUTANTS,
    AlwaysRejectRule,
    ClaimsAcceptRule,
    ReferenceDGRS,
    ReferenceRASS,
    ReferenceRMC,
    ReferenceWrapped,
)
from speccheck.validation.report import format_report


def _failed_tests(rep):
    return {r.test for r in rep.failures}


def test_reference_rules_pass(tiny):
    for rule, Ks in ((ReferenceRMC(), (1,)), (ReferenceDGRS(), (1, 3)), (ReferenceRASS(), (2, 4))):
        rep = run_battery(rule, tiny(deltas=(1.0, 2.0), Ks=Ks))
        assert rep.passed, format_report(rep, only_failures=True)
        assert any(r.test == "acceptance=declared" for r in rep.results)


def test_builtin_dgrs_passes_with_wrapper(tiny):
    rep = run_battery("dgrs", tiny(deltas=(1.0,), Ks=(2,), dims=(1, 64)))
    assert rep.passed, format_report(rep, only_failures=True)
    assert {r.layer for r in rep.results} >= {"L1", "L2", "L3"}


def test_always_reject_is_exact_but_useless(tiny):
    """An exact but useless rule passes every exactness test (and its declared acceptance 0)."""
    rep = run_battery(AlwaysRejectRule(), tiny(deltas=(0.5, 3.0), Ks=(1, 4)))
    assert rep.passed, format_report(rep, only_failures=True)


def test_fresh_draws_claiming_acceptance_fail_the_contract(tiny):
    """Exact law, but 'accepted' with s_out != s[index]: the contract catches it."""
    rep = run_battery(ClaimsAcceptRule(), tiny(deltas=(1.0,), Ks=(2,)))
    assert not rep.passed
    assert "contract:accepted-equals-child" in _failed_tests(rep)
    assert not any(r.kind == "stat" and not r.passed and r.test == "ks" for r in rep.results)


def test_mutant_registry_has_at_least_12():
    assert len(MUTANTS) >= 12
    for name, f in MUTANTS.items():
        v = f()
        assert callable(v.verify), name


@pytest.mark.parametrize("name,deltas,Ks,dims", [
    ("rmc-reflect_delta", (1.0,), (1,), None),
    ("dgrs-residual_step1", (1.0,), (4,), None),
    ("rass-top_uncorrected", (2.0,), (4,), None),
    ("wrapper-drop_zperp", (1.0,), (2,), (64,)),
    ("wrapper-first_child_zperp", (1.0,), (2,), (2,)),
])
def test_some_mutants_killed_by_tiny_suites(tiny, name, deltas, Ks, dims):
    rep = run_battery(MUTANTS[name](), tiny(deltas=deltas, Ks=Ks, n=16384, dims=dims, wrapper_n=2048))
    assert not rep.passed, f"{name} survived"


def test_float32_mutant_caught_by_dtype_contract(tiny):
    rep = run_battery(MUTANTS["rmc-float32"](), tiny(deltas=(1.0,), Ks=(1,)))
    assert "contract:dtype" in _failed_tests(rep)


class _Raises:
    name = "raises"

    def verify(self, delta, s, generator=None):
        raise ValueError("boom inside the kernel")


def test_exception_in_verifier_is_a_failure_not_a_load_error(tiny):
    rep = run_battery(_Raises(), tiny(deltas=(1.0,), Ks=(1,)))
    assert not rep.passed
    assert any("boom" in r.note for r in rep.failures)


def test_seed_changes_cells_and_is_reported(tiny):
    a = run_battery(ReferenceRMC(), tiny(Ks=(1,)), seed=1)
    b = run_battery(ReferenceRMC(), tiny(Ks=(1,)), seed=2)
    assert a.seed == 1 and b.seed == 2
    ka = [r.statistic for r in a.results if r.test == "ks"]
    kb = [r.statistic for r in b.results if r.test == "ks"]
    assert ka != kb
    c = run_battery(ReferenceRMC(), tiny(Ks=(1,)), seed=1)
    assert ka == [r.statistic for r in c.results if r.test == "ks"]


def test_unsupported_K_is_skipped_with_a_note(tiny):
    rep = run_battery(ReferenceRMC(), tiny(Ks=(1, 2)))
    assert any("K=[2]" in n for n in rep.notes)
    assert all("K=2" not in r.cell for r in rep.results)


def test_bad_options_raise_speccheck_errors(tiny):
    from speccheck.errors import DeviceError

    with pytest.raises(DeviceError, match="device"):
        run_battery(ReferenceRMC(), tiny(Ks=(1,)), device="tpu")
    with pytest.raises(ValueError, match="unknown verifier"):
        run_battery("no-such-rule", tiny(Ks=(1,)))
    with pytest.raises(ValueError, match="suite"):
        run_battery(ReferenceRMC(), "no-such-suite")


def test_ref_wrapper_passes_layer3(tiny):
    rep = run_battery(ReferenceWrapped(ReferenceDGRS()), tiny(deltas=(1.0,), Ks=(2,), dims=(1, 2, 64), wrapper_n=2048))
    assert rep.passed, format_report(rep, only_failures=True)
    assert sum(r.layer == "L3" and r.kind == "stat" for r in rep.results) == 12


def _traj_suite(n_traj=60):
    from speccheck.validation.suites import parse_suite

    return parse_suite({"name": "tiny-traj", "seed": 3, "trajectory": {"n_traj": n_traj, "K": 2, "L": 3, "d": 4}})


def test_trajectory_layer_runs_and_kills_a_sampler_mutant():
    from speccheck.validation.mutants import mutant_factories, run_mutants

    rep = run_battery("dgrs", _traj_suite())
    l4 = [r for r in rep.results if r.layer == "L4" and r.kind == "stat"]
    assert l4 and rep.passed, format_report(rep, only_failures=True)
    assert rep.per_test_alpha == pytest.approx(1e-3 / len(l4))
    from speccheck.validation.results import TestResult

    assert all(isinstance(r, TestResult) and r.cell.startswith("traj:") for r in l4)  # one result type
    assert {r.cell.split("[")[0] for r in l4} == {"traj:gaussian", "traj:mixture"}
    sampler = [n for n in mutant_factories() if n.startswith("sampler-")]
    assert sampler
    names = ["sampler-extra-commit"] if "sampler-extra-commit" in sampler else sampler[:1]
    reps = run_mutants(_traj_suite(300), names=names)
    assert all(not r.passed for r in reps.values())


def test_a_trajectory_that_leaves_the_reals_is_a_defect_not_a_refusal():
    """dgrs-G_prev_lambda drives one gate trajectory of the Gaussian target to inf: the trajectory
    layer judges that as a failed "finite values" test (a killed mutant), never as malformed
    raw outputs (no verdict), and still judges the other trajectories."""
    from speccheck.validation.mutants import mutant_factories

    rep = run_battery(mutant_factories()["dgrs-G_prev_lambda"](), "gate", layers=["L4"])
    failed = {(r.cell, r.test) for r in rep.results if not r.passed}
    assert ("traj:gaussian[all]", "innovation finite values") in failed, format_report(rep, only_failures=True)
    assert any(cell.startswith("traj:mixture") for cell, _ in failed)


def test_run_mutants_rejects_unknown_names(tiny):
    from speccheck.validation.mutants import run_mutants

    with pytest.raises(ValueError, match="unknown mutant"):
        run_mutants(tiny(), names=["no-such-mutant"])


class _BadShapes:
    name = "bad-shapes"

    def verify(self, delta, s, generator=None):
        B, K = s.shape
        return s, torch.zeros(B, dtype=torch.bool), torch.full((B,), K)  # s_out has shape [B, K]


class _IgnoresGenerator:
    """Exact (fresh draws, never accepts) but draws from the global RNG: not reproducible."""

    name = "global-rng"

    def verify(self, delta, s, generator=None):
        B, K = s.shape
        out = delta + torch.randn(B, dtype=s.dtype)
        return out, torch.zeros(B, dtype=torch.bool), torch.full((B,), K, dtype=torch.long)


def test_contract_shape_and_reproducibility(tiny):
    rep = run_battery(_BadShapes(), tiny(Ks=(2,)))
    assert "contract:shape" in _failed_tests(rep)
    rep = run_battery(_IgnoresGenerator(), tiny(Ks=(2,)))
    assert "contract:same-seed" in _failed_tests(rep)
