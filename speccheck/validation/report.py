"""Battery reports: a human table, JSON, JUnit XML, and the mutant kill matrix."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

from speccheck.validation.battery import BatteryReport
from speccheck.validation.stats import TestResult


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.3e}"
    return f"{x:.5f}".rstrip("0").rstrip(".")


def _verdict(r: TestResult) -> str:
    return "pass" if r.passed else "FAIL"


def format_report(rep: BatteryReport, only_failures: bool = False) -> str:
    """Per test: layer, cell, test, statistic, threshold, minimum detectable deviation, verdict."""
    rows = [r for r in rep.results if (not only_failures or not r.passed)]
    head = ("layer", "cell", "test", "statistic", "threshold", "min.det.dev", "n", "verdict")
    table = [head]
    contract_ok: dict[tuple[str, str], list[TestResult]] = {}
    for r in rows:
        if r.kind == "contract" and r.passed:  # passing contract checks: one line per cell
            key = (r.layer, r.cell)
            if key not in contract_ok:
                contract_ok[key] = []
                table.append(key)  # placeholder, filled below
            contract_ok[key].append(r)
            continue
        stat = _fmt(r.statistic)
        thr = _fmt(r.threshold) if r.kind == "stat" else "0 rows"
        mdd = _fmt(r.mdd) if r.kind == "stat" else "-"
        table.append((r.layer, r.cell, r.test, stat, thr, mdd, str(r.n), _verdict(r)))
    for i, row in enumerate(table):
        if len(row) == 2:
            rs = contract_ok[row]
            table[i] = (row[0], row[1], f"contract ({len(rs)} checks)", "0", "0 rows", "-",
                        str(max(r.n for r in rs)), "pass")
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [
        f"speccheck battery: verifier={rep.verifier} suite={rep.suite} seed={rep.seed} device={rep.device}",
        f"family-wise false-failure rate {rep.family_alpha:g} (Holm over "
        f"{sum(r.kind == 'stat' for r in rep.results)} statistical tests; binding per-test level "
        f"{rep.per_test_alpha:.3g}); contract checks are deterministic; min.det.dev = smallest "
        f"deviation detected with probability >= 0.99 (KS: sup-CDF distance; tails/acceptance: shift "
        f"of the probability; mmd: MMD^2)",
    ]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for row in table[1:]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    notes = [f"{r.layer} {r.cell} {r.test}: {r.note}" for r in rows if r.note and not r.passed]
    lines += [f"note: {n}" for n in rep.notes]
    lines += [f"failure: {n}" for n in notes]
    nf = len(rep.failures)
    lines.append(f"RESULT: {'PASS' if rep.passed else 'FAIL'} ({len(rep.results)} tests, {nf} failed) in {rep.wall_s:.1f} s "
                 f"(CPU {getattr(rep, 'cpu_s', 0.0):.1f} s)")
    return "\n".join(lines)


def report_dict(rep: BatteryReport) -> dict:
    return {
        "verifier": rep.verifier,
        "suite": rep.suite,
        "seed": rep.seed,
        "device": rep.device,
        "family_alpha": rep.family_alpha,
        "per_test_alpha": rep.per_test_alpha,
        "passed": rep.passed,
        "wall_s": rep.wall_s,
        "cpu_s": getattr(rep, "cpu_s", 0.0),
        "notes": rep.notes,
        "results": [r.as_dict() for r in rep.results],
    }


def write_json(rep: BatteryReport, path: str) -> None:
    with open(path, "w") as fh:
        json.dump(report_dict(rep), fh, indent=2)


def junit_xml(rep: BatteryReport) -> str:
    """JUnit XML: one testsuite per battery run, one testcase per (cell, test)."""
    fails = len(rep.failures)
    suite = ET.Element("testsuite", name=f"speccheck.battery.{rep.suite}.{rep.verifier}",
                       tests=str(len(rep.results)), failures=str(fails), errors="0", skipped="0",
                       time=f"{rep.wall_s:.3f}")
    props = ET.SubElement(suite, "properties")
    for k, v in (("seed", rep.seed), ("family_alpha", rep.family_alpha), ("per_test_alpha", rep.per_test_alpha),
                 ("device", rep.device)):
        ET.SubElement(props, "property", name=k, value=str(v))
    for r in rep.results:
        tc = ET.SubElement(suite, "testcase", classname=f"{rep.verifier}.{r.layer}.{r.cell}", name=r.test, time="0")
        msg = (f"statistic={_fmt(r.statistic)} threshold={_fmt(r.threshold)} p={_fmt(r.p_value)} "
               f"min_detectable_deviation={_fmt(r.mdd)} n={r.n}")
        if not r.passed:
            f = ET.SubElement(tc, "failure", message=msg, type=r.kind)
            f.text = r.note or msg
        else:
            ET.SubElement(tc, "system-out").text = msg
    return ET.tostring(suite, encoding="unicode")


def write_junit(rep: BatteryReport, path: str) -> None:
    with open(path, "w") as fh:
        fh.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        fh.write(junit_xml(rep))


# ------------------------------------------------------------------------- kill matrix
_SHORT = {
    "L1 contract": "L1c", "L1 ks": "ks", "L2 acceptance<=list-bound": "bound", "L2 acceptance=declared": "acc",
    "L3 contract": "L3c", "L3 direction": "dir", "L3 random-direction": "rdir", "L3 chi2-norm": "chi2",
    "L3 mmd": "mmd", "L4 contract": "L4c", "L4 innovation": "innov", "L4 chain-law steps": "chain",
    "L4 chain-law transitions": "trans",
}


def test_family(r: TestResult) -> str:
    """Aggregate a test across cells: "L1 ks", "L2 acceptance=declared", "L3 contract", ..."""
    if r.test.startswith("contract"):
        return f"{r.layer} contract"
    if r.layer == "L4":
        if r.test.startswith("chain-law step"):
            return "L4 chain-law steps"
        if r.test.startswith("chain-law transitions"):
            return "L4 chain-law transitions"
        return f"L4 {r.test.split()[0]}"
    if r.test.startswith("tails"):
        return "L1 tails"
    return f"{r.layer} {r.test}"


test_family.__test__ = False  # not a pytest test


def kill_matrix(reports: dict[str, BatteryReport]) -> tuple[list[str], dict[str, dict[str, bool]]]:
    """(test families, {mutant: {family: killed}}); a family kills if any of its tests failed."""
    fams: list[str] = []
    mat: dict[str, dict[str, bool]] = {}
    for name, rep in reports.items():
        row: dict[str, bool] = {}
        for r in rep.results:
            f = test_family(r)
            if f not in fams:
                fams.append(f)
            row[f] = row.get(f, False) or not r.passed
        mat[name] = row
    order = {"L1": 0, "L2": 1, "L3": 2, "L4": 3}
    fams.sort(key=lambda f: (order.get(f.split()[0], 9), f))
    return fams, mat


def format_kill_matrix(reports: dict[str, BatteryReport]) -> str:
    fams, mat = kill_matrix(reports)
    short = [_SHORT.get(f, "tails" if f == "L1 tails" else f) for f in fams]
    w0 = max([len("mutant")] + [len(m) for m in mat])
    head = "mutant".ljust(w0) + "  " + "  ".join(s for s in short) + "  killed"
    lines = [head, "-" * len(head)]
    for m, row in mat.items():
        cells = ["X".center(len(s)) if row.get(f) else ("." if f in row else " ").center(len(s)) for f, s in zip(fams, short)]
        killed = any(row.values())
        lines.append(m.ljust(w0) + "  " + "  ".join(cells) + "  " + ("yes" if killed else "NO") +
                     f" ({reports[m].wall_s:.0f} s)")
    n_k = sum(any(r.values()) for r in mat.values())
    lines.append(f"{n_k}/{len(mat)} mutants killed (X: some test of that family failed; '.': ran and passed; "
                 "blank: not run)")
    lines.append("columns: " + "; ".join(f"{s_}={f}" for s_, f in zip(short, fams)))
    return "\n".join(lines)


def report_from_dict(d: dict) -> BatteryReport:
    """Rebuild a :class:`BatteryReport` from :func:`report_dict` output (e.g. to merge kill
    matrices computed in separate processes)."""
    fields = TestResult.__dataclass_fields__
    res = []
    for r in d["results"]:
        kw = {k: r[k] for k in fields if k in r}
        for k in ("statistic", "threshold", "p_value", "mdd"):
            if kw.get(k) is None:
                kw[k] = math.nan
        res.append(TestResult(**kw))
    return BatteryReport(d["verifier"], d["suite"], d["seed"], d["family_alpha"], d["per_test_alpha"], d["device"],
                         res, list(d.get("notes", [])), float(d.get("wall_s", 0.0)), float(d.get("cpu_s", 0.0)))
