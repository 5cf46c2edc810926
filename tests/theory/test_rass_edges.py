"""RASS at the edges (issue 29.2): tiny delta, gaps relative to a tiny 1 - A, the reported 1 - A
being that of the returned weights.

Witnesses are built here without the solvers (exact evaluation of explicit weights), so every
check compares the solver with something it did not produce."""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import special

from speccheck.errors import InputError
from speccheck.theory import exact
from speccheck.theory.acceptance import dgrs_levels
from speccheck.theory.rass import acceptance_rass, rank_weight_solution, rejection_rass
from speccheck.theory.rass.certificate import markov_edges, markov_lower_bound
from speccheck.theory.rass.dual import certified_rank_weights, upper_gap

TINY_DELTAS = (1e-300, 1e-200, 1e-100, 1e-30, 1e-14)


def _dgrs_rejection(d: float, K: int) -> float:
    return float(dgrs_levels(d, K).G[-1])


def _markov_witness(d: float, K: int) -> float:
    """1 - A of the weights 1/K + delta e, e interpolating Phi^-1 at the zeros of U_n(1 - 2u)
    (least squares, sum e = 0; n = K or K + 1, odd), evaluated exactly: feasible weights made
    without the solver; plus the float64 evaluator's floor for them, a quarter ulp of sum |eps|
    per crossing (its error measured against mpmath at K = 8..64: <= 0.1 ulp per crossing)."""
    n = K if K % 2 else K + 1
    u = np.sin(0.5 * np.arange(1, n + 1) * np.pi / (n + 1)) ** 2
    r = np.arange(1, K + 1)
    B = np.exp(exact.log_coef(K) + (r - 1) * np.log(u)[:, None] + (K - r) * np.log1p(-u)[:, None])
    M = np.vstack([B, np.ones(K)])
    scale = np.abs(M).max(axis=0)
    e = np.linalg.lstsq(M / scale, np.concatenate([special.ndtri(u), [0.0]]), rcond=None)[0] / scale
    eps = d * (e - e.mean())
    assert np.all(1.0 / K + eps >= 0.0)
    law = exact.law_from_eps(eps)
    res = exact.exact_acceptance(law, np.array([d]))
    floor = 0.25 * 2.0 ** -52 * (np.isfinite(res.crossings[0]).sum() + 1) * float(np.abs(eps).sum())
    return float(res.rejection[0]) + floor


@pytest.mark.parametrize("d", TINY_DELTAS)
def test_rass_beats_dgrs_in_rejection_at_tiny_delta(d):
    # was: at delta = 1e-300 the K <= 16 solver stayed at uniform weights (1 - A up to 14x D-GRS's)
    for K in range(2, 17):
        sol = rank_weight_solution(d, K)
        assert sol.rejection <= _dgrs_rejection(d, K), (d, K, sol.rejection)
        # certified relative to 1 - A itself (Markov's bound), not only absolutely
        assert sol.relative_gap <= 1e-10, (d, K, sol.gap, sol.rejection)
        assert sol.rejection - sol.gap <= _markov_witness(d, K)


@pytest.mark.parametrize("K", [17, 24, 64, 128])
def test_large_k_gap_is_true_at_tiny_delta(K):
    # was: K = 64, delta = 1e-14 claimed 1 - A = 2.81e-18 with gap 4e-32 (the bound U - A with A
    # rounded to 1.0), while explicit feasible weights reach 1.96e-18 (+ 0.08e-18 for rounding);
    # K = 24 claimed 1.015e-17 - 0 against 8.98e-18
    d = 1e-14
    sol = certified_rank_weights(d, K)
    witness = _markov_witness(d, K)
    assert sol.rejection - sol.gap <= witness, (K, sol.rejection, sol.gap, witness)
    assert sol.rejection <= _dgrs_rejection(d, K)
    assert 0.0 <= sol.relative_gap <= 1.0


def test_upper_gap_does_not_vanish_when_acceptance_rounds_to_one():
    assert upper_gap(1.0, 1.0, 2.8e-18) == 2.8e-18
    assert upper_gap(1.0 - 2.0 ** -53, 1.0, 2.8e-18) == pytest.approx(2.8e-18 - 2.0 ** -53, rel=1e-15)
    assert upper_gap(0.3, 0.25, 0.75) == pytest.approx(0.05)


@pytest.mark.parametrize("d,K", [(1e-14, 16), (1e-12, 20), (1e-9, 40), (1e-6, 24), (0.5, 8), (1e-300, 8)])
def test_reported_values_are_those_of_the_returned_weights(d, K):
    # was: 1 - A off the returned weights by 1e-5 relative (K > 16, delta <~ 1e-6): the solver's
    # evaluation path (with gradients) rounds differently where 1 - A is tiny beside |deviation|
    # (an expansion where float64 cannot state the weights: Markov's at K = 20, delta = 1e-12)
    sol = rank_weight_solution(d, K)
    assert rejection_rass(d, K, deviation=sol.deviation_expansion) == sol.rejection
    assert acceptance_rass(d, K, deviation=sol.deviation_expansion) == sol.acceptance
    assert np.allclose(1.0 / K + sol.deviation, sol.omega, rtol=0.0, atol=1e-15)


def test_deviation_argument_is_validated():
    with pytest.raises(InputError):
        rejection_rass(0.1, 4, deviation=[0.1, 0.0, 0.0, 0.0])  # does not sum to 0
    with pytest.raises(InputError):
        rejection_rass(0.1, 4, deviation=[-0.5, 0.5, 0.0, 0.0])  # weight -0.25
    with pytest.raises(InputError):
        rejection_rass(0.1, 4, [0.25] * 4, deviation=[0.0] * 4)  # both given
    assert rejection_rass(0.1, 4, deviation=[0.0] * 4) == pytest.approx(float(rejection_rass(0.1, 4, [0.25] * 4)),
                                                                       rel=1e-13)


@pytest.mark.parametrize("d,K", [(1e-14, 64), (1e-14, 128), (1e-3, 128), (0.5, 2), (3.0, 5), (1e-14, 16), (1e-14, 24)])
def test_markov_lower_bound_against_mpmath(d, K):
    """L = int_S (q - phi) on Markov's set at 50 digits: the float64 bound is below it and within
    1e-8 relative (relative precision where 1 - A* ~ 1e-19; 1e-10 at K <= 24)."""
    n = K if K % 2 else K + 1
    with mp.workdps(50):
        dm = mp.mpf(d)
        z = [mp.sqrt(2) * mp.erfinv(2 * mp.sin(k * mp.pi / (2 * (n + 1))) ** 2 - 1) for k in range(1, n + 1)]
        assert max(abs(float(a) - b) for a, b in zip(z, markov_edges(K))) <= 1e-14
        exact_L = mp.fsum((1 if i % 2 == 0 else -1) * (mp.ncdf(zk) - mp.ncdf(zk - dm)) for i, zk in enumerate(z))
    L = markov_lower_bound(d, K)
    assert L <= float(exact_L)
    assert L >= float(exact_L) * (1.0 - (1e-10 if K <= 24 else 1e-8))


def test_markov_lower_bound_is_below_feasible_weights():
    # a lower bound on 1 - A*: below 1 - A of any weights (here the witnesses and D-GRS-free random ones)
    rng = np.random.default_rng(0)
    for K in (3, 8, 17, 32):
        for d in (1e-8, 1e-3, 0.3, 2.0):
            L = markov_lower_bound(d, K)
            assert L <= float(rejection_rass(d, K, rng.dirichlet(np.ones(K))))
            sol = rank_weight_solution(d, K)
            # the claimed 1 - A may sit below 1 - A* by the evaluator's rounding (which the gap allows for)
            assert L <= sol.rejection + sol.gap


@pytest.mark.parametrize("d", [5e-324, 1e-315, 1e-310])
def test_subnormal_delta(d):
    for K in (2, 8, 13, 64):
        sol = rank_weight_solution(d, K)
        assert 0.0 <= sol.gap <= sol.rejection
        assert sol.rejection - sol.gap <= markov_lower_bound(d, K) + 1e-323 or sol.gap == sol.rejection
        if d >= 1e-310:
            assert sol.rejection <= _dgrs_rejection(d, K)


def test_relative_gap_property():
    sol = rank_weight_solution(1e-14, 8)
    assert sol.relative_gap == pytest.approx(sol.gap / sol.rejection)
    assert math.isfinite(sol.relative_gap)
    assert rank_weight_solution(0.0, 4).relative_gap == 0.0


def test_theory_table_reports_the_relative_gap():
    from speccheck.theory.table import theory_table

    (row,) = theory_table([1e-14], [64], mcrs_G=None)
    sol = rank_weight_solution(1e-14, 64, max_iter=row["rass_max_iter"])
    assert row["rass_rejection"] == sol.rejection and row["rass_certified_gap"] == sol.gap
    assert row["rass_relative_gap"] == sol.relative_gap > 1e-6
    assert "certified gap" in row["note"] and "of min(A, 1 - A)" in row["note"]
    (row,) = theory_table([1e-300], [8], mcrs_G=None)
    assert row["rass_relative_gap"] <= 1e-10 and row["rass_rejection"] <= _dgrs_rejection(1e-300, 8)


def test_theory_command_prints_the_api_calls_certified_gap(capsys):
    # issue 29.2: the command's RASS row is one API call, rank_weight_solution(delta, K,
    # max_iter=rass_budget(K)), and prints its acceptance and certified gap unchanged (here K =
    # 128, the cell; the budgeted anytime form there: a valid gap, the call named in the note)
    import json

    from speccheck.cli import main
    from speccheck.theory.table import rass_budget

    d, K = 0.0746, 128
    assert main(["theory", "--delta", str(d), "--K", str(K), "--no-mcrs", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    api = rank_weight_solution(d, K, max_iter=rass_budget(K))
    assert row["rass_max_iter"] == rass_budget(K) is not None
    assert row["rass"] == api.acceptance and row["rass_rejection"] == api.rejection
    assert row["rass_certified_gap"] == api.gap and row["rass_relative_gap"] == api.relative_gap
    assert row["omega"] == [round(float(w), 6) for w in api.omega]
    assert 0.0 < api.gap <= 1e-10  # four rounds certify 6.5e-12 here (one round: 1.6e-7; the full solve 1.9e-13)
    assert main(["theory", "--delta", str(d), "--K", str(K), "--no-mcrs"]) == 0
    text = capsys.readouterr().out
    assert f"certified gap {api.gap:.2g}" in text and f"rank_weight_solution({d!r}, {K})" in text


@pytest.mark.parametrize("K", [22, 32, 64, 128])
def test_subnormal_delta_beats_dgrs_at_high_precision(K):
    """Issue 38.1: at delta = 2.5e-320 RASS returned uniform weights, 1 - A ~20x (K = 22) to ~135x
    (K = 128) D-GRS's. Now the solution at 2^-1022 scaled into the linear regime: its 1 - A is
    below D-GRS's (mpmath, 400 digits, exact recursion), and the gap covers the subnormal rounding."""
    import mpmath as mp

    from research.reference import mp_acceptance_dgrs

    d = 2.5e-320
    sol = rank_weight_solution(d, K)
    with mp.workdps(400):
        dgrs = float(1 - mp_acceptance_dgrs(mp.mpf(d), K))
    assert 0.0 < dgrs and sol.rejection <= dgrs
    assert 0.0 <= sol.gap and sol.rejection - sol.gap <= markov_lower_bound(d, K) + 1e-323
