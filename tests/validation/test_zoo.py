"""Each implementer mutant of speccheck.validation.zoo is not exact, shown by an independent
Monte Carlo check (scipy.stats, none of the battery's code) in the regime a sampler produces,
while the exact D-GRS passes the same check. Fixed seeds; a mutant must give p < 1e-8, the exact
rule p > 1e-4 (a false failure of the control has probability <= 1e-4 per check)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from speccheck.theory import acceptance_dgrs
from speccheck.validation.zoo import ZOO
from speccheck.verifiers.dgrs import DGRS

F64 = torch.float64


def _calls(rule, calls, seed: int = 0):
    """(delta, s_out, accepted) of every call (K, delta tensor) made in order on one instance."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for K, delta in calls:
        s = torch.randn(delta.shape[0], K, generator=g, dtype=F64)
        s_out, acc, _ = rule.verify(delta, s, g)
        out.append((delta, s_out, acc))
    return out


def _ks_p(out) -> float:
    z = torch.cat([s - d for d, s, _ in out]).numpy()
    return float(stats.kstest(z, "norm").pvalue)


def _const(delta: float, n: int) -> torch.Tensor:
    return torch.full((n,), delta, dtype=F64)


def _acceptance_p(out, delta: float, K: int) -> float:
    acc = torch.cat([a for _, _, a in out]).numpy()
    return float(stats.binomtest(int(acc.sum()), acc.size, float(acceptance_dgrs(np.array(delta), K))).pvalue)


def _witness(name: str, rule) -> float:
    """The p-value of the independent check for mutant ``name`` run on ``rule``."""
    g = torch.Generator().manual_seed(7)
    if name == "zoo-stale-k":
        out = _calls(rule, [(1, _const(1.0, 8))] + [(4, _const(1.0, 4000))] * 5)[1:]
        return _acceptance_p(out, 1.0, 4)
    if name == "zoo-late-drift":
        return _ks_p(_calls(rule, [(1, _const(1.0, 1))] * 101 + [(1, _const(1.0, 50000))])[101:])
    if name == "zoo-small-batch":
        return _ks_p(_calls(rule, [(1, _const(1.0, 100))] * 300))
    if name == "zoo-block-first-delta":  # z = s_out - delta regressed on delta's spread inside each call
        out = _calls(rule, [(1, 4.0 * (1 + 0.05 * torch.rand(64, generator=g, dtype=F64))) for _ in range(600)])
        z = torch.cat([s - d for d, s, _ in out]).numpy()
        spread = torch.cat([d - d.mean() for d, _, _ in out]).numpy()
        return float(stats.linregress(spread, z).pvalue)
    if name == "zoo-global-rng":
        runs = []
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            runs.append(torch.cat([s for _, s, _ in _calls(type(rule)(), [(1, _const(3.0, 2000))], seed=5)]))
        return 0.0 if not torch.equal(*runs) else 1.0  # same generator seed, other output: not reproducible
    if name == "zoo-shared-uniforms":
        out = _calls(rule, [(1, _const(1.0, 2))] * 10000)
        z0 = np.array([float(s[0] - d[0]) for d, s, _ in out])
        z1 = np.array([float(s[1] - d[1]) for d, s, _ in out])
        return float(stats.pearsonr(z0, z1).pvalue)
    if name in ("zoo-small-delta-zero", "zoo-small-delta-zero-0.01"):
        delta = 0.03 if name == "zoo-small-delta-zero" else 0.005
        return _acceptance_p(_calls(rule, [(1, _const(delta, 50000))] * 4), delta, 1)
    if name == "zoo-k7-window":
        return _ks_p(_calls(rule, [(7, _const(0.65, 20000))]))
    if name == "zoo-k11-residual":
        return _ks_p(_calls(rule, [(11, _const(4.0, 50000))]))
    if name == "zoo-sorted-blocks":
        deltas = [torch.sort(torch.empty(256, dtype=F64).uniform_(np.log(0.5), np.log(10.0), generator=g).exp())
                  .values for _ in range(100)]
        return _ks_p(_calls(rule, [(1, d) for d in deltas]))
    raise AssertionError(f"no witness for {name}")


def test_the_zoo_has_ten_or_more_defect_kinds():
    assert len(ZOO) >= 10


@pytest.mark.parametrize("name", sorted(ZOO))
def test_each_mutant_is_shown_not_exact_independently(name):
    assert _witness(name, ZOO[name]()) < 1e-8
    control = DGRS()
    control.calls = 0
    if name != "zoo-global-rng":
        assert _witness(name, control) > 1e-4, "the exact rule fails the witness: the check is wrong"
