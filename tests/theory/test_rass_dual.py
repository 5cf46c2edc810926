"""Certified optimal RASS weights by LP duality on refined partitions (speccheck.theory.rass.dual).

The certificate is checked three ways: weak duality itself (every y in [0, 1] bounds every omega),
agreement with the Newton solver's certified optimum where that one certifies (K <= 16), and the
papers' sandwich D-GRS <= A* <= i.i.d.-list bound at K in 17..128 (hypothesis).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import special

from speccheck.errors import InputError
from speccheck.theory import acceptance_dgrs, list_bound_iid, rank_weight_solution
from speccheck.theory.acceptance import dgrs_levels
from speccheck.theory.exact import exact_acceptance, law_from_eps, law_from_omega
from speccheck.theory.rass import dual as rd

# what is certified: <= GAP_TOL absolute on every cell of theory/rass_dual_survey.md and of two
# random scans (rass_dual's module doc); hypothesis's cells are held to the same
CERTIFIED_GAP = rd.GAP_TOL


def _dgrs_rejection(d: float, K: int) -> float:
    return float(dgrs_levels(d, K).G[-1])


def _check_sandwich(sol, d: float, K: int) -> None:
    """finite, weights on the simplex, gap >= 0 certified, D-GRS <= A <= i.i.d.-list bound."""
    assert np.all(np.isfinite(sol.omega)) and np.all(sol.omega >= 0) and abs(sol.omega.sum() - 1) < 1e-12
    assert np.isfinite(sol.acceptance) and np.isfinite(sol.rejection) and np.isfinite(sol.gap)
    assert 0.0 <= sol.gap <= CERTIFIED_GAP, (d, K, sol.gap)
    assert sol.upper_bound == sol.acceptance + sol.gap
    dgrs = float(acceptance_dgrs(d, K))
    if dgrs >= 0.5:  # the small side: 1 - A against D-GRS's rejection G_{K+1} (relative at any delta)
        assert sol.rejection <= _dgrs_rejection(d, K) * (1 + 1e-12) + 1e-320, (d, K, sol.rejection)
    elif dgrs < 0.5:
        assert sol.acceptance >= dgrs * (1 - 1e-12), (d, K, sol.acceptance, dgrs)
    assert sol.acceptance <= float(list_bound_iid(d, K)) * (1 + 1e-12) + 1e-300, (d, K)


DELTAS = st.one_of(st.sampled_from([0.0, 5e-324, 1e-300, 1e-200, 1e-12, 1e-9, 40.0, 85.0]),
                   st.floats(min_value=0.0, max_value=40.0, allow_nan=False))


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(d=DELTAS, K=st.integers(min_value=17, max_value=128))
def test_certified_weights_sandwiched_between_dgrs_and_iid_bound(d, K):
    _check_sandwich(rd.certified_rank_weights(d, K), d, K)


@pytest.mark.parametrize("K,d", [(17, 1e-12), (24, 0.7), (32, 2.0), (32, 4.0), (32, 6.0), (48, 3.0), (48, 4.0),
                                 (48, 8.0), (64, 1.0), (64, 3.0), (96, 12.0), (128, 1e-12), (128, 40.0)])
def test_certified_to_the_stated_gap(K, d):
    sol = rd.certified_rank_weights(d, K)
    _check_sandwich(sol, d, K)
    assert sol.gap <= rd.GAP_TOL, (K, d, sol.gap)


@pytest.mark.parametrize("K", [2, 4, 8, 16])
@pytest.mark.parametrize("d", [1e-9, 0.3, 1.0, 2.5, 6.0])
def test_agrees_with_the_newton_solution_within_both_gaps(K, d):
    dual = rd.certified_rank_weights(d, K)
    newton = rank_weight_solution(d, K)
    slack = 1e-14 * min(1.0, dual.acceptance, dual.rejection) + 1e-300
    assert dual.acceptance <= newton.upper_bound + slack
    assert newton.acceptance <= dual.upper_bound + slack
    assert dual.gap <= rd.GAP_TOL


def test_weak_duality_holds_for_any_y_and_omega():
    # A(omega) <= U(y) and 1 - A(omega) >= L(y) for random omega and random y in [0, 1]
    rng = np.random.default_rng(13)
    K, d = 8, 1.3
    masses = rd.CellMasses(d, K, rd.base_edges(d, K))
    for _ in range(20):
        omega = rng.dirichlet(np.ones(K))
        res = exact_acceptance(law_from_omega(omega), np.array([d]))
        bound = rd.dual_bound(masses, rng.uniform(0.0, 1.0, masses.Q.size))
        assert res.acceptance[0] <= bound.upper and res.rejection[0] >= bound.lower


def test_indicator_dual_at_the_optimum_is_tight():
    # y = 1{q > p_omega*} on a partition holding the optimum's crossings: U = A* up to the gap
    d, K = 1.0, 8
    sol = rd.certified_rank_weights(d, K)
    edges = rd.refined_edges(rd.base_edges(d, K), sol.crossings)
    masses = rd.CellMasses(d, K, edges)
    lo = np.concatenate([[-np.inf], edges])
    hi = np.concatenate([edges, [np.inf]])
    mid = np.where(np.isfinite(lo) & np.isfinite(hi), 0.5 * (lo + hi), np.where(np.isfinite(lo), lo + 1, hi - 1))
    log_ratio = np.log(np.maximum(sol.omega @ _rank_densities(mid, K), 1e-300))  # log p_omega / phi
    q_above = d * mid - 0.5 * d * d > log_ratio
    bound = rd.dual_bound(masses, q_above.astype(float))
    assert sol.acceptance <= bound.upper <= sol.acceptance + 1e-9


def _rank_densities(z: np.ndarray, K: int) -> np.ndarray:
    """b_r(Phi(z)) for r = 1..K, shape (K, z.size)."""
    from scipy import special, stats

    u = special.ndtr(z)
    return np.array([stats.beta.pdf(u, r, K - r + 1) for r in range(1, K + 1)])


def test_pure_function_of_delta_and_K_in_any_call_order():
    cells = [(0.4, 24), (3.0, 24), (1e-9, 24)]
    first = [rd.certified_rank_weights(d, K) for d, K in cells]
    rd._solution.cache_clear()
    second = [rd.certified_rank_weights(d, K) for d, K in reversed(cells)][::-1]
    for a, b in zip(first, second):
        assert np.array_equal(a.omega, b.omega) and a.acceptance == b.acceptance and a.gap == b.gap


def test_closed_forms_and_edges():
    zero = rd.certified_rank_weights(0.0, 40)
    assert zero.acceptance == 1.0 and zero.gap == 0.0 and np.allclose(zero.omega, 1 / 40)
    rmc = rd.certified_rank_weights(2.0, 1)
    assert rmc.acceptance == pytest.approx(2 * 0.15865525393145707, rel=1e-15)  # 2 Phibar(1)
    far = rd.certified_rank_weights(100.0, 64)
    assert far.acceptance == 0.0 and far.omega[-1] == 1.0
    sub = rd.certified_rank_weights(5e-324, 64)
    assert sub.acceptance == 1.0 and 0.0 <= sub.rejection <= 1e-300 and sub.gap <= 1e-300


@pytest.mark.parametrize("d,K", [(-1.0, 20), (float("nan"), 20), (1.0, 0), (1.0, 129), (1.0, 2.5)])
def test_bad_input_raises_input_error(d, K):
    with pytest.raises(InputError):
        rd.certified_rank_weights(d, K)


def test_optimum_is_non_increasing_in_delta():
    # A*(delta) is non-increasing (q moves away from every p_r): the certified values may only
    # rise by the certificate of the earlier cell
    deltas = [1e-6, 0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 9.0]
    sols = [rd.certified_rank_weights(d, 20) for d in deltas]
    for prev, nxt in zip(sols[:-1], sols[1:]):
        assert nxt.acceptance <= prev.upper_bound


@pytest.mark.parametrize("K,d", [(64, 1e-6), (40, 3.0)])
def test_max_rounds_gives_the_certified_state_after_that_many_rounds(K, d):
    # the rounds are a deterministic sequence: stopping after r rounds returns a valid, certified
    # state; the best weights are kept across rounds, so A can only rise with r, and each state
    # and the full solve bound each other (the anytime form's LPs and polish are leaner than the
    # full solve's, so its rounds need not be the full solve's first ones). (The gap shrinks
    # within the rounds; a round-limited solve whose gap is above GAP_TOL adds the set bound at
    # its end, which the full solve skips once its own rounds certify GAP_TOL, so the reported
    # gaps need not be monotone.)
    full = rd.certified_rank_weights(d, K)
    assert full.gap <= rd.GAP_TOL
    accs = []
    for rounds in range(1, full.iterations + 1):
        sol = rd.certified_rank_weights(d, K, max_rounds=rounds)
        _check_sandwich_loose(sol, d, K)
        assert sol.iterations <= rounds
        accs.append(sol.acceptance)
    assert all(later >= earlier for earlier, later in zip(accs[:-1], accs[1:])), accs
    for rounds, acc in enumerate(accs, 1):
        sol = rd.certified_rank_weights(d, K, max_rounds=rounds)
        assert acc <= full.upper_bound and full.acceptance <= sol.upper_bound
    again = rd.certified_rank_weights(d, K, max_rounds=1)
    assert again.acceptance == rd.certified_rank_weights(d, K, max_rounds=1).acceptance


def _check_sandwich_loose(sol, d: float, K: int) -> None:
    """A round-limited state: weights on the simplex, finite, a gap in [0, 1e-6], D-GRS <= A."""
    assert np.all(sol.omega >= 0) and abs(sol.omega.sum() - 1) < 1e-12
    assert np.isfinite(sol.gap) and 0.0 <= sol.gap <= 1e-6
    assert sol.upper_bound == sol.acceptance + sol.gap
    assert sol.rejection <= _dgrs_rejection(d, K) * (1 + 1e-12) or sol.acceptance >= float(acceptance_dgrs(d, K))


@pytest.mark.parametrize("bad", [0, -1, rd.MAX_ROUNDS + 1, 1.5, True, "2"])
def test_bad_max_rounds_raises_input_error(bad):
    with pytest.raises(InputError, match="max_rounds"):
        rd.certified_rank_weights(1.0, 20, max_rounds=bad)


def _moved_off_optimum(d: float, K: int, step: float):
    """The certified optimum, and its weights with ``step`` of the heaviest rank's weight moved
    to the rank of least gradient (first order off the optimum: that rank is not in the support)."""
    sol = rd.certified_rank_weights(d, K)
    grad = exact_acceptance(law_from_omega(sol.omega), np.array([d]), gradient=True).gradient[0]
    omega = sol.omega.copy()
    omega[int(np.argmax(omega))] -= step
    omega[int(np.argmin(grad))] += step
    law = law_from_omega(omega)
    return sol, law, exact_acceptance(law, np.array([d]), gradient=True)


@pytest.mark.parametrize("K,d", [(48, 3.0), (48, 4.0)])
def test_maximin_set_bound_is_second_order_off_the_optimum(K, d):
    # weights 1e-6 off the optimum: their own Frank-Wolfe gap (first order) does not certify,
    # the set {q > p_omega} moved to the maximin (second order) still certifies the optimum
    sol, law, ev = _moved_off_optimum(d, K, 1e-6)
    grad = ev.gradient[0]
    assert grad.max() - grad @ law.omega > 1e-9  # the weights' own set does not certify ...
    lower = rd.polished_lower_bound(d, K, law, ev)
    assert lower <= sol.rejection + sol.gap  # a valid bound on 1 - A* ...
    assert sol.rejection - lower <= rd.GAP_TOL  # ... that the moved set makes tight to GAP_TOL


def test_vertex_moves_recover_weight_moved_off_the_optimum():
    # 1e-6 of the heaviest rank's weight moved to the worst rank (A drops first order): the exact
    # line searches towards single ranks take it back; they never lower A, keep omega on the
    # simplex and never pass the certified optimum
    d, K = 6.0, 32
    sol, law, ev = _moved_off_optimum(d, K, 1e-6)
    assert sol.acceptance - ev.acceptance[0] > 1e-9
    moved_law, moved = rd.vertex_moves(d, law, ev)
    assert np.all(moved_law.omega >= 0) and abs(moved_law.omega.sum() - 1) < 1e-15
    assert moved.acceptance[0] - ev.acceptance[0] > 0.5 * (sol.acceptance - ev.acceptance[0])
    assert moved.acceptance[0] <= sol.upper_bound


@pytest.mark.parametrize("d,K", [(0.5, 24), (1.0, 64), (4.0, 48), (6.0, 32), (10.0, 20)])
def test_each_lp_form_closes_its_duality_gap_on_the_partition(d, K):
    # both LPs are handed to HiGHS as their duals (K rows): the weights are read from the row
    # duals and y from the columns. On the partition's cells the pair must meet strong duality,
    # sum_j min(Q_j, P_j . omega) = U(y), to HiGHS's tolerances (a sign or scale slip in reading
    # either back breaks it by orders of magnitude); the rejection form in both column scalings
    # (the box does not bind at these deltas), the acceptance form with y = 0 on clipped cells
    masses = rd.CellMasses(d, K, rd.base_edges(d, K))
    dgrs = float(acceptance_dgrs(d, K))
    pairs = []
    if dgrs >= 0.5:
        rho = max(_dgrs_rejection(d, K), 1e-3 * min(1.0, d))
        for scaled in (True, False):
            eps, y, box, stuck = rd.lp_rejection_form(masses, K, rho, column_scaled=scaled)
            assert box == pytest.approx(1.0 / (K * masses.scale)) and not stuck
            pairs.append((1.0 / K + eps, [y]))
    else:
        omega, y = rd.lp_acceptance_form(masses, K, dgrs)
        pairs.append((omega, [y, np.where(rd.clipped_cells(masses), 0.0, y)]))
    for omega, ys in pairs:
        assert np.all(omega >= -1e-12) and abs(omega.sum() - 1.0) < 1e-9
        on_cells = float(np.minimum(masses.Q, masses.P @ omega).sum())
        upper = min(rd.dual_bound(masses, y).upper for y in ys)
        assert on_cells <= upper * (1 + 1e-12)  # weak duality
        assert upper - on_cells <= 1e-10 * min(on_cells, 1.0 - on_cells)  # strong, to HiGHS's 1e-10 (relative)


def test_trust_region_walk_reaches_zero_weights_where_the_box_form_stops():
    """K = 128, delta = 3e-7: HiGHS solves the box form only in boxes far inside omega >= 0
    (e >= -1/(K s)), so its weights stay >= 0.5/K; the walk of centred LPs reaches weights 0 on
    dozens of ranks and a lower rejection on the cells, with a y that nearly closes the LP's
    duality gap (the box form's y bounds nothing useful there)."""
    d, K = 3e-7, 128
    masses = rd.CellMasses(d, K, rd.base_edges(d, K))
    s = masses.scale
    rho = max(_dgrs_rejection(d, K), 1e-3 * d)
    eps, _, box, _ = rd.lp_rejection_form(masses, K, rho)
    assert rd._box_binds(eps, box, s, K) and np.min(1.0 / K + eps) > 0.5 / K

    def on_cells(e):
        return float(np.maximum(masses.D_scaled * s - masses.P @ e, 0.0).sum())

    walked, y = rd.trust_region_walk(masses, K, rho, eps, (True,), box)
    omega = 1.0 / K + walked
    assert omega.min() >= -1e-15 and np.sum(omega <= 1e-15) >= 10
    assert on_cells(walked) < 0.9 * on_cells(eps)
    lower = rd.dual_bound(masses, y).lower
    assert lower <= on_cells(walked) < 1.05 * lower  # weak duality; within 5% of strong


def test_band_cell_is_certified(monkeypatch):
    # the survey's worst cell before the trust-region walk (2.0e-11: weights stuck in a box)
    sol = rd.certified_rank_weights(3e-7, 128)
    assert sol.gap <= rd.GAP_TOL and np.sum(sol.omega == 0) >= 10
    _check_sandwich(sol, 3e-7, 128)
    # where the walk solves nothing (HiGHS failing every step) the first pass's weights come back
    # with the gap they certify: valid, honest, not 1e-12
    monkeypatch.setattr(rd, "trust_region_walk", lambda *args: None)
    rd._solution.cache_clear()
    stuck = rd.certified_rank_weights(3e-7, 128)
    rd._solution.cache_clear()
    assert np.all(stuck.omega >= 0) and abs(stuck.omega.sum() - 1) < 1e-12
    assert stuck.rejection >= sol.rejection - sol.gap  # weak duality against the certified optimum
    assert stuck.gap > rd.GAP_TOL and stuck.rejection - stuck.gap <= sol.rejection


@pytest.mark.parametrize("K", [17, 64, 96, 121, 128])
def test_markov_dual_gives_every_rank_half_the_mass(K):
    """Markov's canonical sign function is orthogonal to polynomials of degree < n: with y on
    alternate cells every rank's mass on {y = 1} is 1/2 (to the masses' precision, a few ulp at
    any K <= 128), so the bound is int y (q - phi), with y = 0 on the first cell, 1 on the last."""
    n = K if K % 2 else K + 1
    k = np.arange(1, n + 1)
    edges = special.ndtri(0.5 * (1.0 - np.cos(k * np.pi / (n + 1))))
    masses = rd.CellMasses(1e-7, K, edges)
    y = (np.arange(n + 1) % 2).astype(float)
    assert np.max(np.abs(y @ masses.P - 0.5)) <= 128 * 2.0 ** -52
    assert np.max(np.abs(masses.P.sum(axis=0) - 1.0)) <= 32 * 2.0 ** -52
    bound = rd.markov_dual(1e-7, K)
    assert bound.lower == pytest.approx(float(y @ (masses.D_scaled * masses.scale)), rel=1e-6)


@pytest.mark.parametrize("K,d", [(17, 1e-9), (33, 1e-6), (64, 1e-8), (121, 1.25376588523771e-8), (128, 1e-3)])
def test_markov_dual_is_a_valid_lower_bound(K, d):
    sol = rd.certified_rank_weights(d, K)
    assert 0.0 < rd.markov_dual(d, K).lower <= sol.rejection


def test_markov_dual_is_tight_as_delta_goes_to_zero():
    """At K = 17 the polynomial interpolating Phi^-1 at the canonical points (Bernstein coefficients
    |e_r| < 1.5, computed here in mpmath) gives feasible weights 1/K + delta e for delta <= 1e-3:
    its exact 1 - A and the Markov bound agree to O(delta), so both are the optimum there."""
    import mpmath as mp

    K = 17
    with mp.workdps(60):
        nodes = [(1 - mp.cos(k * mp.pi / (K + 1))) / 2 for k in range(1, K + 1)]
        basis = mp.matrix([[K * mp.binomial(K - 1, r) * u ** r * (1 - u) ** (K - 1 - r) for r in range(K)]
                           for u in nodes])
        e = mp.lu_solve(basis, mp.matrix([mp.sqrt(2) * mp.erfinv(2 * u - 1) for u in nodes]))
    e = np.array([float(v) for v in e])
    assert np.max(np.abs(e)) < 1.5
    for d in (1e-6, 1e-4):
        rej = float(exact_acceptance(law_from_eps(d * e), np.array([d])).rejection[0])
        lower = rd.markov_dual(d, K).lower
        assert lower <= rej <= lower * (1.0 + 10.0 * d), (d, lower, rej)
        assert rd.certified_rank_weights(d, K).rejection <= rej * (1.0 + 1e-9)
