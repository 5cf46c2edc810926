"""The contract layer (L0), the one output rule, and the battery's options (issue 15)."""

from __future__ import annotations

import pytest
import torch

from speccheck.errors import DeviceError, InputError, LoadError
from speccheck.validation.battery import contract_checks, run_battery
from speccheck.validation.mutants import ReferenceDGRS
from speccheck.verifiers.base import check_verify_outputs, output_problems


class _Int32Index(ReferenceDGRS):
    name = "int32-index"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out, acc, idx.to(torch.int32)


class _Float32Out(ReferenceDGRS):
    name = "float32-out"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out.float(), acc, idx


class _NaN(ReferenceDGRS):
    name = "nan-out"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return torch.full_like(out, float("nan")), torch.zeros_like(acc), torch.full_like(idx, s.shape[1])


class _Mutates(ReferenceDGRS):
    name = "mutates"

    def verify(self, delta, s, generator=None):
        out = super().verify(delta, s, generator)
        s.zero_()
        return out


class _NoNone(ReferenceDGRS):
    name = "needs-generator"

    def verify(self, delta, s, generator=None):
        if generator is None:
            raise TypeError("generator required")
        return super().verify(delta, s, generator)


class _Numpy(ReferenceDGRS):
    name = "numpy-out"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        return out.numpy(), acc, idx


def _failed(results):
    return {r.test: r.note for r in results if not r.passed}


def test_exact_reference_passes_every_contract_check():
    res = contract_checks(ReferenceDGRS(), seed=3)
    tests = {r.test for r in res}
    assert not _failed(res)
    assert {"contract:dtype", "contract:index", "contract:accepted-equals-child", "contract:finite",
            "contract:same-seed", "contract:seed-used", "contract:generator-none",
            "contract:inputs-unchanged", "contract:no-exception"} <= tests
    assert all(r.kind == "contract" and r.layer == "L0" for r in res)


def test_one_dtype_rule_in_the_battery_and_in_check_verify_outputs():
    """int32 index: fine for both; a float32 s_out for float64 inputs: a defect for both."""
    assert not _failed(contract_checks(_Int32Index()))
    s = torch.randn(8, 2, dtype=torch.float64)
    out = _Int32Index().verify(torch.full((8,), 1.0, dtype=torch.float64), s, None)
    assert check_verify_outputs(out, 8, 2, "x")[2].dtype == torch.int64
    assert "contract:dtype" in _failed(contract_checks(_Float32Out()))
    bad = _Float32Out().verify(torch.full((8,), 1.0, dtype=torch.float64), s, None)
    assert output_problems(bad, 8, 2, torch.float64)
    with pytest.raises(ValueError, match="less precise"):
        check_verify_outputs(bad, 8, 2, "x")


@pytest.mark.parametrize("rule,test,words", [
    (_NaN(), "contract:finite", "verifier returned non-finite s_out"),
    (_Mutates(), "contract:inputs-unchanged", "modified its inputs"),
    (_NoNone(), "contract:generator-none", "generator=None"),
    (_Numpy(), "contract:shape", "not a torch.Tensor"),
])
def test_contract_defects_are_named(rule, test, words):
    failed = _failed(contract_checks(rule))
    assert test in failed and words in failed[test]


def test_nan_verifier_is_a_defect_not_an_input_error(tiny):
    rep = run_battery(_NaN(), tiny(Ks=(1,)))
    assert not rep.passed
    assert any("non-finite s_out" in r.note for r in rep.failures)
    assert not any("delta must be finite" in r.note for r in rep.failures)


@pytest.mark.parametrize("kwargs,err,match", [
    ({"seed": -1}, InputError, "seed"),
    ({"seed": 1.5}, InputError, "seed"),
    ({"scale": 0.0}, InputError, "scale"),
    ({"family_alpha": 1.5}, InputError, "family_alpha"),
    ({"layers": ["nope"]}, InputError, "layers"),
    ({"Ks": [0]}, InputError, "Ks"),
    ({"device": "tpu"}, DeviceError, "device"),
    ({"device": "cuda:99"}, DeviceError, "device"),
])
def test_bad_options_name_the_option(tiny, kwargs, err, match):
    with pytest.raises(err, match=match):
        run_battery(ReferenceDGRS(), tiny(Ks=(1,)), **kwargs)


def test_no_statistical_test_is_an_input_error(tiny):
    with pytest.raises(InputError, match="no statistical test"):
        run_battery(ReferenceDGRS(), tiny(Ks=(1,)), Ks=[7])
    with pytest.raises(InputError, match="no statistical test"):
        run_battery(ReferenceDGRS(), tiny(Ks=(1,)), layers=["wrapper"])


def test_unloadable_verifier_and_suite_are_load_errors(tiny):
    with pytest.raises(LoadError, match="unknown verifier"):
        run_battery("no-such-rule", tiny(Ks=(1,)))
    with pytest.raises(LoadError, match="gate"):
        run_battery(ReferenceDGRS(), "no-such-suite")


def test_heartbeat_called_per_unit(tiny):
    labels = []
    run_battery(ReferenceDGRS(), tiny(deltas=(0.5, 1.0), Ks=(1, 2)), heartbeat=labels.append)
    assert labels[0] == "L0 contract" and sum(label.startswith("L1 ") for label in labels) == 4


class _RaisesAtLargeDelta(ReferenceDGRS):
    """Wrong law at delta >= 2 in a batch of fewer than 1000 rows, and raises on large batches
    there: the battery reports the defect; localisation may fail but never crashes the run."""

    name = "raises-later"

    def verify(self, delta, s, generator=None):
        out, acc, idx = super().verify(delta, s, generator)
        big = delta >= 2.0
        if bool(big.any()) and s.shape[0] > 5000:
            raise RuntimeError("kernel crashed")
        return torch.where(big, s[:, 0], out), acc | big, torch.where(big, torch.zeros_like(idx), idx)


def test_localisation_errors_do_not_crash_the_run(tiny):
    rep = run_battery(_RaisesAtLargeDelta(), tiny(deltas=(3.0,), Ks=(1,), n=2048))
    assert not rep.passed
    assert rep.localisations or any("localisation not possible" in n for n in rep.notes)
