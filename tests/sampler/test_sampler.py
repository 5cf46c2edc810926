"""Algorithm 1: NFE accounting, deterministic steps, protocol switches, eager vs lazy, cond.

Statistical assertions state their false-failure rate; everything runs on small d."""

import numpy as np
import pytest
import torch
from scipy import stats

from speccheck.sampler.analysis import summarize
from speccheck.sampler.core import SpeculativeSampler
from speccheck.sampler.tree import chain, uniform_tree
from speccheck.targets.gaussian import GaussianData, chain_law
from speccheck.targets.schedules import flow_matching, uniform
from speccheck.validation.trajectory import innovation_checks, small_mixture

F64 = torch.float64


def _run(tree, verifier="dgrs", n=50, seed=0, sched=None, target=None, **kw):
    target = target or small_mixture(4)
    sched = sched or flow_matching(12, 0.4)
    sp = SpeculativeSampler(target, sched, tree, verifier, **kw)
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randn(n, target.state_shape[0], generator=g, dtype=F64)
    return sp, sp.run(x0, g, record_states=True)


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("prefetch,leaves", [("nearest", False), ("nearest", True), ("parent", False), ("none", True)])
def test_nfe_accounting(lazy, prefetch, leaves):
    sp, r = _run(uniform_tree(2, 3), n=30, lazy=lazy, prefetch=prefetch, leaves=leaves)
    sched = sp.schedule
    assert r.n_stochastic == 10 and np.all(r.det_calls.numpy() == 2)         # flow grid: t=1 and t->0 ends
    ev = r.events
    per_traj = np.bincount(ev.traj.astype(int), minlength=30)
    assert np.all(per_traj == r.n_stochastic)             # every stochastic step committed by one verification
    assert torch.equal(r.nfe, r.rounds + r.root_calls)
    if prefetch == "none":
        assert torch.equal(r.root_calls, r.rounds)
        assert np.all(ev.delta[ev.depth == 1] == 0) and np.all(ev.accepted[ev.depth == 1])
    else:
        assert np.all(r.root_calls.numpy() == 1)          # one warm-up for the single stochastic block
    first = (ev.round == 0) & (ev.depth == 1)
    assert np.all(ev.delta[first] == 0) and np.all(ev.accepted[first])   # warm-up drift is exact
    cd = r.commit_depth.numpy()
    stochastic_depths = cd[:, sched.stochastic]
    assert np.all(cd[:, ~sched.stochastic] == 0) and np.all((stochastic_depths >= 1) & (stochastic_depths <= 3))
    # accepted counts / per-round commits
    assert np.array_equal(r.n_accepted.numpy(), np.bincount(ev.traj.astype(int), weights=ev.accepted, minlength=30))
    if prefetch == "nearest" and leaves:
        # after a fully accepted round the next root's drift is exact (the committed leaf was evaluated)
        key = ev.traj * 1000 + ev.round
        full = {}
        for k in np.unique(key):
            m = key == k
            full[k] = bool(ev.accepted[m].all() and ev.depth[m].max() == 3)
        nxt = np.array([full.get(k - 1, False) for k in key])
        sel = nxt & (ev.depth == 1)
        assert sel.any() and np.all(ev.delta[sel] == 0)
    assert np.all(np.isfinite(r.x.numpy()))


def test_eps_zero_runs_plain_euler():
    tgt = small_mixture(3)
    sched = uniform(6, 0.0, 0.9, 0.1)
    sp, r = _run(uniform_tree(2, 2), sched=sched, target=tgt, n=5)
    x = r.states[:, 0].clone()
    for k in range(6):
        x = x - sched.gamma[k] * tgt.velocity(x, torch.full((5,), sched.t[k], dtype=F64))
    torch.testing.assert_close(r.x, x, rtol=0, atol=1e-12)
    assert r.nfe.sum() == 0 and np.all(r.det_calls.numpy() == 6) and len(r.events) == 0


def test_eager_and_lazy_agree_in_distribution():
    """Same protocol, eager vs lazy, 300 trajectories each: two-sample KS on NFE per trajectory
    (discrete: the KS p-value is conservative) and on 3 scalar functions of the output; 4 tests
    Bonferroni at total false-failure rate 1e-3."""
    pv = []
    outs = {}
    for lazy in (False, True):
        _, r = _run(uniform_tree(2, 3), n=300, seed=11 if lazy else 12, lazy=lazy, prefetch="nearest")
        outs[lazy] = r
    a, b = outs[False], outs[True]
    pv.append(stats.ks_2samp(a.nfe.numpy(), b.nfe.numpy()).pvalue)
    for f in (lambda x: x[:, 0], lambda x: (x**2).sum(1), lambda x: x.sum(1)):
        pv.append(stats.ks_2samp(f(a.x).numpy(), f(b.x).numpy()).pvalue)
    assert min(pv) > 1e-3 / len(pv), pv
    # and the mean NFE agrees with a z-test at the same level
    na, nb = a.nfe.double().numpy(), b.nfe.double().numpy()
    za = (na.mean() - nb.mean()) / np.sqrt(na.var(ddof=1) / 300 + nb.var(ddof=1) / 300)
    assert abs(za) < stats.norm.isf(1e-3 / 2)


@pytest.mark.parametrize("freeze,prefetch,leaves,lazy", [
    ("drift", "nearest", True, True), ("denoised", "parent", False, True),
    ("velocity", "none", False, False), ("drift", "parent", True, False)])
def test_protocol_variants_are_exact(freeze, prefetch, leaves, lazy):
    """Innovation test (stratified by depth), Bonferroni at total false-failure rate 1e-3."""
    tgt = small_mixture(4)
    sched = uniform(10, 0.5, 0.95, 0.02)
    sp, r = _run(uniform_tree(2, 3), n=200, sched=sched, target=tgt, freeze=freeze, prefetch=prefetch,
                 leaves=leaves, lazy=lazy, seed=3)
    res = innovation_checks(r, tgt, sched, alpha=1e-3)
    assert all(x.passed for x in res), [(x.name, x.p_value) for x in res if not x.passed]


@pytest.mark.parametrize("rule", ["rmc", "dgrs", "rass"])
def test_calibration_and_predicted_nfe(rule):
    """|z| < 4 for the acceptance calibration and for measured vs predicted NFE (normal
    approximation: false-failure rate ~6e-5 each)."""
    tree = chain(4) if rule == "rmc" else uniform_tree(2 if rule == "rass" else 3, 3)  # RASS: LP per delta grid point
    sp, r = _run(tree, verifier=rule, n=150, sched=uniform(15, 0.5, 0.95, 0.02), target=small_mixture(6), seed=5,
                 lazy=True)
    s = summarize(r, sp.verifier, sp.schedule.stochastic, tree.L)
    assert abs(s["calibration_z"]) < 4, s
    assert abs(s["nfe_z"]) < 4, s
    assert s["predicted_nfe_freq"] == pytest.approx(s["nfe_mean"], rel=1e-9)   # flow-conservation identity
    assert 1.0 < s["speedup"] <= 15 / 2


class _ClassGaussian:
    """Per-class Gaussian data: class c has mean means[c] * 1 (d coordinates), std 0.3."""

    def __init__(self, d, means):
        self.state_shape = (d,)
        self.parts = [GaussianData(np.full(d, m), 0.3) for m in means]

    def velocity(self, x, t, cond=None):
        assert cond is not None and cond.shape == (x.shape[0],)
        out = torch.empty_like(x)
        for c, p in enumerate(self.parts):
            m = cond == c
            if m.any():
                out[m] = p.velocity(x[m], t[m])
        return out


def test_cond_is_carried_per_trajectory():
    """Class-conditional Gaussian data: each class's final mean matches its exact chain law
    (z-test per class and coordinate, Bonferroni over 2 * d tests at total rate 1e-3)."""
    d, n = 3, 200
    tgt = _ClassGaussian(d, [2.0, -2.0])
    sched = uniform(10, 0.4, 0.95, 0.02)
    sp = SpeculativeSampler(tgt, sched, uniform_tree(2, 3), "dgrs", lazy=False)
    g = torch.Generator().manual_seed(4)
    cond = torch.arange(n) % 2
    r = sp.run(torch.randn(n, d, generator=g, dtype=F64), g, cond=cond)
    level = 1e-3 / (2 * d)
    for c in (0, 1):
        law = chain_law(sched, tgt.parts[c])
        x = r.x[cond == c].numpy()
        z = (x.mean(0) - law.mean[-1]) / np.sqrt(law.var[-1] / x.shape[0])
        assert np.all(2 * stats.norm.sf(np.abs(z)) > level), (c, z)


def test_bad_input():
    tgt = small_mixture(3)
    sched = uniform(5, 0.3)
    with pytest.raises(ValueError, match="freeze"):
        SpeculativeSampler(tgt, sched, chain(2), "rmc", freeze="score")
    with pytest.raises(ValueError, match="prefetch"):
        SpeculativeSampler(tgt, sched, chain(2), "rmc", prefetch="oldest")
    with pytest.raises(ValueError, match="K=2"):
        SpeculativeSampler(tgt, sched, uniform_tree(2, 2), "rmc")
    with pytest.raises(ValueError):
        SpeculativeSampler(tgt, sched, chain(2), "no-such-rule")
    sp = SpeculativeSampler(tgt, sched, chain(2), "rmc")
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="x0"):
        sp.run(torch.zeros(4, 5, dtype=F64), g)
    with pytest.raises(ValueError, match="depth_cap"):
        sp.run(torch.zeros(4, 3, dtype=F64), g, depth_cap=torch.tensor([1, 2, 3, 1]))
