"""The residual samplers on their own: the law of the D-GRS and RASS residuals (KS against the
closed-form residual CDF from speccheck.theory) for both samplers, including tiny delta where
the residual mass is ~1e-10 and must not be lost to rounding. False-failure rate 1e-6 each."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speccheck import theory
from speccheck.theory.normal import normal_mass
from speccheck.verifiers import dgrs as dgrs_mod
from speccheck.verifiers import rass as rass_mod

from .helpers import assert_cdf

N = 1 << 17


def _dgrs_residual_cdf(delta: float, K: int):
    lev = theory.dgrs_levels(np.array([delta]), K)
    tau, mu, G = lev.tau[0, K], lev.mu[0, K], lev.G[0, K]

    def cdf(x):
        x = np.maximum(x, tau)
        # integral_tau^x (phi(s - delta) - lambda phi(s)) ds, in precise pieces
        m = normal_mass(tau - delta, x - delta) - normal_mass(tau, x) - mu * normal_mass(tau, x)
        return np.clip(m / G, 0.0, 1.0)

    return cdf


# Rejection sampling costs 1 / (residual mass) proposals per residual row; here every row is a
# residual row, so it is tested where that mass is O(1). Tiny deltas (mass ~1e-10) use the
# inverse CDF (the rejection sampler hands such rows to it after 4096 proposals).
DGRS_CASES = [("icdf", d, K) for d, K in [(1e-10, 1), (1e-10, 3), (1e-4, 2), (0.3, 1), (0.3, 8), (2.0, 4), (9.0, 2)]]
DGRS_CASES += [("rejection", d, K) for d, K in [(0.3, 1), (0.3, 8), (2.0, 4), (9.0, 2)]]


@pytest.mark.parametrize("method,delta,K", DGRS_CASES)
def test_dgrs_residual_law(method, delta, K):
    g = torch.Generator().manual_seed(int(delta * 1e4) + K)
    lev = theory.dgrs_levels(np.array([delta]), K)
    d_u = torch.tensor([delta], dtype=torch.float64)
    ll = torch.log1p(torch.tensor(lev.mu[:, K], dtype=torch.float64))
    x = dgrs_mod.sample_residual(d_u, ll, torch.zeros(N, dtype=torch.long), g, method)
    assert (x >= lev.tau[0, K] - 1e-12).all()
    assert_cdf(x, _dgrs_residual_cdf(delta, K), label=f"dgrs residual {method} delta={delta} K={K}")


RASS_CASES = [("rass-icdf", d, K) for d, K in [(1e-10, 2), (2e-3, 3), (1.0, 2), (0.7, 8), (3.3, 4)]]
RASS_CASES += [("rass", d, K) for d, K in [(1.0, 2), (2.0, 8), (3.3, 4)]]


@pytest.mark.parametrize("rule,delta,K", RASS_CASES)
def test_rass_residual_law(rule, delta, K):
    """Residual samples against the CDF built from theory.residual_intervals (closed-form masses
    per interval; within an interval, q-mass minus p_omega-mass)."""
    w = rass_mod.rass_weights(delta, K)
    ivs = theory.residual_intervals(delta, K, w)
    total = sum(iv.mass for iv in ivs)

    def cdf(x):
        out = np.zeros_like(x)
        for lo, hi, _ in ivs:
            xc = np.clip(x, lo, hi)
            q = normal_mass(np.full_like(xc, lo - delta), xc - delta)
            p = theory.cdf_p_omega(xc, K, w) - (theory.cdf_p_omega(lo, K, w) if np.isfinite(lo) else 0.0)
            out += q - p
        return np.clip(out / total, 0.0, 1.0)

    v = rass_mod.RASS() if rule == "rass" else rass_mod.RASSInverseCDF()
    C = np.exp(rass_mod._log_binom(K))
    A = torch.tensor(w * C, dtype=torch.float64)[None]
    Ad = torch.tensor((w - 1.0 / K) * C, dtype=torch.float64)[None]
    g = torch.Generator().manual_seed(K)
    x = v._residual(torch.tensor([delta], dtype=torch.float64), A, Ad, torch.zeros(N, dtype=torch.long), g)
    assert_cdf(x, cdf, label=f"{rule} residual delta={delta} K={K}")


def test_icdf_handles_many_groups():
    """Rows from 300 distinct deltas (several chunks of the table builder) in one call."""
    g = torch.Generator().manual_seed(3)
    deltas = torch.linspace(0.05, 6.0, 300, dtype=torch.float64)
    lev = theory.dgrs_levels(deltas.numpy(), 2)
    ll = torch.log1p(torch.tensor(lev.mu[:, 2], dtype=torch.float64))
    group = torch.randint(0, 300, (N,), generator=g)
    x = dgrs_mod.sample_residual(deltas, ll, group, g, "icdf")
    # transform each row by its own residual CDF: must be U(0, 1)
    u = np.empty(N)
    gn = group.numpy()
    xn = x.numpy()
    for j in range(300):
        rows = gn == j
        u[rows] = _dgrs_residual_cdf(float(deltas[j]), 2)(xn[rows])
    assert_cdf(torch.from_numpy(u), lambda t: np.clip(t, 0.0, 1.0), label="icdf many groups")


@pytest.mark.parametrize("K", [1, 2, 3, 8, 16])
def test_log_mix_matches_theory(K):
    """log p_omega(s) - log phi(s) from the kernel's Horner evaluation agrees with theory's
    log-sum-exp to 1e-12 (relative) on s in [-37, 50], for one and for per-row coefficients."""
    from speccheck.theory import log_p_omega

    for d in (0.0, 0.003, 0.5, 2.0, 30.0):
        w = rass_mod.rass_weights(d, K)
        C = np.exp(rass_mod._log_binom(K))
        A = torch.tensor(w * C, dtype=torch.float64)[None]
        Ad = torch.tensor((w - 1.0 / K) * C, dtype=torch.float64)[None]
        s = torch.linspace(-37.0, 50.0, 3001, dtype=torch.float64)[None]
        ref = log_p_omega(s[0].numpy(), K, w) + 0.5 * s[0].numpy() ** 2 + 0.5 * np.log(2 * np.pi)
        for got in (rass_mod.log_mix(s, A, Ad)[0], rass_mod.log_mix(s.expand(2, -1), A.expand(2, -1), None)[1]):
            err = np.abs(got.numpy() - ref) / np.maximum(1.0, np.abs(ref))
            assert err.max() < 1e-12, (K, d, err.max())


@pytest.mark.parametrize("mean,intervals", [
    (0.5, [(-np.inf, -13.5), (-2.125, -0.75), (1.0, np.inf)]),
    (3.0, [(-np.inf, -30.0), (-1.0, 2.5), (2.9, 3.1), (40.0, np.inf)]),  # a 1e-300-ish tail piece
    (-1.0, [(-np.inf, np.inf)]),
])
def test_normal_pieces_law(mean, intervals):
    """N(mean, 1) restricted to a union of intervals (split at the mean into one-tail pieces):
    KS against the exact truncated CDF, one group and as one of several groups."""
    from speccheck.verifiers import _residual

    lo = torch.tensor([[a for a, _ in intervals]], dtype=torch.float64)
    hi = torch.tensor([[b for _, b in intervals]], dtype=torch.float64)
    ivs = [(a - mean, b - mean) for a, b in intervals]
    total = sum(normal_mass(np.array(a), np.array(b)) for a, b in ivs)

    def cdf(x):
        z = np.asarray(x) - mean
        return sum(normal_mass(np.full_like(z, a), np.clip(z, a, b)) for a, b in ivs) / total

    g = torch.Generator().manual_seed(11)
    tab = _residual.normal_pieces(torch.tensor([mean], dtype=torch.float64), lo, hi)
    x = _residual.sample_pieces(tab, None, N // 4, 4, g).flatten()
    inside = torch.zeros_like(x, dtype=torch.bool)
    for a, b in intervals:
        inside |= (x >= a) & (x <= b)
    assert bool(inside.all()) and bool(torch.isfinite(x).all())
    assert_cdf(x, cdf, label=f"truncated normal mean={mean}")
    # the same law as group 1 of 2 (padded with an empty (inf, inf) slot in group 0)
    pad = torch.full((1, 1), np.inf, dtype=torch.float64)
    fill = pad.expand(1, lo.shape[1] - 1)
    lo2 = torch.cat([torch.cat([torch.tensor([[-1.0]], dtype=torch.float64), fill], 1), lo])
    hi2 = torch.cat([torch.cat([torch.tensor([[1.0]], dtype=torch.float64), fill], 1), hi])
    tab2 = _residual.normal_pieces(torch.tensor([0.0, mean], dtype=torch.float64), lo2, hi2)
    groups = torch.ones(N, dtype=torch.long)
    groups[: N // 2] = 0
    y = _residual.sample_pieces(tab2, groups, N, 1, g)[:, 0]
    assert bool(((y[: N // 2] >= -1) & (y[: N // 2] <= 1)).all())
    assert_cdf(y[N // 2:], cdf, label=f"truncated normal mean={mean} (grouped)")


@pytest.mark.parametrize("K", [2, 3, 8, 16])
def test_rass_residual_support_is_superset(K):
    """The rejection sampler proposes only inside rass.residual_support: every crossing interval
    of q and p_omega (theory.residual_intervals, exact roots) at deltas inside the grid cell with
    the kernel's interpolated weights must lie inside that support."""
    grid = rass_mod.DELTA_GRID
    rng = np.random.default_rng(K)
    cells = np.concatenate([[0, 1, 10, 24, 25, 60, 149, 150, 180], rng.integers(0, grid.size - 1, 6)])
    for c in cells:
        sup = rass_mod.residual_support(K, int(c), int(c) + 1)
        for t in (0.0, 0.3, 0.999):
            d = float(grid[c] + t * (grid[c + 1] - grid[c]))
            if d == 0.0:
                continue
            w = rass_mod.rass_weights(d, K)
            for iv in theory.residual_intervals(d, K, w):
                ok = ((sup[:, 0] <= iv.lo + 1e-9) & (sup[:, 1] >= iv.hi - 1e-9)).any()
                assert ok or iv.mass < 1e-40, (K, d, iv, sup)


def _residual_pit(x: np.ndarray, group: np.ndarray, deltas: np.ndarray, K: int, W: np.ndarray) -> np.ndarray:
    """Probability integral transform of each residual draw x (row group j: delta_j, weights W[j])
    under its residual law (q - p_omega)_+ / mass; U(0, 1) when the draws are exact."""
    u = np.empty(x.shape[0])
    for j, d in enumerate(deltas):
        ivs = theory.residual_intervals(float(d), K, W[j])
        total = sum(iv.mass for iv in ivs)
        rows = x[group == j]
        cdf = np.zeros_like(rows)
        for lo, hi, _ in ivs:
            clipped = np.clip(rows, lo, hi)
            q_mass = normal_mass(np.full_like(clipped, lo - d), clipped - d)
            p_below_lo = theory.cdf_p_omega(lo, K, W[j]) if np.isfinite(lo) else 0.0
            p_mass = theory.cdf_p_omega(clipped, K, W[j]) - p_below_lo
            cdf += q_mass - p_mass
        u[group == j] = np.clip(cdf / total, 0.0, 1.0)
    return u


@pytest.mark.parametrize("truncate", [True, False])
def test_rass_rejection_many_deltas(truncate, monkeypatch):
    """Rejection residual for rows of 40 distinct off-grid deltas in one call, with proposals
    from q truncated to the residual support and from plain q: each row transformed by its
    own residual CDF is U(0, 1)."""
    monkeypatch.setattr(rass_mod, "TRUNCATE_BELOW", 1.1 if truncate else -1.0)
    K = 3
    g = torch.Generator().manual_seed(5)
    deltas = np.round(np.linspace(0.31, 4.7, 40), 6)
    group = torch.randint(0, 40, (N,), generator=g)
    W = rass_mod.rass_weights(deltas, K)
    C = np.exp(rass_mod._log_binom(K))
    A = torch.tensor(W * C, dtype=torch.float64)
    Ad = torch.tensor((W - 1.0 / K) * C, dtype=torch.float64)
    x = rass_mod.RASS()._residual(torch.tensor(deltas), A, Ad, group, g).numpy()
    u = _residual_pit(x, group.numpy(), deltas, K, W)
    assert_cdf(torch.from_numpy(u), lambda t: np.clip(t, 0.0, 1.0), label="rass rejection many deltas")


# ------------------------------------------------ inverse CDF of many groups: the grid tables
GRID_DELTAS = np.array([0.0, 1e-8, 3e-5, 0.011, 0.02, 0.2499, 0.26, 0.7, 2.99, 3.05, 7.5, 8.3, 15.7, 39.9, 40.0, 45.0])


def _direct_log_b(d_host: np.ndarray, K: int):
    mix = rass_mod.mix_from_weights(rass_mod.rass_weights(d_host, K), True, torch.device("cpu"))
    return lambda x, g: rass_mod.log_mix_rows(x, mix, g)


@pytest.mark.parametrize("K", [1, 3, 16])
def test_grid_log_b_matches_the_direct_evaluation(K):
    """log B read from the grid tables (B = (1 - t) B_g + t B_(g+1), combined in log space)
    equals the kernel's Horner evaluation at the interpolated weights, on the windows' edges
    and every cell's GL nodes: to 1e-13 (absolute, |log B| <= 200 here), and for the tiny
    deltas to 1e-7 of delta (the scale of h there; the direct path's weights are the rounded
    interpolation, whose omega - 1/K loses ~1e-9 relative: the tables are the more precise)."""
    from speccheck.verifiers import _residual as R

    d_host = GRID_DELTAS
    groups = torch.arange(d_host.size)
    delta = torch.clamp(torch.tensor(d_host), max=R.HUGE_DELTA)
    grid = rass_mod.grid_log_b_fn(d_host, K, torch.device("cpu"))
    direct = _direct_log_b(d_host, K)
    k0 = R.grid_start(delta)
    edges, nodes = R.grid_window(k0, R.N_GRID_CELLS)
    cells = (k0[:, None] + torch.arange(R.N_GRID_CELLS, dtype=torch.float64)).reshape(-1)
    got_nodes = grid.nodes(cells, groups.repeat_interleave(R.N_GRID_CELLS)).reshape(d_host.size, -1)
    for got, ref in ((grid.edges(k0, groups), direct(edges, groups)),
                     (got_nodes, direct(nodes.reshape(d_host.size, -1), groups))):
        err = (got - ref).abs()
        assert float(err.max()) < 1e-13 * max(1.0, float(ref.abs().max())), (K, float(err.max()))
        tiny = torch.tensor(d_host < 1e-3) & torch.tensor(d_host > 0)
        assert float((err[tiny] / delta[tiny, None]).max()) < 1e-7, K
        assert torch.isfinite(got).all()


@pytest.mark.parametrize("K", [2, 8])
def test_grid_cell_tables_match_the_direct_ones(K):
    """The residual's total mass from the grid-table cell tables (absolute-grid window,
    compacted live cells) equals the direct tables' (window at delta - 12) to 1e-6 relative
    (both integrate the same residual; they differ by rounding and by sub-cell bumps that one
    window's edges see and the other's do not, O(cell^3))."""
    from speccheck.verifiers import _residual as R

    d_host = GRID_DELTAS[1:]
    groups = torch.arange(d_host.size)
    delta = torch.clamp(torch.tensor(d_host), max=R.HUGE_DELTA)
    direct = _direct_log_b(d_host, K)
    grid = rass_mod.grid_log_b_fn(d_host, K, torch.device("cpu"))
    ref = R._cell_tables(delta, groups, direct)[4][:, -1]
    a2, b2, r_live, mass, cum, live_index = R._cell_tables_grid(delta, groups, direct, grid)
    assert torch.all(b2 >= a2) and torch.all(mass >= 0) and torch.all(r_live >= 0)
    assert torch.all(mass[b2 == a2] == 0) and live_index.max() < r_live.shape[0]
    rel = ((cum[:, -1] - ref).abs() / ref).max()
    assert float(rel) < 1e-6, (K, float(rel))


@pytest.mark.parametrize("K", [2, 5])
def test_rass_icdf_residual_law_with_many_deltas(K):
    """The kernel's many-group inverse-CDF path (the grid tables): rows of 200 distinct deltas
    (log-uniform on [1e-6, 30], as the battery's continuous layer draws them), each row
    transformed by its own residual CDF (theory.residual_intervals) is U(0, 1)."""
    g = torch.Generator().manual_seed(11 + K)
    n_groups = 200
    deltas = np.sort(np.exp(np.random.default_rng(K).uniform(np.log(1e-6), np.log(30.0), n_groups)))
    group = torch.randint(0, n_groups, (N,), generator=g)
    W = rass_mod.rass_weights(deltas, K)
    v = rass_mod.RASSInverseCDF()
    mix = rass_mod.mix_from_weights(W, True, torch.device("cpu"))
    x = v._residual_rows(torch.tensor(deltas), mix, None, group, g, deltas).numpy()
    u = _residual_pit(x, group.numpy(), deltas, K, W)
    assert_cdf(torch.from_numpy(u), lambda t: np.clip(t, 0.0, 1.0), label=f"rass-icdf many deltas K={K}")


@pytest.mark.parametrize("uniform_groups", [[True, True], [False, False], [True, False]])
def test_rejected_outputs_reflect_uniform_rows_and_draw_the_rest(uniform_groups):
    """rejected_outputs (MCRS, MCRS-2): uniform rows get delta - S, the others the residual's draws
    (in rej's order), and the residual is called once at most, never with no rows."""
    from speccheck.verifiers._residual import rejected_outputs

    sel = torch.arange(6, dtype=torch.float64)
    delta = torch.full((6,), 10.0, dtype=torch.float64)
    rows_uniform = torch.tensor([uniform_groups[0]] * 3 + [uniform_groups[1]] * 3)
    rej = torch.tensor([5, 0, 4, 1])
    calls = []

    def residual(rows):
        calls.append(rows.tolist())
        return -100.0 - rows.to(torch.float64)

    out = rejected_outputs(rej, sel, delta, np.array(uniform_groups), rows_uniform, residual)
    expect = [10.0 - r if rows_uniform[r] else -100.0 - r for r in rej.tolist()]
    assert out.tolist() == expect
    assert calls == ([] if all(uniform_groups) else [[r for r in rej.tolist() if not rows_uniform[r]]])


def test_icdf_grid_blocks_and_shared_tables_leave_draws_bit_identical(monkeypatch):
    """The grid path's CPU blocking (BLOCK_CELLS) and shared table builds (GRID_TABLE_CHUNKS)
    only reorganise elementwise work: the draws equal, bit for bit, those of whole-array passes
    with one table build per chunk (1300 groups: 6 chunks, the last one short)."""
    from speccheck.verifiers import _residual as R

    K, n_groups = 4, 1300
    deltas = np.sort(np.exp(np.random.default_rng(5).uniform(np.log(1e-6), np.log(30.0), n_groups)))
    mix = rass_mod.mix_from_weights(rass_mod.rass_weights(deltas, K), True, torch.device("cpu"))
    group = torch.randint(0, n_groups, (3000,), generator=torch.Generator().manual_seed(3))

    def draw():
        g = torch.Generator().manual_seed(17)
        return rass_mod.RASSInverseCDF()._residual_rows(torch.tensor(deltas), mix, None, group, g, deltas)

    blocked = draw()
    monkeypatch.setattr(R, "BLOCK_CELLS", 1 << 30)
    monkeypatch.setattr(R, "GRID_TABLE_CHUNKS", 1)
    whole = draw()
    monkeypatch.setattr(R, "BLOCK_CELLS", 37)
    monkeypatch.setattr(R, "GRID_TABLE_CHUNKS", 3)
    odd = draw()
    assert torch.equal(blocked.view(torch.int64), whole.view(torch.int64))
    assert torch.equal(odd.view(torch.int64), whole.view(torch.int64))


@pytest.mark.parametrize("delta,K", [(0.06, 16), (0.5, 2), (1.0, 4), (2.0, 64), (8.0, 8), (30.0, 3)])
def test_rass_icdf_closed_form_path_inverts_the_exact_cdf(delta, K):
    """The many-group closed-form path (CF_MIN_DELTA <= delta <= HUGE_DELTA): each draw x is the
    inverse residual CDF of its uniform V (sample_icdf's first draw: 1 - rand), F(x) = V to 1e-9
    with F from theory.residual_intervals and theory.cdf_p_omega (independent code)."""
    from speccheck.verifiers import _residual as R

    assert R.CF_MIN_DELTA <= delta <= R.HUGE_DELTA
    n = 4096
    deltas = np.array([delta, 2.0 * delta])  # two groups: the grid path; every row in the first
    W = rass_mod.rass_weights(deltas, K)
    mix = rass_mod.mix_from_weights(W, True, torch.device("cpu"))
    x = rass_mod.RASSInverseCDF()._residual_rows(torch.tensor(deltas), mix, None, torch.zeros(n, dtype=torch.long),
                                                 torch.Generator().manual_seed(K), deltas).numpy()
    V = 1.0 - torch.rand(n, generator=torch.Generator().manual_seed(K), dtype=torch.float64).numpy()
    w = W[0]
    ivs = theory.residual_intervals(delta, K, w)
    F = np.zeros_like(x)
    for lo, hi, _ in ivs:
        xc = np.clip(x, lo, hi)
        p_lo = theory.cdf_p_omega(lo, K, w) if np.isfinite(lo) else 0.0
        F += normal_mass(np.full_like(xc, lo - delta), xc - delta) - (theory.cdf_p_omega(xc, K, w) - p_lo)
    F /= sum(iv.mass for iv in ivs)
    assert np.abs(F - V).max() < 1e-9, np.abs(F - V).max()
