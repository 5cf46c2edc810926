"""Localisation: when the battery fails, say where (delta window, K) and by how much.

Two stages, each with its own error control:

1. **Screening** (no new draws): the failing tests of the scalar grid (a delta point) and of
   the continuous layer (a stratum [lo, hi) x K) are the candidates. A stratum is split into
   ``refine`` log-equal sub-windows; the sub-window whose rows give the smallest p-value
   (PIT KS, acceptance vs bound) becomes the candidate window when it is significant after a
   Bonferroni factor ``refine`` (p * refine <= 0.01), else the whole stratum stays. Screening
   only proposes; it decides nothing.
2. **Confirmation** on fresh draws (seeds of their own): ``confirm_n`` rows with delta
   log-uniform on the window (or at the point), at that K; tests: PIT KS and the acceptance
   count (two-sided against the declared acceptance at 16 shared deltas, else one-sided
   against the list bound). A candidate is confirmed when min(p) * 2 <= alpha / (3 c), with c
   the number of candidates (the most significant region of every failing K, then more up to
   ``max_candidates``). A candidate that does not confirm
   is retried, for a stratum of the continuous layer, in the layer's own mixed-delta batches
   (defects that depend on the batch, not on delta alone), then on its whole stratum: at most
   three confirmations per candidate, so the probability that an exact rule gets any
   confirmed localisation is <= alpha.

The effect size is the observed acceptance against the declared (or bound) mean over the
window's rows, and the PIT KS distance.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from speccheck.seeding import generator as make_generator
from speccheck.seeding import unit_seed
from speccheck.validation.continuous import Screen, draw_deltas, run_k
from speccheck.validation.contract import call_verify, check_batch
from speccheck.validation.results import Localisation, TestResult
from speccheck.validation.stats import bernoulli_sum_test, ks_dkw_test
from speccheck.validation.suites import ContinuousSpec

CONFIRM_DELTAS = 16  # distinct deltas (shared rows) of a confirmation, for the declared acceptance


def _window_p(screen: Screen, lo: float, hi: float) -> float:
    from speccheck.theory import list_bound_iid

    rows = np.nonzero((screen.delta >= lo) & (screen.delta < hi))[0]
    if rows.size < 8:
        return 1.0
    p_ks = ks_dkw_test(screen.u[rows], lambda v: v, 0.5).p_value
    bound = list_bound_iid(screen.delta[rows], screen.K)
    p_acc = bernoulli_sum_test(int(screen.accepted[rows].sum()), bound, 0.5, one_sided_upper=True).p_value
    return min(1.0, 2.0 * min(p_ks, p_acc))


def refine_window(screen: Screen | None, lo: float, hi: float, parts: int) -> tuple[float, float]:
    """The narrowest sub-window of [lo, hi) the screening data single out (else [lo, hi))."""
    if screen is None or lo <= 0.0 or hi <= lo or parts < 2:
        return lo, hi
    edges = np.exp(np.linspace(math.log(lo), math.log(hi), parts + 1))
    edges[0], edges[-1] = lo, hi
    p_sub = [(_window_p(screen, a, b), a, b) for a, b in zip(edges[:-1], edges[1:])]
    p_best, a, b = min(p_sub)
    return (float(a), float(b)) if p_best * parts <= 0.01 else (lo, hi)


def effect(r: TestResult) -> float:
    """How far a failing test's statistic lies beyond its rejection threshold, in units of that
    threshold (|statistic| / threshold: > 1 rejects; the statistics of the regions are KS
    distances and acceptance shifts, on one probability scale). Unlike the p-value it does not
    grow with the rows a region happened to get: it ranks where the law is most wrong."""
    if not (math.isfinite(r.threshold) and r.threshold > 0):
        return math.inf if math.isfinite(r.statistic) or math.isinf(r.statistic) else 0.0
    value = abs(r.statistic) / r.threshold
    return value if math.isfinite(value) else math.inf


def _touches(a: tuple[float, float, int], b: tuple[float, float, int]) -> bool:
    """Two regions at one K that are the same, overlap or share an edge (one stratum or neighbours)."""
    return a[2] == b[2] and a[0] <= b[1] and b[0] <= a[1]


def candidates(failures: list[TestResult], max_candidates: int) -> list[tuple[float, float, int, str]]:
    """(lo, hi, K, source) of the failing statistical tests that name a delta region: first the
    region of largest :func:`effect` of EVERY failing K (uncapped: each failing K is named), then
    further regions while there are fewer than ``max_candidates``, largest effect first, regions
    apart from those already chosen (another stratum, not a neighbour) before the rest. Ties go to
    the smaller p-value."""
    regions: list[tuple[tuple[float, float, int], str]] = []
    ranked = sorted((r for r in failures if r.kind == "stat"), key=lambda r: (-effect(r), r.p_value))
    for r in ranked:
        if r.layer == "L5" and "lo" in r.extra:
            key = (float(r.extra["lo"]), float(r.extra["hi"]), int(r.extra["K"]))
        elif r.layer in ("L1", "L2") and "delta" in r.extra:
            key = (float(r.extra["delta"]), float(r.extra["delta"]), int(r.extra["K"]))
        else:
            continue
        if key not in [k for k, _ in regions]:
            regions.append((key, f"{r.layer} {r.cell} {r.test}"))
    first: dict[int, tuple] = {}
    for key, source in regions:
        first.setdefault(key[2], (key, source))
    chosen = list(first.values())
    for spread in (True, False):  # first regions apart from the chosen ones, then any
        for item in regions:
            if len(chosen) >= max_candidates:
                break
            if item not in chosen and not (spread and any(_touches(item[0], c[0]) for c in chosen)):
                chosen.append(item)
    return [(*key, source) for key, source in chosen]


def confirm(verifier: Any, lo: float, hi: float, K: int, n: int, alpha: float, device: torch.device,
            seed: int, source: str = "") -> Localisation:
    """Fresh draws in the window at K; PIT KS and the acceptance count, Bonferroni over the two."""
    from speccheck.theory import list_bound_iid

    g = make_generator(seed, device)
    groups = CONFIRM_DELTAS if hi > lo else 1
    rows_per = max(1, n // groups)
    n = rows_per * groups
    if hi > lo:
        delta = draw_deltas(lo, hi, n, groups, rows_per, g, device)
    else:
        delta = torch.full((n,), lo, dtype=torch.float64, device=device)
    s = torch.randn(n, K, generator=g, dtype=torch.float64, device=device)
    out = call_verify(verifier, delta.clone(), s.clone(), g)
    checks, parsed = check_batch("confirm", delta, s, out)
    if parsed is None or not all(r.passed for r in checks):
        return Localisation(lo, hi, K, True, n, 0.0, alpha, math.nan, math.nan, "declared", math.nan,
                            source + " (contract violated on fresh draws)")
    s_out, accepted, _ = parsed
    u = torch.special.ndtr(s_out - delta).cpu().numpy()
    acc = accepted.cpu().numpy()
    d = delta.cpu().numpy()
    ks = ks_dkw_test(u, lambda v: v, alpha / 2.0)
    declared_values = None
    if callable(getattr(verifier, "acceptance", None)):
        try:
            declared_values = np.asarray(verifier.acceptance(d[::rows_per], K), np.float64).reshape(-1)
        except Exception:  # noqa: BLE001 - the grid layer reports a broken declaration
            declared_values = None
    if declared_values is not None and declared_values.shape == (groups,):
        test = bernoulli_sum_test(int(acc.sum()), declared_values, alpha / 2.0, counts=np.full(groups, rows_per))
        expected, kind = float(declared_values.mean()), "declared"
    else:
        bound = list_bound_iid(d, K) if hi > 0 else np.ones_like(d)
        test = bernoulli_sum_test(int(acc.sum()), bound, alpha / 2.0, one_sided_upper=True)
        expected, kind = float(bound.mean()), "bound"
    p = min(1.0, 2.0 * min(ks.p_value, test.p_value))
    return Localisation(lo, hi, K, bool(p <= alpha), n, p, alpha, float(acc.mean()), expected, kind,
                        float(ks.statistic), source)


def confirm_in_mix(verifier: Any, spec: ContinuousSpec, n: int, lo: float, hi: float, K: int, alpha: float,
                   device: torch.device, seed: int, source: str = "") -> Localisation:
    """Fresh draws of the whole continuous layer at K (batches mixing every stratum, as in the
    screening), tested on the rows whose delta lies in the window: for defects that depend on
    the batch (its mix of deltas, a row's position) rather than on delta alone."""
    from speccheck.theory import list_bound_iid

    _, screen = run_k(verifier, spec, K, n, 0, alpha, 0.99, device, seed, False)
    if screen is None:
        return Localisation(lo, hi, K, True, n, 0.0, alpha, math.nan, math.nan, "bound", math.nan,
                            source + " (contract violated on fresh draws in mixed batches)")
    rows = (screen.delta >= lo) & (screen.delta < hi) if hi > lo else screen.delta == lo
    u, acc, d = screen.u[rows], screen.accepted[rows], screen.delta[rows]
    ks = ks_dkw_test(u, lambda v: v, alpha / 2.0)
    bound = list_bound_iid(d, K) if hi > 0 else np.ones_like(d)
    test = bernoulli_sum_test(int(acc.sum()), bound, alpha / 2.0, one_sided_upper=True)
    p = min(1.0, 2.0 * min(ks.p_value, test.p_value))
    return Localisation(lo, hi, K, bool(p <= alpha), int(rows.sum()), p, alpha, float(acc.mean()),
                        float(bound.mean()), "bound", float(ks.statistic), source + " (in mixed-delta batches)")


def localise(verifier: Any, failures: list[TestResult], screens: dict[int, Screen], *, alpha: float,
             refine: int, confirm_n: int, device: torch.device, base_seed: int, max_candidates: int = 3,
             spec: ContinuousSpec | None = None, layer_n: int = 0,
             heartbeat: Callable[[str], None] = lambda label: None) -> list[Localisation]:
    """Screen, refine and confirm the failing regions; confirmed ones first, narrowest first.

    Per candidate, at most three confirmations, each at alpha / (3 c): focused draws in the
    narrow window; then, for a stratum of the continuous layer, the layer's own mixed batches
    tested on the window's rows (``spec``, ``layer_n``); then the whole stratum, focused."""
    cands = candidates(failures, max_candidates)
    out = []
    for i, (lo, hi, K, source) in enumerate(cands):
        heartbeat(f"localise K={K} delta in [{lo:g}, {hi:g}]")
        a, b = refine_window(screens.get(K), lo, hi, refine)
        level = alpha / (3 * len(cands))
        loc = confirm(verifier, a, b, K, confirm_n, level, device, unit_seed(base_seed, 6, i), source)
        if not loc.confirmed and spec is not None and source.startswith("L5"):
            loc = confirm_in_mix(verifier, spec, layer_n, a, b, K, level, device, unit_seed(base_seed, 8, i), source)
        if not loc.confirmed and (a, b) != (lo, hi):  # the narrow window did not hold: the whole stratum
            loc = confirm(verifier, lo, hi, K, confirm_n, level, device, unit_seed(base_seed, 7, i), source)
        out.append(loc)
    width = [(not x.confirmed, (math.log(x.delta_hi / x.delta_lo) if x.delta_lo > 0 else 0.0)) for x in out]
    return [x for _, x in sorted(zip(width, out), key=lambda t: t[0])]
