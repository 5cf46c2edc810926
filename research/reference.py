"""High-precision mpmath references for the closed forms, and the golden tables they write.

    speccheck reproduce golden                        # regenerates theory/golden_*.csv

Computed at ``DPS`` significant digits, independently of the fast numpy code: the D-GRS
recursion in exact form (G_{k+1} = Phibar(tau - delta) - lambda Phibar(tau)), the i.i.d.
bound by root finding on its stationarity condition at high precision.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import mpmath as mp
from numpy.typing import ArrayLike

from speccheck.theory.rass.certificate import RankWeightSolution

DPS = 120
GOLDEN_DELTAS = ["0", "1e-9", "1e-6", "1e-3", "0.01", "0.1", "0.5", "1", "1.5", "2", "3", "4",
                 "6", "8", "12", "20", "30", "40"]
GOLDEN_K = [1, 2, 3, 4, 8, 16, 32, 64]


def _Phibar(x):
    return mp.ncdf(-x)


def mp_acceptance_rmc(delta: mp.mpf | str | float) -> mp.mpf:
    return 2 * _Phibar(mp.mpf(delta) / 2)


def mp_acceptance_dgrs(delta: mp.mpf | str | float, K: int) -> mp.mpf:
    d = mp.mpf(delta)
    if d == 0:
        return mp.mpf(1)
    lam = mp.mpf(0)
    G = mp.mpf(1)
    for _ in range(K):
        lam = lam + G
        tau = mp.log(lam) / d + d / 2
        G = _Phibar(tau - d) - lam * _Phibar(tau)
    return 1 - G


def mp_list_bound_iid(delta: mp.mpf | str | float, K: int) -> mp.mpf:
    d = mp.mpf(delta)
    if d == 0:
        return mp.mpf(1)
    if K == 1:
        return mp_acceptance_rmc(d)
    F = lambda s: mp.log(K) + (K - 1) * mp.log(mp.ncdf(s)) - d * s + d * d / 2  # noqa: E731
    s_up = mp.log(K) / d + d / 2
    # F is concave, F < 0 beyond s_up: bisect for the larger root on [s_peak, s_up]
    dF = lambda s: (K - 1) * mp.npdf(s) / mp.ncdf(s) - d  # noqa: E731
    lo, hi = mp.mpf(-50), s_up
    for _ in range(500):  # peak of F: dF decreasing
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dF(mid) > 0 else (lo, mid)
    peak = lo
    if F(peak) <= 0:
        return mp.mpf(1)
    lo, hi = peak, s_up
    for _ in range(500):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if F(mid) > 0 else (lo, mid)
    s = (lo + hi) / 2
    return (1 - mp.ncdf(s) ** K) + mp.ncdf(s - d)


# ----------------------------------------------------------------- RASS optimum, high precision
RASS_K = [2, 3, 4, 8, 16, 64]
RASS_DPS = 60


def _mp_binomial_terms(u, v, n: int) -> list:
    """C(n, j) u^j v^(n-j), j = 0..n (u = Phi(z), v = Phibar(z) given separately)."""
    # exact integer binomials and running powers (mp.binomial and u ** j per term cost ~5x more)
    up, vp = [mp.mpf(1)], [mp.mpf(1)]
    for _ in range(n):
        up.append(up[-1] * u)
        vp.append(vp[-1] * v)
    return [math.comb(n, j) * up[j] * vp[n - j] for j in range(n + 1)]


class _MPLaw:
    """p_omega at high precision: P(u) = sum_r omega_r b_r(u), its u-derivative and rank CDFs."""

    def __init__(self, omega: list):
        self.w = omega
        self.K = len(omega)

    def uv(self, z):
        return mp.ncdf(z), mp.ncdf(-z)

    def P(self, u, v):
        K = self.K
        t = _mp_binomial_terms(u, v, K - 1)
        return K * mp.fsum(self.w[r] * t[r] for r in range(K))

    def dP(self, u, v):
        K = self.K
        if K == 1:
            return mp.mpf(0)
        t = _mp_binomial_terms(u, v, K - 2)
        return K * (K - 1) * mp.fsum((self.w[k + 1] - self.w[k]) * t[k] for k in range(K - 1))

    def b(self, u, v) -> list:
        K = self.K
        t = _mp_binomial_terms(u, v, K - 1)
        return [K * t[r] for r in range(K)]

    def rank_cdf(self, z) -> list:
        """I_r = P(S_(r) <= z) = P(Bin(K, u) >= r), r = 1..K (sums of positive terms)."""
        if z == mp.inf:
            return [mp.mpf(1)] * self.K
        if z == -mp.inf:
            return [mp.mpf(0)] * self.K
        u, v = self.uv(z)
        t = _mp_binomial_terms(u, v, self.K)
        out, acc = [], mp.mpf(0)
        for j in range(self.K, 0, -1):
            acc += t[j]
            out.append(acc)
        return out[::-1]

    def rank_sf(self, z) -> list:
        """J_r = P(S_(r) > z) = P(Bin(K, u) < r), r = 1..K (the upper tail without cancellation)."""
        if z == mp.inf:
            return [mp.mpf(0)] * self.K
        if z == -mp.inf:
            return [mp.mpf(1)] * self.K
        u, v = self.uv(z)
        t = _mp_binomial_terms(u, v, self.K)
        out, acc = [], mp.mpf(0)
        for j in range(self.K):
            acc += t[j]
            out.append(acc)
        return out


def _mp_F(law: _MPLaw, z, d):
    u, v = law.uv(z)
    P = law.P(u, v)
    F = mp.log(P) - d * z + d * d / 2
    dF = law.dP(u, v) * mp.npdf(z) / P - d
    return F, dF, P


def _mp_pieces(law: _MPLaw, d, roots: list):
    edges = [-mp.inf] + roots + [mp.inf]
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        if a == -mp.inf and b == mp.inf:
            mid = mp.mpf(0)
        elif a == -mp.inf:
            mid = b - 1
        elif b == mp.inf:
            mid = a + 1
        else:
            mid = (a + b) / 2
        out.append((a, b, _mp_F(law, mid, d)[0] < 0))
    return out


def _mp_q_mass(a, b, d):
    lo, hi = a - d, b - d
    if lo >= 0:
        return mp.ncdf(-lo) - mp.ncdf(-hi)
    return mp.ncdf(hi) - mp.ncdf(lo)


def mp_rass_at(omega: list, d: mp.mpf, roots: list) -> dict:
    """A and 1 - A at fixed omega (mp numbers) given its crossings (refined here by Newton):
    A = sum of the smaller law's mass per piece, 1 - A = sum over {q > p} of (Q - P) masses."""
    law = _MPLaw(omega)
    roots = [mp_refine_root(law, c, d) for c in roots]
    cdf = {z: law.rank_cdf(z) for z in [-mp.inf, mp.inf] + roots}
    sf = {z: law.rank_sf(z) for z in [-mp.inf, mp.inf] + roots}
    acc, rej = mp.mpf(0), mp.mpf(0)
    grad = [mp.mpf(0)] * law.K
    above = []  # (rank masses, residual) of every piece where q > p
    for a, b, q_above in _mp_pieces(law, d, roots):
        if a >= 0:
            ranks = [sf[a][r] - sf[b][r] for r in range(law.K)]
        else:
            ranks = [cdf[b][r] - cdf[a][r] for r in range(law.K)]
        p_mass = mp.fsum(w * m for w, m in zip(omega, ranks))
        q_mass = _mp_q_mass(a, b, d)
        if q_above:
            acc += p_mass
            rej += q_mass - p_mass
            grad = [g + m for g, m in zip(grad, ranks)]
            above.append((ranks, q_mass - p_mass))
        else:
            acc += q_mass
    return {"acceptance": acc, "rejection": rej, "gradient": grad, "roots": roots, "above": above}


def mp_certificate(above: list, omega: list) -> mp.mpf:
    """An upper bound on A* - A(omega), the fast code's certificate (``rass.certificate``) at
    high precision: per piece I where q > p its gain is <= theta_I res_I + (1 - theta_I) a_I . (omega' - omega)
    for theta_I in {0, 1}, so A* - A <= sum_I [theta_I res_I - (1 - theta_I) a_I . omega] + max_r c_r,
    c = sum_I (1 - theta_I) a_I; theta by two passes of coordinate descent from theta = 0 (the
    Frank-Wolfe gap); never above 1 - A (theta = 1)."""
    K = len(omega)
    lin = [mp.fsum(w * m for w, m in zip(omega, ranks)) for ranks, _ in above]

    def value(theta: list) -> mp.mpf:
        c = [mp.fsum(ranks[r] for (ranks, _), t in zip(above, theta) if not t) for r in range(K)]
        return mp.fsum(res if t else -li for (_, res), li, t in zip(above, lin, theta)) + max(c)

    theta = [False] * len(above)
    best = value(theta)
    order = sorted(range(len(above)), key=lambda i: -(max(above[i][0]) - above[i][1]))
    for _ in range(2):
        changed = False
        for i in order:
            theta[i] = not theta[i]
            trial = value(theta)
            if trial < best:
                best, changed = trial, True
            else:
                theta[i] = not theta[i]
        if not changed:
            break
    return max(min(best, mp.fsum(res for _, res in above)), mp.mpf(0))


def mp_refine_root(law: _MPLaw, c: mp.mpf | float, d: mp.mpf, iters: int = 60) -> mp.mpf:
    z = mp.mpf(c)
    for _ in range(iters):
        F, dF, _ = _mp_F(law, z, d)
        step = F / dF
        z -= step
        if abs(step) < mp.mpf(10) ** (-(mp.mp.dps - 5)) * max(1, abs(z)):
            break
    return z


def mp_rass_optimum(delta: mp.mpf | str | float, K: int, omega0: ArrayLike, roots0: ArrayLike,
                    newton_steps: int = 8, deviation0: ArrayLike | None = None) -> dict:
    """The RASS optimum at high precision by the same exact method as the fast code: Newton on
    the face {omega_r > 0} of the fast solution (gradient = rank masses on {q > p}, Hessian
    -sum_c q(c) w_c w_c^T / |F'(c)|), crossings refined by Newton at every step.

    ``deviation0`` (omega0 - 1/K as the fast solver holds it) seeds omega = 1/K + deviation in
    full precision: at tiny delta the deviations are ~delta and omega0's float rounding alone
    would move 1 - A by ~1e-7 relative (K = 64, delta = 1e-9). The result carries ``gap``, an
    upper bound on A* - A (:func:`mp_certificate`)."""
    d = mp.mpf(delta)
    support = [r for r in range(K) if omega0[r] > 0]
    if deviation0 is None:
        omega = [mp.mpf(float(w)) if w > 0 else mp.mpf(0) for w in omega0]
    else:
        omega = [mp.mpf(1) / K + mp.mpf(float(e)) if w > 0 else mp.mpf(0) for w, e in zip(omega0, deviation0)]
    total = mp.fsum(omega)
    omega = [w / total for w in omega]
    roots = [mp.mpf(float(c)) for c in roots0]
    res = mp_rass_at(omega, d, roots)
    for _ in range(newton_steps):
        law = _MPLaw(omega)
        roots = res["roots"]
        g = res["gradient"]
        m = len(support)
        H = mp.zeros(m + 1, m + 1)
        for c in roots:
            F, dF, P = _mp_F(law, c, d)
            u, v = law.uv(c)
            b = law.b(u, v)
            scale = mp.npdf(c - d) / abs(dF)
            w = [b[r] / P for r in support]
            for i in range(m):
                for j in range(m):
                    H[i, j] -= scale * w[i] * w[j]
        # scaled by max |H_ii| and regularised like the fast code: H has rank <= #crossings, and a
        # support rank whose b_r is ~0 at every crossing (large delta, K = 64: ~1e-80) gives a
        # numerically zero column (the "matrix is numerically singular" of mp.lu/qr_solve)
        hs = max(abs(H[i, i]) for i in range(m)) or mp.mpf(1)
        for i in range(m):
            for j in range(m):
                H[i, j] /= hs
            H[i, i] -= mp.mpf(10) ** (-(RASS_DPS // 2))
            H[i, m] = H[m, i] = 1
        rhs = mp.matrix([-g[r] / hs for r in support] + [0])
        sol = mp.lu_solve(H, rhs)
        step = [sol[i] for i in range(m)]
        mean = mp.fsum(step) / m
        t = mp.mpf(1)
        for _ in range(40):  # damped: accept only steps that stay feasible and do not lower A
            new = list(omega)
            for i, r in enumerate(support):
                new[r] = omega[r] + t * (step[i] - mean)
            if min(new) >= 0:
                trial = mp_rass_at(new, d, roots)
                if trial["acceptance"] >= res["acceptance"] * (1 - mp.mpf(10) ** (-(RASS_DPS - 10))):
                    break
            t /= 2
        else:
            break
        omega, res = new, trial
        spread = max(res["gradient"][r] for r in support) - min(res["gradient"][r] for r in support)
        if spread < mp.mpf(10) ** (-(RASS_DPS - 15)):
            break
    res["omega"] = omega
    res["gap"] = mp_certificate(res["above"], omega)
    return res


LARGE_K = 16  # above: seeded and certified by the LP-duality solver (speccheck.theory.rass.dual)


def _seed_solution(delta: float, K: int):
    """The fast solver's certified solution that seeds the high-precision one: the Newton solver
    (``rass``) for K <= LARGE_K, the LP-duality solver (``rass_dual``) above."""
    if K <= LARGE_K:
        from speccheck.theory.rass.core import rank_weight_solution

        return rank_weight_solution(delta, K)
    from speccheck.theory.rass.dual import certified_rank_weights

    return certified_rank_weights(delta, K)


def dual_gap(sol: RankWeightSolution, acceptance: mp.mpf, rejection: mp.mpf) -> mp.mpf:
    """A* - A at the high-precision weights, bounded by the float64 LP-duality certificate of the
    seed (``rass_dual``: A* <= A_seed + gap_seed and 1 - A* >= (1 - A_seed) - gap_seed, rigorous
    up to its stated rounding allowance), read on the side that is small."""
    if acceptance >= mp.mpf("0.5"):
        return max(rejection - (mp.mpf(sol.rejection) - mp.mpf(sol.gap)), mp.mpf(0))
    return max(mp.mpf(sol.acceptance) + mp.mpf(sol.gap) - acceptance, mp.mpf(0))


def rass_golden_rows(deltas: Iterable[str] | None = None, Ks: Iterable[int] | None = None) -> Iterator[dict]:
    """High-precision RASS optimum rows (delta, K, acceptance, rejection, gap) seeded by the fast
    solver (Newton-polished at 60 digits for K <= LARGE_K; evaluated at 60 digits above, where
    the gap is the smaller of the 60-digit certificate and the seed's LP-duality certificate,
    :func:`dual_gap`)."""
    deltas = RASS_DELTAS if deltas is None else deltas
    Ks = RASS_K if Ks is None else Ks
    with mp.workdps(RASS_DPS):
        for K in Ks:
            for ds in deltas:
                if float(ds) == 0.0:
                    continue
                sol = _seed_solution(float(ds), K)
                # above LARGE_K: the seed's weights evaluated at 60 digits (its face has up to K
                # ranks: 60-digit Newton there takes minutes per row); its certificate is the LP's
                steps = 8 if K <= LARGE_K else 0
                res = mp_rass_optimum(ds, K, sol.omega, sol.crossings, newton_steps=steps, deviation0=sol.deviation)
                gap = max(res["gap"], 0)
                if K > LARGE_K:
                    gap = min(gap, dual_gap(sol, res["acceptance"], res["rejection"]))
                yield {"delta": ds, "K": K, "rass": mp.nstr(res["acceptance"], 30),
                       "rass_rejection": mp.nstr(res["rejection"], 30), "rass_gap": mp.nstr(gap, 5)}


RASS_DELTAS = ["1e-12", "1e-9", "1e-6", "1e-3", "0.01", "0.1", "0.5", "1", "1.5", "2", "3", "4", "6", "8", "12",
               "20", "30", "40"]


def golden_rows(deltas: Iterable[str] | None = None, Ks: Iterable[int] | None = None) -> Iterator[dict]:
    deltas = GOLDEN_DELTAS if deltas is None else deltas
    Ks = GOLDEN_K if Ks is None else Ks
    with mp.workdps(DPS):
        for ds in deltas:
            for K in Ks:
                yield {
                    "delta": ds,
                    "K": K,
                    "rmc": mp.nstr(mp_acceptance_rmc(mp.mpf(ds)), 30),
                    "dgrs": mp.nstr(mp_acceptance_dgrs(mp.mpf(ds), K), 30),
                    "iid_bound": mp.nstr(mp_list_bound_iid(mp.mpf(ds), K), 30),
                }


GOLDEN_FIELDS = ["delta", "K", "rmc", "dgrs", "iid_bound", "rass", "rass_rejection", "rass_gap"]


def write_golden(out_dir: str | Path, rass_K: Iterable[int] | None = None) -> Path:
    """Write ``out_dir/golden_acceptance.csv`` (RMC, D-GRS, i.i.d. bound for every row; the RASS
    optimum and its rejection for K in ``rass_K``, default RASS_K) and return its path."""
    rass_K = RASS_K if rass_K is None else list(rass_K)
    deltas = sorted(set(GOLDEN_DELTAS) | set(RASS_DELTAS), key=float)
    rows = list(golden_rows(deltas, GOLDEN_K))
    rass = {(r["delta"], r["K"]): r for r in rass_golden_rows(RASS_DELTAS, rass_K)}
    for r in rows:
        extra = rass.get((r["delta"], r["K"]))
        if float(r["delta"]) == 0.0 and r["K"] in rass_K:
            extra = {"rass": "1.0", "rass_rejection": "0.0", "rass_gap": "0.0"}
        for key in ("rass", "rass_rejection", "rass_gap"):
            r[key] = extra[key] if extra else ""
    out = Path(out_dir) / "golden_acceptance.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        fh.write(
            f"# Golden acceptance values made by `speccheck reproduce golden`\n"
            f"# with mpmath {mp.__version__} at {DPS} significant digits (printed to 30): RMC 2 Phibar(delta/2);\n"
            "# D-GRS 1 - G_{K+1} by the exact recursion; the i.i.d.-list bound by bisection (500 steps)\n"
            "# on the larger root of ln K + (K-1) ln Phi(s) - delta s + delta^2/2 = 0.\n"
            f"# rass, rass_rejection: the optimal-RASS acceptance A and 1 - A at {RASS_DPS} digits, by the\n"
            "# same exact method as the fast code (crossings refined by Newton, closed-form binomial-tail\n"
            "# and normal masses, Newton on the optimality conditions from the fast solver's face).\n"
            "# rass_gap: a certified bound on optimum - rass: the fast code's piecewise certificate at 60\n"
            "# digits; for K = 64 (the LP-duality solver speccheck.theory.rass.dual's weights, evaluated at\n"
            "# 60 digits by the same exact method, no 60-digit Newton) the smaller of that and the solver's\n"
            "# float64 LP-duality bound (A* <= A + gap, 1 - A* >= 1 - A - gap, rigorous up to its stated\n"
            "# rounding allowance) read at the 60-digit rass. rass is the optimum to rass_gap.\n"
        )
        writer = csv.DictWriter(fh, fieldnames=GOLDEN_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return out
