"""The battery's power against random defects (issue 39): share caught vs effect / promised MDD.

    python benchmarks/bench_power.py --suite gate --per-group 200 --workers 2    # the full measurement
    python benchmarks/bench_power.py --quick                                      # CI size (seconds)

For each rule and each family group of :mod:`speccheck.validation.defects`, draws ``--per-group``
defects (each confined to a random stratum holding >= ``--min-share`` of the rows under the
generator's call law), sized at effect / MDD ratios cycling through ``--ratios``, runs the suite on
each (in this process, or on ``--workers`` local Dask worker processes) and counts a defect as
caught when the verdict is "defect" (no verdict counts as not caught, and is listed). Exact
controls (the generator's wrappers without a defect) run beside them: any that fails is a false
failure and is reported as such.

The MDDs the effects are sized against: the battery report's power promise when it carries one
(``report.promise``), else ``--mdd-pit`` / ``--mdd-acc``, else the median per-test MDDs of the
report's continuous layer (PIT KS and declared acceptance, per stratum x K): what today's battery
states per cell, not a promise for a stratum of a given share; the report says which.

Written to ``--out`` (default ``validation/reports/power``): ``power_<suite>_<rules>.txt`` (the table:
per group and ratio bin, caught / drawn with a 95% Clopper-Pearson interval, and the issue's
criterion: >= 95% caught at >= 1.5 x MDD, >= 50% at 1 x), ``.json`` (every defect with its
description, effect, verdict, failing tests and token: ``speccheck battery --verifier
speccheck.validation.defects:defect_<token>`` reruns one) and ``.png`` (one curve per
group with its binomial band). Exit 0 when it ran (the criterion's outcome is in the report;
``--check`` makes an unmet criterion exit 1), 2 when it could not run as asked.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RATIOS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
CRITERION = ((1.5, 0.95), (1.0, 0.50))  # (ratio at least, share caught at least)
QUICK_GROUPS = ("acceptance", "residual", "declared", "contract")  # --quick: gross defects of four groups


# ------------------------------------------------------------------------------- the MDDs
def _promise_value(promise: Any, names: tuple[str, ...]) -> Optional[float]:
    for name in names:
        v = promise.get(name) if isinstance(promise, dict) else getattr(promise, name, None)
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            return float(v)
    return None


def promised_mdds(report: Any, mdd_pit: Optional[float] = None, mdd_acc: Optional[float] = None
                  ) -> tuple[float, float, str]:
    """(PIT MDD, acceptance MDD, where they came from) for sizing the defects."""
    if mdd_pit is not None and mdd_acc is not None:
        return float(mdd_pit), float(mdd_acc), "given (--mdd-pit / --mdd-acc)"
    promise = getattr(report, "promise", None)
    if promise is not None:
        pit = _promise_value(promise, ("mdd_pit", "pit_mdd", "pit", "pit_sup"))
        acc = _promise_value(promise, ("mdd_acc", "acc_mdd", "acceptance", "acc", "acceptance_shift"))
        if pit is not None and acc is not None:
            return mdd_pit or pit, mdd_acc or acc, "the report's power promise"
    pits = [r.mdd for r in report.results if r.kind == "stat" and r.layer == "L5" and r.test == "pit-ks"
            and math.isfinite(r.mdd)]
    accs = [r.mdd for r in report.results if r.kind == "stat" and r.layer == "L5" and r.test == "acceptance=declared"
            and math.isfinite(r.mdd)]
    if not pits or not accs:
        raise SystemExit(f"error: the {report.suite!r} report has no power promise and no continuous-layer MDDs; "
                         "give --mdd-pit and --mdd-acc")
    return (mdd_pit or float(np.median(pits)), mdd_acc or float(np.median(accs)),
            "median per-cell MDDs of the continuous layer (L5 pit-ks, acceptance=declared); the report has no "
            "power promise")


def promised_share(report: Any) -> Optional[float]:
    """The share of rows the report's power promise is stated for (None without a promise)."""
    promise = getattr(report, "promise", None)
    if promise is None:
        return None
    share = _promise_value(promise, ("share", "stratum_share", "min_share", "row_share"))
    return share if share is not None and share <= 1 else None


# ------------------------------------------------------------------------------ statistics
def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial confidence interval for k successes in n trials."""
    from scipy import stats

    if n == 0:
        return 0.0, 1.0
    a = 1 - level
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def ratio_bin(ratio: float, ratios: tuple[float, ...]) -> str:
    """The target ratio nearest (in log scale) to an achieved one; 'below' under the smallest bin."""
    if not math.isfinite(ratio):
        return "n/a"
    r = np.asarray(ratios)
    if ratio < r[0] / math.sqrt(r[1] / r[0]):
        return "below"
    return f"{r[int(np.argmin(np.abs(np.log(r) - math.log(ratio))))]:g}"


def power_table(records: list[dict], ratios: tuple[float, ...]) -> list[dict]:
    """One row per (group, ratio bin): drawn, caught, share, 95% interval, mean achieved ratio."""
    rows = []
    groups = sorted({r["group"] for r in records})
    for g in groups + ["all statistical"]:
        sel = [r for r in records if (r["group"] == g if g != "all statistical" else r["group"] not in
                                      ("contract", "control"))]
        for b in ["below"] + [f"{x:g}" for x in ratios] + ["n/a"]:
            cell = [r for r in sel if r["bin"] == b]
            if not cell:
                continue
            k = sum(r["caught"] for r in cell)
            lo, hi = clopper_pearson(k, len(cell))
            ach = [r["ratio"] for r in cell if math.isfinite(r["ratio"])]
            rows.append({"group": g, "bin": b, "n": len(cell), "caught": k, "share": k / len(cell), "lo": lo, "hi": hi,
                         "mean_ratio": float(np.mean(ach)) if ach else math.nan,
                         "no_verdict": sum(r["verdict"] == "no_verdict" for r in cell)})
    return rows


def criterion(records: list[dict], min_share: Optional[float] = None) -> list[dict]:
    """Per statistical group: the share caught among defects at >= 1.5 x and at [1, 1.5) x MDD
    (with ``min_share``: only the defects whose stratum holds at least that share of the rows,
    the ones the promise speaks of)."""
    out = []
    for g in sorted({r["group"] for r in records} - {"contract", "control"}):
        sel = [r for r in records if r["group"] == g and math.isfinite(r["ratio"])
               and (min_share is None or (r.get("share_of_rows") or 0.0) >= min_share)]
        for (at_least, need), upto in zip(CRITERION, (math.inf, CRITERION[0][0])):
            cell = [r for r in sel if at_least <= r["ratio"] < upto]
            k = sum(r["caught"] for r in cell)
            out.append({"group": g, "range": f"[{at_least:g}, {upto:g})", "need": need, "n": len(cell), "caught": k,
                        "met": bool(cell) and k / len(cell) >= need})
    return out


# ---------------------------------------------------------------------------------- runs
def draw_all(rules: list[str], groups: list[str], per_group: int, ratios: tuple[float, ...], seed: int,
             mdds: dict[str, tuple[float, float]], min_share: float, controls: int, n_effect: int,
             progress: bool = True) -> list[Any]:
    """The defects (and exact controls) to run, in order; deterministic given ``seed``."""
    from speccheck.seeding import unit_seed
    from speccheck.validation import defects

    out = []
    for rule in rules:
        mdd_pit, mdd_acc = mdds[rule]
        for g in groups:
            for i in range(per_group):
                rng = np.random.default_rng(unit_seed(seed, rule, g, i))
                t0 = time.perf_counter()
                try:
                    d = defects.draw_defect(rule, rng, ratio=ratios[i % len(ratios)], mdd_pit=mdd_pit,
                                            mdd_acc=mdd_acc, group=g, min_share=min_share, n_effect=n_effect)
                except defects.InputError as exc:  # a group with no family for this rule (e.g. no acceptance())
                    print(f"[power] {rule} {g}: {exc}", file=sys.stderr)
                    break
                if progress:
                    print(f"[power] drew {rule} {g} #{i} in {time.perf_counter() - t0:.1f} s: {d.describe()}",
                          file=sys.stderr, flush=True)
                out.append(d)
        for i in range(controls):
            rng = np.random.default_rng(unit_seed(seed, rule, "control", i))
            out.append(defects.draw_control(rule, rng, defects.CONTROLS[i % len(defects.CONTROLS)]))
    return out


def _outcome_record(d: Any, outcome: Any, wall: float, ratios: tuple[float, ...]) -> dict:
    rep = outcome.report
    failed = [] if rep is None else sorted({f"{r.layer} {r.test}" for r in rep.failures})
    ratio = d.effect.ratio if d.effect is not None else math.nan
    return {"rule": d.base, "group": d.group, "family": d.family, "mechanism": d.mechanism,
            "description": d.describe(), "ratio": ratio, "target_ratio": d.target_ratio,
            "bin": "n/a" if d.is_control else ratio_bin(ratio, ratios),
            "share_of_rows": None if d.effect is None else d.effect.share, "verdict": outcome.verdict,
            "caught": outcome.verdict == "defect", "failed_tests": failed, "reason": outcome.reason,
            "wall_s": wall, "token": d.token}


def run_all(items: list[Any], suite: str, seed: int, workers: int, isolate: bool, scale: float,
            ratios: tuple[float, ...], progress: bool = True) -> list[dict]:
    """Run the suite on every defect (its spec); one record per defect."""
    from speccheck import api
    from speccheck.seeding import unit_seed

    seeds = [unit_seed(seed, "battery", i) % (2**31) for i in range(len(items))]
    records = []
    if workers > 1:
        from dask.distributed import Client, LocalCluster

        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True)
        with cluster, Client(cluster) as client:
            futures = [client.submit(_timed_battery, d.spec, suite, s, scale, pure=False)
                       for d, s in zip(items, seeds)]
            for d, fut in zip(items, futures):
                outcome, wall = fut.result()
                records.append(_outcome_record(d, outcome, wall, ratios))
                if progress:
                    print(f"[power] {records[-1]['verdict']:10s} {d.describe()}", file=sys.stderr, flush=True)
        return records
    for d, s in zip(items, seeds):
        t0 = time.perf_counter()
        outcome = api.battery(d.spec, suite, seed=s, scale=scale, isolate=isolate)
        records.append(_outcome_record(d, outcome, time.perf_counter() - t0, ratios))
        if progress:
            print(f"[power] {records[-1]['verdict']:10s} {records[-1]['wall_s']:5.1f} s {d.describe()}",
                  file=sys.stderr, flush=True)
    return records


def _timed_battery(spec: str, suite: str, seed: int, scale: float) -> tuple[Any, float]:
    from speccheck import api
    from speccheck.seeding import one_thread

    t0 = time.perf_counter()
    with one_thread():
        outcome = api.battery(spec, suite, seed=seed, scale=scale, isolate=False)
    return outcome, time.perf_counter() - t0


# --------------------------------------------------------------- the law design (L7 alone)
# A gate run costs 20-60 s per rule on this machine, so >= 200 defects x 9 groups x 6 rules cannot
# be gate runs. The promise is layer L7's, and a defect L7 catches at the WHOLE suite's per-test
# level alpha / m fails the suite: the suite's verdict is Holm over every test at family_alpha, and
# Holm's first step rejects every p-value <= alpha / m (the L7 draw is the same in both: its cell's
# seed and global generators come from the cell's identity and the run seed). L7's contract checks
# fail the suite too. So "caught by L7 alone at alpha / m" is a lower bound on "caught by the suite"
# (the other layers can only add), at a third of the cost, and the curve measures the promise itself.
def suite_level(rule: str, suite: str, seed: int, scale: float = 1.0) -> dict:
    """The suite's plan for ``rule`` and its binding per-test level at run seed ``seed`` (the
    trajectory layer's tests counted from its cell at that seed, as the run counts them)."""
    import torch

    from speccheck.validation.battery import draw_cell, judge_cell, load_verifier, plan_battery, resolve_layers
    from speccheck.validation.battery.plan import fresh_verifier, suite_for
    from speccheck.validation.suites import load_suite

    v = load_verifier(rule)
    st, _ = suite_for(v, load_suite(suite))
    plan = plan_battery(fresh_verifier(v), st, layers=resolve_layers(None), Ks=None, scale=scale)
    if plan.get("law") is None:
        raise SystemExit(f"error: suite {suite!r} runs no law layer (L7) for {rule!r}: the law design needs one")
    n_l4 = 0
    if st.trajectory is not None:
        got = draw_cell(fresh_verifier(v), st, ("L4",), plan=None, base=seed, device=torch.device("cpu"), scale=scale)
        n_l4 = sum(r.kind == "stat" for r in judge_cell(st, ("L4",), *got, plan=None, base=seed,
                                                        alpha_t=st.family_alpha, scale=scale))
    return {"plan": plan, "alpha_suite": st.family_alpha / (int(plan["n_stat"]) + n_l4), "n_stat": int(plan["n_stat"]),
            "n_l4": n_l4, "family_alpha": st.family_alpha, "power": st.power, "scale": scale}


def law_unit(verifier: Any, suite: str, seed: int, level: dict) -> dict:
    """Draw the suite's L7 cell for ``verifier`` (an object or a spec) at run seed ``seed`` and
    judge it at the suite's per-test level: caught iff some L7 test or contract check fails."""
    import torch

    from speccheck.seeding import one_thread
    from speccheck.validation.battery import draw_cell, judge_cell, load_verifier
    from speccheck.validation.battery.plan import suite_for
    from speccheck.validation.results import promise_of
    from speccheck.validation.suites import load_suite

    t0, c0 = time.perf_counter(), time.process_time()
    v = load_verifier(verifier)
    st, _ = suite_for(v, load_suite(suite))
    with one_thread():
        contract, raw = draw_cell(v, st, ("L7",), plan=level["plan"], base=seed, device=torch.device("cpu"),
                                  scale=level["scale"])
        results = judge_cell(st, ("L7",), contract, raw, plan=level["plan"], base=seed,
                             alpha_t=level["alpha_suite"], scale=level["scale"])
    failed = [f"{r.layer} {r.cell}: {r.test}" for r in results if not r.passed]
    promise = promise_of(results, level["power"])
    stat = [r.p_value for r in results if r.kind == "stat" and math.isfinite(r.p_value)]
    return {"caught": bool(failed), "verdict": "defect" if failed else "exact", "failed_tests": failed,
            "min_p": min(stat) if stat else 1.0, "promise_pit": promise.pit if promise else math.nan,
            "promise_acc": promise.acceptance if promise else math.nan, "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0}


def _law_job_unit(rule: str, suite: str, seed: int, key: str, level: dict, mdds: tuple[float, float],
                  min_share: float, ratios: tuple[float, ...], n_effect: int) -> dict:
    """One unit of the law design: draw the defect (or control) named by ``key`` and judge it."""
    from speccheck.seeding import unit_seed
    from speccheck.validation import defects

    index, group = key.split(":", 1)
    i = int(index)
    rng = np.random.default_rng(unit_seed(seed, rule, group, i))
    c0 = time.process_time()
    if group == "control":
        d = defects.draw_control(rule, rng, defects.CONTROLS[i % len(defects.CONTROLS)])
    else:
        # the stratum's share of rows under the suite's own law of calls (the L7 plan), not a model of it
        law_seed = unit_seed(seed, 7)

        def share(st: Any, family: str) -> float:
            return defects.law_share(st, level["plan"]["law"], seed=law_seed, states=family.startswith("states"))

        d = defects.draw_defect(rule, rng, ratio=ratios[i % len(ratios)], mdd_pit=mdds[0], mdd_acc=mdds[1],
                                group=group, min_share=min_share, n_effect=n_effect, share=share,
                                effect_law=defects.BatteryLaw.of(level["plan"]["law"], law_seed))
    draw_s = time.process_time() - c0
    got = law_unit(defects.wrap(d), suite, unit_seed(seed, "battery", rule, group, i) % (2**31), level)
    ratio = d.effect.ratio if d.effect is not None else math.nan
    return {"rule": rule, "group": d.group, "family": d.family, "mechanism": d.mechanism,
            "description": d.describe(), "ratio": ratio, "target_ratio": d.target_ratio,
            "bin": "n/a" if d.is_control else ratio_bin(ratio, ratios),
            "share_of_rows": None if d.effect is None else d.effect.share, "verdict": got["verdict"],
            "caught": got["caught"], "failed_tests": got["failed_tests"], "reason": "", "min_p": got["min_p"],
            "wall_s": got["wall_s"], "cpu_s": got["cpu_s"] + draw_s, "token": d.token}


def law_job(store_path: str, rule: str, suite: str, *, groups: list[str], per_group: int, ratios: tuple[float, ...],
            seed: int, min_share: float, controls: int, n_effect: int, workers: int, progress: bool = True,
            max_units: Optional[int] = None, scale: float = 1.0) -> str:
    """Run (or resume) the law-design measurement of ``rule`` into the SQLite results store at
    ``store_path`` (``speccheck.scale.store.ResultsStore``): a baseline unit (the exact rule: its
    promise sizes the defects) then ``per_group`` defects per group, interleaved (unit ``i`` of
    every group before unit ``i + 1``) so that a run stopped at any point is balanced, and
    ``controls`` exact controls (one per round of the first ``controls`` rounds). Units already
    stored are skipped. Returns the job name."""
    from speccheck.scale.store import ResultsStore

    job = law_job_name(suite, rule, seed, scale)
    spec = {"design": "L7 alone at the suite's per-test level", "share": "rows of the suite's law of calls (L7)",
            "effect": "over the stratum's rows of the suite's law of calls",
            "rule": rule, "suite": suite, "seed": seed,
            "ratios": list(ratios), "min_share": min_share, "n_effect": n_effect, "scale": scale}
    with ResultsStore(store_path) as store:
        digest = store.open_job(job, "power-law", spec)
        done = store.stored_keys(job)
        if "baseline" not in done:
            level = suite_level(rule, suite, seed, scale)
            base = law_unit(rule, suite, seed, level)
            if base["caught"] or not math.isfinite(base["promise_pit"]):
                raise SystemExit(f"error: the exact {rule!r} fails L7 at seed {seed} or has no promise: {base}")
            store.put(job, "baseline", identity=[rule, "baseline"], seed=seed, spec_hash=digest,
                      wall_s=base["wall_s"], worker="local", result={**base, "level": {k: v for k, v in level.items()
                                                                                        if k != "plan"}})
        base = store.units(job, ["baseline"])[0].result
        level = suite_level(rule, suite, seed, scale)
        mdd_acc = base["promise_acc"] if math.isfinite(base["promise_acc"]) else 1.0
        mdds = (float(base["promise_pit"]), float(mdd_acc))
        keys = [f"{i:04d}:{g}" for i in range(per_group) for g in groups + ["control"] * (i < controls)]
        todo = [k for k in keys if k not in store.stored_keys(job)][: max_units]
        if progress:
            print(f"[power] {job}: {len(keys) - len(todo)} stored, {len(todo)} to run; MDDs {mdds}; "
                  f"suite level {level['alpha_suite']:.3g}", file=sys.stderr, flush=True)

        def keep(key: str, rec: dict) -> None:
            store.put(job, key, identity=[rule, key], seed=seed, spec_hash=digest, wall_s=rec["wall_s"],
                      worker="local", result=rec)
            if progress:
                print(f"[power] {rec['verdict']:7s} {rec['cpu_s']:5.1f} s {rec['description'][:160]}",
                      file=sys.stderr, flush=True)

        args = (suite, seed)
        if workers > 1:
            from dask.distributed import Client, LocalCluster, as_completed

            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster, \
                    Client(cluster) as client:
                futures = {client.submit(_law_job_unit, rule, *args, k, level, mdds, min_share, ratios, n_effect,
                                         pure=False): k for k in todo}
                for fut in as_completed(futures):
                    keep(futures[fut], fut.result())
        else:
            for k in todo:
                keep(k, _law_job_unit(rule, *args, k, level, mdds, min_share, ratios, n_effect))
    return job


def law_job_name(suite: str, rule: str, seed: int, scale: float = 1.0) -> str:
    """The store's name of a law-design job."""
    return f"power-law:{suite}:{rule}:{seed}" + ("" if scale == 1.0 else f":scale={scale:g}")


def law_result(store_path: str, jobs: list[str], label: str = "") -> dict:
    """The report dict (as :func:`run_power` returns) of stored law-design jobs."""
    from speccheck.scale.store import ResultsStore

    records, mdds, rules, specs = [], {}, [], []
    with ResultsStore(store_path, create=False, readonly=True) as store:
        for job in jobs:
            spec = store.job(job)["spec"]
            units = store.units(job)
            base = [u.result for u in units if u.unit_key == "baseline"]
            if not base:
                continue
            specs.append(spec)
            rules.append(spec["rule"])
            b = base[0]
            mdds[spec["rule"]] = [b["promise_pit"], b["promise_acc"], f"the exact rule's L7 promise at the "
                                  f"suite's per-test level {b['level']['alpha_suite']:.3g} (seed {spec['seed']}, "
                                  f"scale {spec.get('scale', 1.0):g}: L7 rows x {spec.get('scale', 1.0):g})"]
            records += [u.result for u in units if u.unit_key != "baseline"]
    if not specs:
        raise SystemExit(f"error: no stored law-design job with a baseline among {jobs}")
    ratios = tuple(specs[0]["ratios"])
    per_group = max(collections.Counter((r["rule"], r["group"]) for r in records
                                                          if r["group"] != "control").values(), default=0)
    return {"suite": specs[0]["suite"], "rules": rules, "per_group": per_group, "ratios": list(ratios),
            "seed": specs[0]["seed"], "min_share": specs[0]["min_share"], "scale": specs[0].get("scale", 1.0),
            "label": label or LAW_LABEL, "mdds": mdds, "records": records, "table": power_table(records, ratios),
            "criterion": criterion(records, specs[0]["min_share"]), "wall_s": sum(r["wall_s"] for r in records)}


LAW_LABEL = ("design: each defect judged by layer L7 alone at the whole suite's per-test level alpha / m (a lower "
             "bound on the suite's power: Holm rejects every p <= alpha / m); strata drawn to hold >= the promised "
             "share of the rows of the suite's own law of calls (the criterion counts only those that do; the table "
             "counts all); 'per group' is the most stored in one group, the counts per bin are below; wall: the "
             "units' summed wall time")


# ------------------------------------------------------------------------------- outputs
def format_report(result: dict) -> str:
    lines = [f"# Power of the battery against random defects: suite {result['suite']!r}",
             "", result["label"], "",
             f"rules: {', '.join(result['rules'])}; defects per group and rule: {result['per_group']}; "
             f"ratios: {result['ratios']}; stratum share >= {result['min_share']:g} of rows under the generator's "
             f"call law; seed {result['seed']}; {result['wall_s']:.0f} s wall",
             ""]
    for rule, (pit, acc, src) in result["mdds"].items():
        lines.append(f"MDDs for {rule}: PIT sup-distance {pit:.4g}, acceptance shift {acc:.4g} ({src})")
    lines += ["", "caught / drawn by family group and effect / MDD bin (95% Clopper-Pearson interval;"
              " 'below': the family could not reach the smallest bin in its stratum):", "",
              f"{'group':16s} {'bin':>6s} {'caught':>7s} {'share':>6s} {'95% interval':>15s} {'mean ratio':>10s} "
              f"{'no verdict':>10s}"]
    for r in result["table"]:
        lines.append(f"{r['group']:16s} {r['bin']:>6s} {r['caught']:>3d}/{r['n']:<3d} {r['share']:6.2f} "
                     f"[{r['lo']:.2f}, {r['hi']:.2f}]{'':3s} {r['mean_ratio']:10.2f} {r['no_verdict']:10d}")
    lines += ["", "issue 39's criterion per group (>= 95% caught at >= 1.5 x MDD, >= 50% at [1, 1.5) x MDD):"]
    for c in result["criterion"]:
        lines.append(f"  {c['group']:16s} {c['range']:>10s}: {c['caught']}/{c['n']} caught, need "
                     f">= {c['need']:.0%}: {'met' if c['met'] else ('NOT met' if c['n'] else 'no defects drawn')}")
    ctl = [r for r in result["records"] if r["group"] == "control"]
    bad = [r for r in ctl if r["verdict"] != "exact"]
    lines += ["", f"exact controls: {len(ctl) - len(bad)}/{len(ctl)} passed"
              + ("" if not bad else "; FAILED: " + "; ".join(f"{r['family']} ({r['verdict']})" for r in bad))]
    missed = [r for r in result["records"] if r["group"] not in ("control",) and not r["caught"]
              and (not math.isfinite(r["ratio"]) or r["ratio"] >= 1.0)]
    lines += ["", f"defects at >= 1 x MDD (and contract defects) NOT caught: {len(missed)}"]
    lines += [f"  - {r['description']} [{r['verdict']}]"
              + (" (stratum below the promised share: outside the promise)"
                 if (r.get("share_of_rows") or 1.0) < result["min_share"] else "") for r in missed]
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Small multiples: one panel per family group (and the statistical groups pooled), share caught
    per effect / MDD bin with its 95% Clopper-Pearson band; the criterion's lines dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    ratios = [float(r) for r in result["ratios"]]
    groups = [g for g in sorted({r["group"] for r in result["table"]}) if g not in ("contract", "control",
                                                                                    "all statistical")]
    panels = ["all statistical"] + groups
    cols = 3
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.4 * nrows), sharex=True, sharey=True,
                             squeeze=False)
    for ax, g in zip(axes.flat, panels):
        rows = [r for r in result["table"] if r["group"] == g and r["bin"] not in ("below", "n/a")]
        if rows:
            x = [float(r["bin"]) for r in rows]
            color = "black" if g == "all statistical" else "tab:blue"
            ax.fill_between(x, [r["lo"] for r in rows], [r["hi"] for r in rows], alpha=0.2, color=color, lw=0)
            ax.plot(x, [r["share"] for r in rows], marker="o", color=color, lw=1.5)
            for xi, r in zip(x, rows):
                ax.annotate(f"{r['caught']}/{r['n']}", (xi, r["share"]), textcoords="offset points", xytext=(0, -11),
                            ha="center", fontsize=6)
        below = [r for r in result["table"] if r["group"] == g and r["bin"] == "below"]
        note = f" ({below[0]['n']} below {ratios[0]:g} x)" if below else ""
        ax.set_title(g + note, fontsize=8)
        for xv, yv in CRITERION:
            ax.axvline(xv, color="grey", ls=":", lw=0.8)
            ax.axhline(yv, color="grey", ls=":", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks(ratios)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticklabels([f"{r:g}" for r in ratios], fontsize=7)
        ax.set_ylim(-0.05, 1.05)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.supxlabel("effect / MDD (bin of the achieved ratio)", fontsize=9)
    fig.supylabel("share of defects caught", fontsize=9)
    at = "" if result.get("scale", 1.0) == 1.0 else f" at scale {result['scale']:g}"
    fig.suptitle(f"battery '{result['suite']}'{at} vs random defects ({', '.join(result['rules'])}; "
                 f"{result['per_group']} per group)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(json_path: Path) -> None:
    """Redraw the figure of a written ``.json`` next to it."""
    plot(json.loads(json_path.read_text()), json_path.with_suffix(".png"))


def run_power(rules: list[str], suite: str, *, groups: Optional[list[str]] = None, per_group: int = 2,
              ratios: tuple[float, ...] = DEFAULT_RATIOS, seed: int = 20261207, workers: int = 1,
              isolate: bool = False, scale: float = 1.0, min_share: Optional[float] = None, controls: int = 6,
              mdd_pit: Optional[float] = None, mdd_acc: Optional[float] = None, n_effect: int = 1 << 15,
              label: str = "", progress: bool = True) -> dict:
    """The whole measurement as a JSON-ready dict (records, table, criterion)."""
    from speccheck import api
    from speccheck.validation import defects

    t0 = time.perf_counter()
    groups = list(groups or defects.GROUPS)
    unknown = [g for g in groups if g not in defects.GROUPS]
    if unknown:
        raise SystemExit(f"error: unknown group(s) {unknown}; allowed: {', '.join(defects.GROUPS)}")
    mdds = {}
    for rule in rules:
        base = api.battery(rule, suite, seed=seed % (2**31), scale=scale, isolate=False)
        if base.report is None:
            raise SystemExit(f"error: the battery could not run on {rule!r}: {base.reason}")
        mdds[rule] = promised_mdds(base.report, mdd_pit, mdd_acc)
        if min_share is None:  # the share the promise is stated for, else the 5%
            min_share = promised_share(base.report) or 0.05
    items = draw_all(rules, groups, per_group, ratios, seed, {r: m[:2] for r, m in mdds.items()}, min_share,
                     controls, n_effect, progress)
    records = run_all(items, suite, seed, workers, isolate, scale, ratios, progress)
    return {"suite": suite, "rules": list(rules), "per_group": per_group, "ratios": list(ratios), "seed": seed,
            "min_share": min_share, "scale": scale, "label": label, "mdds": {r: list(m) for r, m in mdds.items()},
            "records": records, "table": power_table(records, ratios), "criterion": criterion(records),
            "wall_s": time.perf_counter() - t0}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="gate", help="battery suite (smoke / gate / full or a .toml path)")
    ap.add_argument("--rules", nargs="+", default=["dgrs"], help="rules to wrap (names or module:attr)")
    ap.add_argument("--groups", nargs="+", default=None, help="family groups (default: all)")
    ap.add_argument("--per-group", type=int, default=200, help="defects per group and rule")
    ap.add_argument("--ratios", nargs="+", type=float, default=list(DEFAULT_RATIOS), help="effect / MDD targets")
    ap.add_argument("--controls", type=int, default=6, help="exact controls per rule")
    ap.add_argument("--min-share", type=float, default=None,
                    help="smallest share of rows a stratum holds (default: the promise's share, else 0.05)")
    ap.add_argument("--mdd-pit", type=float, default=None, help="PIT sup-distance MDD (overrides the report's)")
    ap.add_argument("--mdd-acc", type=float, default=None, help="acceptance-shift MDD (overrides the report's)")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--n-effect", type=int, default=1 << 18,
                    help="rows of the Monte Carlo that sizes each defect's effect (its 99%% error is printed)")
    ap.add_argument("--scale", type=float, default=1.0, help="the battery's --scale")
    ap.add_argument("--workers", type=int, default=1, help="local Dask worker processes (1: this process)")
    ap.add_argument("--isolate", action="store_true", help="run each battery in an isolated child process")
    ap.add_argument("--quick", action="store_true",
                    help="CI size: smoke suite, 1 defect at 3 x MDD in each of four groups, 2 controls")
    ap.add_argument("--out", default=str(ROOT / "validation" / "reports" / "power"))
    ap.add_argument("--label", default="", help="a line saying what this run is (printed at the top)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the criterion is not met in some group")
    ap.add_argument("--replot", metavar="JSON", default=None, help="only redraw the figure of a written .json")
    ap.add_argument("--design", choices=("law", "battery"), default="battery",
                    help="law: each defect judged by layer L7 alone at the suite's per-test level, results in "
                         "--store (resumable; a lower bound on the suite's power at a third of the cost); "
                         "battery: a whole suite run per defect")
    ap.add_argument("--store", default=None, help="SQLite results store of the law design (runs resume there)")
    ap.add_argument("--max-units", type=int, default=None, help="law design: run at most this many new units")
    ap.add_argument("--report-only", action="store_true", help="law design: write the report of what is stored")
    args = ap.parse_args(argv)
    if args.design == "law":
        return _main_law(args)
    if args.replot:
        path = Path(args.replot)
        if not path.is_file():
            print(f"error: --replot: no file {path}", file=sys.stderr)
            return 2
        replot(path)
        return 0
    if args.quick:
        args.suite, args.per_group, args.controls, args.ratios = "smoke", 1, 2, [3.0, 4.0]
        args.groups = args.groups or list(QUICK_GROUPS)
    if args.per_group < 1 or args.workers < 1 or not 0 < (args.min_share or 0.05) <= 1 or len(args.ratios) < 2 \
            or min(args.ratios) <= 0:
        print("error: --per-group and --workers must be >= 1, --min-share in (0, 1], at least two --ratios > 0",
              file=sys.stderr)
        return 2
    ratios = tuple(sorted(set(args.ratios)))
    result = run_power(args.rules, args.suite, groups=args.groups, per_group=args.per_group, ratios=ratios,
                       seed=args.seed, workers=args.workers, isolate=args.isolate, scale=args.scale,
                       min_share=args.min_share, controls=args.controls, mdd_pit=args.mdd_pit, mdd_acc=args.mdd_acc,
                       label=args.label or f"run of {time.strftime('%Y-%m-%d', time.gmtime())}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"power_{Path(args.suite).stem}_{'-'.join(r.replace(':', '.') for r in args.rules)}" \
        + ("_quick" if args.quick else "")
    return _write(result, out, stem, args.check)


def _write(result: dict, out: Path, stem: str, check: bool) -> int:
    """The report, its JSON and its figure under ``out``; the exit code (``check``: 1 when an exact
    control failed or the criterion is not met in some group)."""
    text = format_report(result)
    (out / f"{stem}.txt").write_text(text)
    from speccheck.strict_json import dumps

    (out / f"{stem}.json").write_text(dumps(result, indent=1) + "\n")
    plot(result, out / f"{stem}.png")
    print(text)
    print(f"written: {out / stem}.txt, .json, .png")
    ctl_bad = any(r["group"] == "control" and r["verdict"] != "exact" for r in result["records"])
    if check and (ctl_bad or not all(c["met"] for c in result["criterion"])):
        return 1
    return 0


def _main_law(args: argparse.Namespace) -> int:
    from speccheck.validation import defects

    if not args.store:
        print("error: --design law needs --store PATH (the SQLite results store)", file=sys.stderr)
        return 2
    groups = list(args.groups or defects.STATISTICAL_GROUPS + ("contract",))
    unknown = [g for g in groups if g not in defects.GROUPS]
    if unknown or args.per_group < 1 or not 1 <= args.workers <= 8 or len(set(args.ratios)) < 2:
        print(f"error: groups must be among {', '.join(defects.GROUPS)}, --per-group >= 1, --workers in 1..8, "
              "at least two --ratios", file=sys.stderr)
        return 2
    ratios = tuple(sorted(set(args.ratios)))
    jobs = []
    for rule in args.rules:
        if args.report_only:
            jobs.append(law_job_name(args.suite, rule, args.seed, args.scale))
            continue
        jobs.append(law_job(args.store, rule, args.suite, groups=groups, per_group=args.per_group, ratios=ratios,
                            seed=args.seed, min_share=args.min_share or 0.05, controls=args.controls,
                            n_effect=args.n_effect, workers=args.workers, max_units=args.max_units,
                            scale=args.scale))
    result = law_result(args.store, jobs, args.label)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"power_law_{Path(args.suite).stem}_{'-'.join(r.replace(':', '.') for r in args.rules)}" \
        + ("" if args.scale == 1.0 else f"_scale{args.scale:g}")
    return _write(result, out, stem, args.check)


if __name__ == "__main__":
    raise SystemExit(main())
