"""Layer 7 of the battery: one law of calls over the space the contract allows, judged by tests
that pool power instead of splitting it.

The calls are drawn by :func:`speccheck.sampler.calls.draw_law` (in the process that runs the
rule: code shaped like a sampler's, nothing of ``speccheck.validation`` imported there). Under
exactness every row's z = s_out - delta is N(0, 1), so its PIT u = Phi(z) is U(0, 1), and its
accepted flag is Bernoulli(declared acceptance), independently of the rows and *whatever the
call it came from*. So the rows of every call pool into one sample, and a defect confined to
part of the call space is a departure in the rows that share a value of some covariate of the
call: the batch size B, delta, K, the position in the batch, the call's index, the instance's
age, the delta pattern, the dtype, the path (``verify`` or ``verify_states``), a fresh or a
long-lived instance, the octave of B.

The tests (each a pure function of the raw arrays returning a frozen result; the layer's judge
turns them into :class:`~speccheck.validation.results.TestResult` s, whose number
:func:`planned_tests` declares, so the Holm count follows from the declarations):

- *strata* (:func:`strata_ks`, :func:`strata_acceptance`): for each covariate family and each
  resolution r in :data:`RESOLUTIONS` (r bins holding equal shares of the rows, for the
  acceptance of the rows with a declared acceptance, ties kept together; categorical families:
  one bin per value), per bin a KS distance of the PIT from
  U(0, 1) (DKW-Massart p-value) and the acceptance excess sum(accepted - declared) (Bernstein
  p-value, variance sum p (1 - p)); a family-resolution is one test, its p-value the smallest
  of its bins' times the number of bins (min-p with Bonferroni: the sparse-effect statistic
  whose null law needs no simulation);
- *scores* (:func:`score_test`): the pooled regression of u - 1/2 and of the acceptance residual
  on each ordinal covariate (its mid-rank, centred): a smooth trend across the whole range is
  one N(0, 1) statistic, not thin bins;
- the mean of z and its score on delta where delta <= 0.1 (exact N(0, 1) tests);
- *pairs* (:func:`pair_test`): products of z of adjacent rows of one call, and of disjoint random
  pairs of rows of one call (rows sharing randomness);
- on the state path, the KS of Phi of the output's projection on a random direction orthogonal
  to the displacement (the part of the state the scalar law does not see).

The power promise (:func:`promise_of`): each strata test rejects, with probability >= the
suite's power, a defect confined to one of its bins whose PIT sup-distance (acceptance shift)
is at least that bin's minimum detectable deviation at the test's per-bin level alpha_t / bins;
the promise is the largest of those MDDs over every bin holding at least a stated share
(:data:`SHARE`) of the layer's rows (of its rows with a declared acceptance, for the shift).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from speccheck.validation.contract import contract_result
from speccheck.validation.results import Promise, TestResult, promise_of
from speccheck.validation.stats import dkw_pvalue_array

__all__ = ["CELL", "LAYER", "RESOLUTIONS", "SHARE", "PairResult", "Promise", "ScoreResult", "StrataAcceptance",
           "StrataKS", "bernstein_pvalue", "contract_results", "covariates", "judge_layer", "outcome", "pair_test",
           "planned_tests", "promise_of", "score_test", "strata_acceptance", "strata_ks", "strata_of"]

LAYER = "L7"
CELL = "law"
RESOLUTIONS = (2, 4, 8, 16)
#: the promise covers every stratum holding at least this share of the rows
SHARE = 0.05
#: ordinal covariates (binned at every resolution, and scored) and categorical ones (one bin per value)
ORDINAL = ("B", "delta", "K", "position", "call", "age")
CATEGORICAL = ("B octave", "pattern", "dtype", "path", "instance")
#: what each covariate is, for the report
MEANING = {"B": "batch size", "delta": "delta (0 its own bin)", "K": "children per row",
           "position": "row position / B", "call": "call index", "age": "instance age (calls served before)",
           "B octave": "floor(log2 B)", "pattern": "delta pattern", "dtype": "input dtype",
           "path": "verify or verify_states", "instance": "fresh or long-lived instance"}
SMALL_DELTA = 0.1


def planned_tests(has_acceptance: bool) -> int:
    """The layer's statistical tests: per kind (PIT, and acceptance when declared) one per
    family-resolution plus all rows pooled, one score per ordinal covariate; the mean of z, its
    score on small delta, two pair tests and the orthogonal-direction KS."""
    per_kind = len(ORDINAL) * len(RESOLUTIONS) + len(CATEGORICAL) + 1 + len(ORDINAL)
    return per_kind * (2 if has_acceptance else 1) + 5


# ------------------------------------------------------------------------- covariates
def covariates(raw: dict) -> dict[str, np.ndarray]:
    """Per row, every covariate of its call (numbers; categorical ones as codes)."""
    call = np.asarray(raw["call"], dtype=np.int64)
    B = np.asarray(raw["call_B"], dtype=np.int64)[call]
    delta = np.asarray(raw["delta"], dtype=np.float64)
    position = np.asarray(raw["position"], dtype=np.int64)
    return {"B": B.astype(np.float64), "delta": delta, "K": np.asarray(raw["call_K"], np.float64)[call],
            "position": (position + 0.5) / B, "call": call.astype(np.float64),
            "age": np.asarray(raw["call_age"], np.float64)[call],
            "B octave": np.floor(np.log2(B)).astype(np.int64),
            "pattern": np.asarray(raw["call_pattern"], np.int64)[call],
            "dtype": np.asarray(raw["call_dtype"], np.int64)[call],
            "path": np.asarray(raw["call_path"], np.int64)[call],
            "instance": np.asarray(raw["call_fresh"], np.int64)[call]}


def strata_of(x: np.ndarray, r: int | None) -> tuple[np.ndarray, int]:
    """(bin per row, number of bins): ``r`` bins holding equal shares of the rows by the rank of
    ``x`` (ties in one bin, so a bin may hold more, and there may be fewer bins), or one bin per
    distinct value (``r`` None)."""
    return _Ranked(x).strata(r)


class _Ranked:
    """A covariate's distinct values and counts, computed once for every resolution and its mid-rank."""

    def __init__(self, x: np.ndarray, groups: np.ndarray | None = None) -> None:
        # ``groups``: x is constant within each group (the rows of one call): rank the groups' values
        if groups is not None:
            first = np.concatenate([[0], np.flatnonzero(groups[1:] != groups[:-1]) + 1])
            size = np.diff(np.concatenate([first, [groups.size]]))
            values, inv_g = np.unique(x[first], return_inverse=True)
            self.values, self.inverse = values, np.repeat(inv_g, size)
            self.counts = np.bincount(self.inverse, minlength=values.size)
        else:
            self.values, self.inverse, self.counts = np.unique(x, return_inverse=True, return_counts=True)

    def strata(self, r: int | None) -> tuple[np.ndarray, int]:
        if r is None or self.values.size <= r:
            return self.inverse.astype(np.int64), int(self.values.size)
        cum = np.cumsum(self.counts) / self.counts.sum()
        value_bin = np.minimum((np.ceil(cum * r - 1e-9) - 1).astype(np.int64), r - 1)  # bin of each distinct value
        value_bin = np.maximum.accumulate(np.maximum(value_bin, 0))
        _, compact = np.unique(value_bin, return_inverse=True)
        return compact[self.inverse].astype(np.int64), int(compact.max()) + 1

    def mid_rank(self) -> np.ndarray:
        cum = np.cumsum(self.counts)
        return ((cum - 0.5 * self.counts) / self.counts.sum())[self.inverse]


# ---------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class StrataKS:
    """Per bin: rows ``n``, KS distance ``D`` of the PIT from U(0, 1), DKW-Massart p-value ``p``."""

    n: np.ndarray
    D: np.ndarray
    p: np.ndarray


@dataclass(frozen=True)
class StrataAcceptance:
    """Per bin: rows ``n`` with a declared acceptance, ``excess`` = sum(accepted - declared),
    ``var`` = sum p (1 - p), two-sided Bernstein p-value ``p``."""

    n: np.ndarray
    excess: np.ndarray
    var: np.ndarray
    p: np.ndarray


@dataclass(frozen=True)
class ScoreResult:
    """sum(w c) / sd: ``statistic`` ~ N(0, 1) under exactness; two-sided ``p``; ``n`` rows."""

    statistic: float
    p: float
    n: int
    sd: float


@dataclass(frozen=True)
class PairResult:
    """Products z_a z_b over ``n`` pairs of rows of one call: mean 0, variance 1 each under
    exactness; ``statistic`` = sum / n^(1/2) ~ N(0, 1); two-sided ``p``."""

    statistic: float
    p: float
    n: int


def strata_ks(u_sorted: np.ndarray, labels_sorted: np.ndarray, n_bins: int) -> StrataKS:
    """KS distance of the PIT from U(0, 1) in every bin. ``u_sorted``: the PIT sorted up;
    ``labels_sorted``: each of those rows' bin (0 .. n_bins - 1)."""
    small = labels_sorted.astype(np.int16 if n_bins < 2 ** 15 else np.int64)  # 16-bit: numpy's radix sort
    perm = np.argsort(small, kind="stable")  # rows grouped by bin, each group still sorted by u
    u = u_sorted[perm]
    n = np.bincount(labels_sorted, minlength=n_bins)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]])
    rank = np.arange(u.size) - np.repeat(starts, n)
    n_row = np.repeat(n, n).astype(np.float64)
    gap = np.maximum((rank + 1) / n_row - u, u - rank / n_row)
    D = np.zeros(n_bins)
    full = n > 0
    D[full] = np.maximum.reduceat(gap, starts[full]) if gap.size else 0.0
    return StrataKS(n=n, D=D, p=np.where(full, dkw_pvalue_array(n, D), 1.0))


def bernstein_pvalue(excess: np.ndarray, var: np.ndarray) -> np.ndarray:
    """Two-sided Bernstein bound on P(|sum(X - p)| >= |excess|) for independent Bernoulli(p_i)
    (each term in [-1, 1], variance sum ``var``): 2 exp(-t^2 / (2 (var + t / 3))), capped at 1."""
    t = np.abs(np.asarray(excess, np.float64))
    v = np.asarray(var, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2.0 * np.exp(-t * t / (2.0 * (v + t / 3.0)))
    return np.where(t > 0, np.minimum(p, 1.0), 1.0)


def bernstein_threshold(var: np.ndarray, level: float) -> np.ndarray:
    """The t with 2 exp(-t^2 / (2 (var + t / 3))) = level: the largest |excess| accepted."""
    L = math.log(2.0 / level)
    v = np.asarray(var, np.float64)
    return L / 3.0 + np.sqrt(L * L / 9.0 + 2.0 * v * L)


def strata_acceptance(accepted: np.ndarray, declared: np.ndarray, labels: np.ndarray, n_bins: int
                      ) -> StrataAcceptance:
    """Acceptance excess per bin over the rows with a declared acceptance."""
    p = np.asarray(declared, np.float64)
    n = np.bincount(labels, minlength=n_bins)
    excess = np.bincount(labels, weights=np.asarray(accepted, np.float64) - p, minlength=n_bins)
    var = np.bincount(labels, weights=p * (1.0 - p), minlength=n_bins)
    return StrataAcceptance(n=n, excess=excess, var=var, p=bernstein_pvalue(excess, var))


def score_test(residual: np.ndarray, variance: np.ndarray | float, c: np.ndarray) -> ScoreResult:
    """The score of a trend of ``residual`` (mean 0, independent rows, ``variance`` each) along
    ``c``: sum(residual c) / sqrt(sum(variance c^2)) ~ N(0, 1) (CLT; rows in the millions)."""
    c = np.asarray(c, np.float64)
    sd = float(np.sqrt(np.sum(np.asarray(variance, np.float64) * c * c)))
    if sd <= 0.0:
        return ScoreResult(0.0, 1.0, int(c.size), 0.0)
    t = float(np.dot(residual, c)) / sd
    return ScoreResult(t, float(special.erfc(abs(t) / math.sqrt(2.0))), int(c.size), sd)


def pair_test(z: np.ndarray, call: np.ndarray, rng: np.random.Generator | None = None) -> PairResult:
    """Adjacent rows of one call (``rng`` None) or disjoint random pairs of rows of one call."""
    if rng is None:
        same = call[1:] == call[:-1]
        prod = (z[:-1] * z[1:])[same]
    else:
        order = np.argsort(call + rng.random(z.size))  # rows of one call together, in random order
        zs, cs = z[order], call[order]
        m = zs.size // 2
        a, b = zs[0:2 * m:2], zs[1:2 * m:2]
        prod = (a * b)[cs[0:2 * m:2] == cs[1:2 * m:2]]
    n = int(prod.size)
    if n == 0:
        return PairResult(0.0, 1.0, 0)
    t = float(prod.sum()) / math.sqrt(n)
    return PairResult(t, float(special.erfc(abs(t) / math.sqrt(2.0))), n)


# ------------------------------------------------------------------------------ judge
def _pit_mdd(n: np.ndarray, level: float, power: float) -> np.ndarray:
    n = np.maximum(np.asarray(n, np.float64), 1.0)
    return np.sqrt(math.log(2.0 / level) / (2.0 * n)) + np.sqrt(math.log(2.0 / (1.0 - power)) / (2.0 * n))


def _acc_mdd(n: np.ndarray, var: np.ndarray, level: float, power: float) -> np.ndarray:
    """Smallest uniform shift of the acceptance in a bin detected with probability >= power:
    the level-``level`` Bernstein threshold plus the one-sided (1 - power) deviation, per row."""
    n = np.maximum(np.asarray(n, np.float64), 1.0)
    return (bernstein_threshold(var, level) + bernstein_threshold(var, 2.0 * (1.0 - power))) / n


def _normal_result(cell: str, test: str, t: float, p: float, n: int, sd: float, alpha: float, power: float,
                   note: str) -> TestResult:
    z_alpha = float(special.ndtri(1.0 - alpha / 2.0))
    mdd = (z_alpha + float(special.ndtri(power))) * sd / max(n, 1) if sd > 0 else math.inf
    return TestResult(cell, test, t, z_alpha, p, mdd, n, passed=abs(t) < z_alpha, note=note, layer=LAYER)


def _where(family: str, r: int | None, x: np.ndarray, labels: np.ndarray, b: int) -> str:
    if family in ORDINAL:
        vals = x[labels == b]
        return f"{family} in [{vals.min():.4g}, {vals.max():.4g}]" if vals.size else f"{family} bin {b}"
    return f"{family} = {int(x[labels == b][0])}" if np.any(labels == b) else f"{family} bin {b}"


def _strata_result(kind: str, family: str, r: int | None, got: StrataKS | StrataAcceptance, x: np.ndarray,
                   labels: np.ndarray, n_bins: int, total: int, alpha: float, power: float) -> TestResult:
    used = got.n > 0  # bins without rows (no declared acceptance there) are no tests
    n_bins = max(int(used.sum()), 1)
    level = alpha / n_bins
    p_min = float(got.p[used].min()) if used.any() else 1.0
    worst = int(np.argmin(np.where(used, got.p, 2.0))) if got.p.size else 0
    if kind == "pit":
        thr = np.sqrt(np.log(2.0 / level) / (2.0 * np.maximum(got.n, 1)))
        stat, mdds = float(got.D[worst]), _pit_mdd(got.n, level, power)
        test = "pit-ks"
    else:
        thr = bernstein_threshold(got.var, level) / np.maximum(got.n, 1)
        stat = float(got.excess[worst] / max(got.n[worst], 1))
        mdds = _acc_mdd(got.n, got.var, level, power)
        test = "acceptance=declared"
    held = got.n >= SHARE * total
    at_share = float(mdds[held].max()) if held.any() else None
    res = "by value" if r is None else f"{r} bins"
    cell = f"{CELL}: {family} ({res})" if family else f"{CELL}: all rows"
    p_value = min(1.0, n_bins * p_min)
    # the test's MDD: over the bins holding the promised share (the weakest bin else)
    mdd = at_share if at_share is not None else (float(np.max(mdds[used])) if used.any() else math.inf)
    r_out = TestResult(cell, test, stat, float(thr[worst]), p_value, mdd,
                       int(got.n.sum()), passed=p_value > alpha, layer=LAYER,
                       note=f"worst bin {_where(family, r, x, labels, worst)}" if family else "")
    r_out.extra.update({"family": family or "all", "resolution": r if r is not None else n_bins, "bins": n_bins,
                        "bin_level": level, "bin_n": [int(v) for v in got.n[used]], "share": SHARE,
                        "mdd_at_share": at_share, "kind": kind})
    return r_out


def judge_layer(raw: dict, *, alpha: float, power: float, seed: int) -> list[TestResult]:
    """The statistics of layer 7 from the raw arrays of :func:`speccheck.sampler.calls.draw_law`
    alone, each at level ``alpha`` (the run's binding per-test level). ValueError when malformed."""
    z = np.asarray(raw["z"], np.float64)
    acc = np.asarray(raw["accepted"], np.int8).astype(bool)
    declared = np.asarray(raw["declared"], np.float64)
    call = np.asarray(raw["call"], np.int64)
    n_calls = np.asarray(raw["call_B"]).size
    if not (z.ndim == 1 and acc.shape == declared.shape == call.shape == z.shape):
        raise ValueError("layer 7 raw outputs: the row arrays differ in shape")
    if z.size == 0 or not np.all(np.isfinite(z)) or call.min() < 0 or call.max() >= n_calls:
        raise ValueError("layer 7 raw outputs: no rows, non-finite z or rows of no call")
    for key in ("call_K", "call_B", "call_age", "call_pattern", "call_dtype", "call_path", "call_fresh"):
        if np.asarray(raw[key]).shape != (n_calls,):
            raise ValueError(f"layer 7 raw outputs: {key} has the wrong shape")
    has_acc = bool(raw.get("has_acceptance"))
    cov = covariates(raw)
    u = special.ndtr(z)
    order = np.argsort(u, kind="stable")
    u_sorted = u[order]
    m = np.isfinite(declared) if has_acc else np.zeros(z.size, bool)
    if has_acc and np.any((declared[m] < 0) | (declared[m] > 1)):
        raise ValueError("layer 7 raw outputs: declared acceptance outside [0, 1]")
    results: list[TestResult] = []
    designs: list[tuple[str, int | None]] = [("", None)]
    designs += [(f, r) for f in ORDINAL for r in RESOLUTIONS] + [(f, None) for f in CATEGORICAL]
    per_call = ("B", "K", "call", "age", "B octave", "pattern", "dtype", "path", "instance")
    in_call_order = bool(np.all(call[1:] >= call[:-1]))
    def ranks(rows: np.ndarray | None) -> dict[str, _Ranked]:
        cm = call if rows is None else call[rows]
        return {f: _Ranked(cov[f] if rows is None else cov[f][rows], cm if (f in per_call and in_call_order) else None)
                for f in ORDINAL + CATEGORICAL}

    ranked = ranks(None)
    judge_acc = has_acc and not raw.get("declared_error") and bool(m.any())
    # the acceptance strata hold equal shares of the rows WITH a declared acceptance (binned among
    # those rows): every bin of a resolution then carries about the same evidence
    ranked_acc = ranks(m) if judge_acc else {}
    for family, r in designs:
        if family:
            labels, n_bins = ranked[family].strata(r)
        else:
            labels, n_bins = np.zeros(z.size, np.int64), 1
        x = cov[family] if family else u
        results.append(_strata_result("pit", family, r, strata_ks(u_sorted, labels[order], n_bins), x, labels,
                                      n_bins, z.size, alpha, power))
        if has_acc:
            if not judge_acc:
                if not family and raw.get("declared_error"):
                    results.append(TestResult(f"{CELL}: all rows", "acceptance=declared", math.nan, math.nan, 0.0,
                                              math.nan, 0, passed=False, note=raw["declared_error"], layer=LAYER))
                continue
            if family:
                labels_m, bins_m = ranked_acc[family].strata(r)
            else:
                labels_m, bins_m = np.zeros(int(m.sum()), np.int64), 1
            got = strata_acceptance(acc[m], declared[m], labels_m, bins_m)
            results.append(_strata_result("acceptance", family, r, got, x[m], labels_m, bins_m, int(m.sum()),
                                          alpha, power))
    for family in ORDINAL:
        c = ranked[family].mid_rank()
        c = c - c.mean()
        s = score_test(u - 0.5, 1.0 / 12.0, c)
        results.append(_normal_result(f"{CELL}: scores", f"PIT trend along {family}", s.statistic, s.p, s.n,
                                      s.sd, alpha, power, "N(0, 1) score of u - 1/2 on the covariate's mid-rank; "
                                      "MDD: the slope of E[u] per unit mid-rank"))
        if judge_acc:
            cm = ranked_acc[family].mid_rank()
            cm = cm - cm.mean()
            p = declared[m]
            s = score_test(acc[m] - p, p * (1.0 - p), cm)
            results.append(_normal_result(f"{CELL}: scores", f"acceptance trend along {family}", s.statistic, s.p,
                                          s.n, s.sd, alpha, power, "N(0, 1) score of accepted - declared on the "
                                          "covariate's mid-rank"))
    n = z.size
    results.append(_normal_result(f"{CELL}: pooled", "mean(s_out - delta)", float(z.sum()) / math.sqrt(n),
                                  float(special.erfc(abs(z.sum()) / math.sqrt(2.0 * n))), n, math.sqrt(n), alpha,
                                  power, "exact N(0, 1) test; MDD: a mean shift"))
    d = cov["delta"]
    small = d <= SMALL_DELTA
    sd = float(np.sqrt(np.dot(d[small], d[small])))
    t = float(np.dot(z[small], d[small])) / sd if sd > 0 else 0.0
    results.append(_normal_result(f"{CELL}: pooled", f"shift proportional to delta (delta <= {SMALL_DELTA:g})", t,
                                  float(special.erfc(abs(t) / math.sqrt(2.0))), int(small.sum()), sd, alpha, power,
                                  "exact N(0, 1) score test; MDD: the shift per unit delta"))
    for label, rng in (("adjacent", None), ("random", np.random.default_rng(seed))):
        pr = pair_test(z, call, rng)
        results.append(_normal_result(f"{CELL}: pairs", f"independent rows of a call ({label} pairs)", pr.statistic,
                                      pr.p, pr.n, math.sqrt(pr.n), alpha, power,
                                      "CLT N(0, 1) test of mean z_a z_b; MDD: a correlation"))
    zp = np.asarray(raw["zp"], np.float64)
    fin = np.isfinite(zp)
    if fin.any():
        got = strata_ks(np.sort(special.ndtr(zp[fin])), np.zeros(int(fin.sum()), np.int64), 1)
        r0 = _strata_result("pit", "", None, got, zp[fin], np.zeros(int(fin.sum()), np.int64), 1, int(fin.sum()),
                            alpha, power)
        r0.cell, r0.test = f"{CELL}: verify_states", "pit-ks of the state off the displacement"
        for key in ("mdd_at_share", "bin_level"):  # not a stratum of the law's rows: outside the promise
            r0.extra.pop(key)
        results.append(r0)
    else:
        results.append(TestResult(f"{CELL}: verify_states", "pit-ks of the state off the displacement", math.nan,
                                  math.inf, 1.0, math.inf, 0, kind="n/a", layer=LAYER,
                                  note="n/a: no verify_states call with d > 1"))
    return results


def contract_results(raw: dict) -> list[TestResult]:
    """The deterministic checks the drawing process counted (every call, every row)."""
    return [contract_result(CELL, str(c["test"]), int(c["bad"]), int(c["n"]), str(c["note"]) if c["bad"] else "",
                            LAYER) for c in raw["contract"]]


def outcome(raw: dict) -> tuple[list[TestResult], dict | None]:
    """(contract results, the raw outputs to judge, or None when a contract failure stopped the
    draw or broke the outputs) from :func:`speccheck.sampler.calls.draw_law`'s return value."""
    contract = contract_results(raw)
    if raw.get("stopped") or not all(r.passed for r in contract if r.test != "contract:global-rng"):
        if all(r.passed for r in contract):
            contract.append(contract_result(CELL, "contract:output", 1, 1, f"{raw['stopped']}: unusable output",
                                            LAYER))
        return contract, None
    return contract, {k: v for k, v in raw.items() if k != "contract"}
