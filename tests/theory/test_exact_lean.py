"""The single-delta evaluation path of speccheck.theory.exact (issue 13, speed) against the
vectorised one and against direct formulas: same crossings, same masses, to rounding."""

import numpy as np
import pytest
from scipy import special, stats

from speccheck.theory import exact


def _random_law(rng: np.random.Generator, K: int, sparse: bool) -> exact.RankLaw:
    w = rng.dirichlet(np.full(K, 0.5 if sparse else 30.0))
    if sparse:
        w[rng.random(K) < 0.25] = 0.0
    w = w / w.sum() if w.sum() > 0 else np.full(K, 1.0 / K)
    return exact.law_from_omega(w)


def _direct_curve(law: exact.RankLaw, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """L and L' from the per-rank posterior (no shortcut): L = log sum_r omega_r b_r(Phi(z)),
    L' = sum_r pi_r g_r."""
    K = law.K
    r = np.arange(1, K + 1)
    log_u, log_v = special.log_ndtr(z)[:, None], special.log_ndtr(-z)[:, None]
    with np.errstate(divide="ignore"):
        t = law.log_coef + (r - 1) * log_u + (K - r) * log_v + np.log(law.omega)
    L = special.logsumexp(t, axis=1)
    post = np.exp(t - L[:, None])
    log_phi = stats.norm.logpdf(z)[:, None]
    g = (r - 1) * np.exp(log_phi - log_u) - (K - r) * np.exp(log_phi - log_v)
    return L, np.sum(post * g, axis=1)


@pytest.mark.parametrize("seed", range(4))
def test_curve_matches_the_posterior_formulas(seed):
    rng = np.random.default_rng(seed)
    law = _random_law(rng, int(rng.integers(2, 17)), sparse=bool(seed % 2))
    z = np.concatenate([rng.uniform(-8, 8, 50), [-39.0, -20.0, 0.0, 20.0, 39.0]])
    c = exact.curve(law, z)
    L, dL = _direct_curve(law, z)
    np.testing.assert_allclose(c.L, L, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(c.dL, dL, rtol=1e-9, atol=1e-11)
    # L'' against a central difference of L' (step 1e-5: truncation ~1e-10, rounding ~1e-11)
    h = 1e-5
    inner = z[np.abs(z) < 8]
    fd = (exact.curve(law, inner + h).dL - exact.curve(law, inner - h).dL) / (2 * h)
    np.testing.assert_allclose(exact.curve(law, inner).d2L, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("seed", range(4))
def test_curve_forms_agree_on_every_branch(seed):
    # the three forms of L (deviation form where |P - 1| <= 1/2, the direct sum of positive terms
    # sum omega_r b_r elsewhere, logs where that sum is below DEEP_P), on the scan grid's terms
    # (convexity_pieces) and from the moment columns (curve), against the per-rank posterior
    rng = np.random.default_rng(500 + seed)
    K = int(rng.integers(3, 17))
    w = rng.dirichlet(np.full(K, 0.5))
    w[0] = w[-1] = 0.0  # no mass on the extreme ranks: P vanishes like Phi(z) or Phibar(z) in the tails
    law = exact.law_from_omega(w / w.sum())
    basis = exact._grid_basis(K, 41.0)
    dev = basis.b @ law.eps
    P = basis.b @ law.omega
    near, deep = np.abs(dev) <= 0.5, P < exact.DEEP_P
    assert near.sum() >= 10 and (~near & ~deep).sum() >= 10 and deep.sum() >= 10  # every branch taken
    L, dL = _direct_curve(law, basis.z)
    for c in (exact._curve_terms(law, basis, 2), exact.curve(law, basis.z)):
        finite = np.isfinite(L)
        assert np.array_equal(np.isfinite(c.L), finite)
        np.testing.assert_allclose(c.L[finite], L[finite], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(c.dL[finite], dL[finite], rtol=1e-9, atol=1e-11)
    terms, direct = exact._curve_terms(law, basis, 2), exact.curve(law, basis.z)
    np.testing.assert_allclose(terms.d2L, direct.d2L, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_single_delta_crossings_equal_the_vectorised_search(seed):
    # crossings_one (the solver's path) and crossings_batch (vectorised over delta) find the
    # same crossings on random weights, near-uniform and sparse, K = 2..16
    rng = np.random.default_rng(100 + seed)
    law = _random_law(rng, int(rng.integers(2, 17)), sparse=bool(seed % 2))
    deltas = np.array([1e-9, 1e-3, 0.05, 0.3, 1.0, 2.5, 6.0, 15.0])
    pieces = exact.convexity_pieces(law, float(deltas.max()) + exact.Z_PAD)
    batch = exact.crossings_batch(law, deltas, pieces)
    for i, d in enumerate(deltas):
        one = exact.crossings_one(law, float(d), pieces)
        ref = batch[i][np.isfinite(batch[i])]
        assert one.size == ref.size, (d, one, ref)
        np.testing.assert_allclose(one, ref, rtol=0, atol=1e-12 * max(1.0, float(d)))


@pytest.mark.parametrize("seed", range(6))
def test_single_delta_evaluation_equals_the_vectorised_one(seed):
    rng = np.random.default_rng(200 + seed)
    law = _random_law(rng, int(rng.integers(2, 17)), sparse=bool(seed % 2))
    deltas = np.array([1e-12, 1e-4, 0.02, 0.4, 1.7, 5.0, 30.0])
    many = exact.exact_acceptance(law, deltas, gradient=True)
    for i, d in enumerate(deltas):
        one = exact.exact_acceptance(law, np.array([d]), gradient=True)
        assert one.acceptance[0] == pytest.approx(many.acceptance[i], rel=1e-13, abs=1e-300)
        assert one.rejection[0] == pytest.approx(many.rejection[i], rel=1e-12, abs=1e-300)
        np.testing.assert_allclose(one.gradient[0], many.gradient[i], rtol=1e-11, atol=1e-15)
        # the per-piece masses add up: rank masses to 1 per rank, q's to 1, residuals to 1 - A
        pm = one.pieces
        np.testing.assert_allclose(pm.rank_mass.sum(axis=0), 1.0, atol=1e-13)
        assert pm.q_mass.sum() == pytest.approx(1.0, abs=1e-13)
        assert pm.residual.sum() == pytest.approx(one.rejection[0], rel=1e-10, abs=1e-300)


def test_rank_tails_at_infinite_points_and_complement():
    x = np.array([-np.inf, -3.0, 0.0, 0.7, np.inf])
    lower, upper = exact.rank_tails(6, x)
    np.testing.assert_array_equal(lower[0], 0.0)
    np.testing.assert_array_equal(upper[0], 1.0)
    np.testing.assert_array_equal(lower[-1], 1.0)
    np.testing.assert_array_equal(upper[-1], 0.0)
    np.testing.assert_allclose(lower + upper, 1.0, atol=1e-15)
    r = np.arange(1, 7)
    np.testing.assert_allclose(lower[1:-1], stats.beta(r, 7 - r).cdf(stats.norm.cdf(x[1:-1])[:, None]), rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_third_derivative_matches_a_difference_of_the_second(seed):
    # L''' (used to refine the inflection points) against a central difference of L''
    rng = np.random.default_rng(300 + seed)
    law = _random_law(rng, int(rng.integers(2, 17)), sparse=bool(seed % 2))
    z = np.linspace(-6.0, 6.0, 41)
    h = 1e-4
    fd = (exact.curve(law, z + h).d2L - exact.curve(law, z - h).d2L) / (2 * h)
    np.testing.assert_allclose(exact.curve(law, z, 3).d3L, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("K", [1, 2, 8, 16, 64, 128])
def test_grid_basis_is_the_basis_of_the_scan_grid(K):
    # the per-K table (nodes below BASE_SPLIT) plus the per-delta tail is the scan grid's basis, bit for bit
    for d in [0.0, 1e-12, 0.3, 6.0, 39.0, 80.0]:
        z_hi = d + exact.Z_PAD
        cached = exact._grid_basis(K, z_hi)
        direct = exact._basis_at(K, exact.scan_grid(K, z_hi))
        for a, b in zip(cached, direct):
            np.testing.assert_array_equal(a, b)


def test_inflection_points_are_zeros_of_the_second_derivative():
    rng = np.random.default_rng(7)
    law = _random_law(rng, 9, sparse=False)
    pieces = exact.convexity_pieces(law, 41.0)
    inner = pieces.edges[1:-1]
    assert inner.size >= 2
    c = exact.curve(law, inner, 3)
    # within 1e-5 of a zero of L'' (Newton's last correction), refined further by the check here
    assert np.all(np.abs(c.d2L / c.d3L) <= 1e-5 * np.maximum(1.0, np.abs(inner)))


def test_small_normal_masses_equal_the_general_ones():
    # the one-delta path's normal masses (branches selected, not scattered): same formula per
    # entry, so equal to rounding, including infinite ends, tails and intervals of width 1e-13
    from speccheck.theory.normal import normal_mass, normal_mass_below, normal_mass_below_small, normal_mass_small

    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 20))
        x = np.sort(rng.normal(0, 4, size=(n, 2)) * rng.choice([1e-13, 1e-3, 1.0, 10.0], size=(n, 1)), axis=1)
        x += rng.normal(0, 3, size=(n, 1))
        a, b = x[:, 0].copy(), x[:, 1].copy()
        a[rng.random(n) < 0.1] = -np.inf
        b[rng.random(n) < 0.1] = np.inf
        np.testing.assert_allclose(normal_mass_small(a, b), normal_mass(a, b), rtol=2e-15, atol=0)
        width = float(abs(rng.normal()) * rng.choice([0.0, 1e-13, 1e-3, 1.0, 10.0]))
        pts = rng.normal(0, 5, size=n)
        np.testing.assert_allclose(normal_mass_below_small(pts, width), normal_mass_below(pts, width),
                                   rtol=2e-15, atol=0)


def test_scan_grid_tail_is_the_scan_grid_above_the_split():
    for K in (1, 8, 128):
        for z_hi in (exact.Z_PAD, exact.Z_PAD + 1e-12, exact.Z_PAD + 0.7, exact.Z_PAD + 13.3, exact.Z_PAD + 80.0):
            grid = exact.scan_grid(K, z_hi)
            np.testing.assert_array_equal(exact._scan_grid_tail(K, z_hi), grid[grid >= exact.BASE_SPLIT])
