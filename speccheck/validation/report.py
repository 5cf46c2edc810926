"""Battery reports: a short human summary (full table with ``verbose``), JSON, JUnit XML, and
the mutant kill matrix."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from speccheck.validation.results import LAYERS, BatteryReport, TestResult


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
    if r.kind == "n/a":
        return "n/a"
    return "pass" if r.passed else "FAIL"


#: how each statistic's minimum detectable deviation is measured
_MDD_UNITS = "KS/pit-ks: sup-CDF distance; tails/acceptance: shift of the probability; mmd: MMD^2"


def _test_kind(r: TestResult) -> str:
    if r.test.startswith("tails"):
        return "tails"
    if r.layer == "L4":
        return r.test.split()[0]
    return r.test


def _layer_lines(rep: BatteryReport) -> list[str]:
    """One line per layer: tests, n/a, failed, and the weakest power (largest MDD) per test."""
    rows = [("layer", "tests", "n/a", "failed", f"largest min. detectable deviation at power {rep.power:g}")]
    for lid, name in LAYERS.items():
        rs = [r for r in rep.results if r.layer == lid]
        if not rs:
            continue
        worst: dict[str, float] = {}
        for r in rs:
            if r.kind == "stat" and math.isfinite(r.mdd):
                key = _test_kind(r)
                worst[key] = max(worst.get(key, 0.0), r.mdd)
        if all(r.kind == "contract" for r in rs):
            power = "deterministic checks"
        elif worst:
            power = ", ".join(f"{k} {_fmt(v)}" for k, v in worst.items())
        else:
            power = "p-value tests (no MDD)"
        n_na = sum(r.kind == "n/a" for r in rs)
        rows.append((f"{lid} {name}", str(len(rs) - n_na), str(n_na), str(sum(not r.passed for r in rs)), power))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return ["  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:])] + [row[4]])
            for row in rows]


def _failure_line(r: TestResult) -> str:
    if r.kind == "contract":
        return f"{r.layer} {r.cell} {r.test}: {r.note or 'violated'}"
    detail = f"statistic {_fmt(r.statistic)} vs threshold {_fmt(r.threshold)}, p = {_fmt(r.p_value)}"
    return f"{r.layer} {r.cell} {r.test}: {detail}" + (f" ({r.note})" if r.note else "")


def _table(rows: list[TestResult]) -> list[str]:
    head = ("layer", "cell", "test", "statistic", "threshold", "min.det.dev", "n", "verdict")
    table = [head]
    for r in rows:
        stat = _fmt(r.statistic)
        if r.kind == "stat":
            thr, mdd = _fmt(r.threshold), _fmt(r.mdd)
        elif r.kind == "n/a":
            thr, mdd = "n/a", "n/a"
        else:
            thr, mdd = "0 rows", "-"
        table.append((r.layer, r.cell, r.test, stat, thr, mdd, str(r.n), _verdict(r)))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in table[1:]]
    return lines


def format_report(rep: BatteryReport, verbose: bool = False, only_failures: bool = False,
                  max_failures: int = 20) -> str:
    """The report people read: header, one line per layer, the failures and where they are
    (localisation), notes and the verdict. ``verbose`` adds the full per-test table;
    ``only_failures`` limits that table to failed tests."""
    n_stat = sum(r.kind == "stat" for r in rep.results)
    lines = [
        f"speccheck battery: verifier={rep.verifier} suite={rep.suite} seed={rep.seed} device={rep.device}"
        + (f" scale={rep.scale:g}" if rep.scale != 1.0 else ""),
        f"family-wise false-failure rate {rep.family_alpha:g} (Holm over {n_stat} statistical tests; thresholds at "
        f"the binding per-test level {rep.per_test_alpha:.3g}); contract checks are deterministic",
        f"min. detectable deviation = smallest deviation detected with probability >= {rep.power:g} "
        f"({_MDD_UNITS}); n/a = cannot fail at that cell",
        "",
    ]
    lines += _layer_lines(rep)
    promise = rep.promise
    if promise is not None:
        lines += ["", promise.line()] + (promise.table_lines() if verbose else [])
    fails = rep.failures
    if fails:
        lines += ["", f"failures ({len(fails)}):"]
        lines += [f"  {_failure_line(r)}" for r in fails[:max_failures]]
        if len(fails) > max_failures:
            lines.append(f"  ... and {len(fails) - max_failures} more (--verbose or --json for all)")
    if rep.localisations:
        lines += ["", "where (confirmed on fresh draws, own error budget):"]
        lines += [f"  {loc.describe()}" for loc in rep.localisations]
        if not any(loc.confirmed for loc in rep.localisations):
            lines.append("  none confirmed on fresh draws: the defect may depend on more than delta and K")
    elif fails and any(r.kind == "stat" for r in fails):
        lines += ["", "where: not localised in delta (the failing tests name no delta window)"]
    if verbose or only_failures:
        rows = fails if only_failures else rep.results
        lines += [""] + _table(rows)
    lines += [f"note: {n}" for n in rep.notes]
    lines.append(f"RESULT: {'PASS' if rep.passed else 'FAIL'} ({len(rep.results)} tests, {len(fails)} failed) "
                 f"in {rep.wall_s:.1f} s (CPU {rep.cpu_s:.1f} s)")
    return "\n".join(lines)


def report_dict(rep: BatteryReport) -> dict:
    """JSON-ready dict of a report (:meth:`BatteryReport.to_dict`)."""
    return rep.to_dict()


def write_json(rep: BatteryReport, path: str) -> None:
    """``rep`` as indented strict JSON at ``path`` (non-finite floats as null)."""
    from speccheck.strict_json import dumps

    with open(path, "w") as fh:
        fh.write(dumps(report_dict(rep), indent=2))


# characters XML 1.0 does not allow in a document, even escaped (its Char production)
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_legal(text: str) -> str:
    """``text`` with each character XML 1.0 forbids written as a visible ``\\xNN`` / ``\\uNNNN``."""
    return _XML_ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256
                            else f"\\u{ord(m.group()):04x}", text)


def junit_xml(rep: BatteryReport) -> str:
    """JUnit XML: one testsuite per battery run, one testcase per (cell, test)."""
    fails = len(rep.failures)
    skipped = sum(r.kind == "n/a" for r in rep.results)
    suite = ET.Element("testsuite", name=f"speccheck.battery.{rep.suite}.{rep.verifier}",
                       tests=str(len(rep.results)), failures=str(fails), errors="0", skipped=str(skipped),
                       time=f"{rep.wall_s:.3f}")
    props = ET.SubElement(suite, "properties")
    for k, v in (("seed", rep.seed), ("family_alpha", rep.family_alpha), ("per_test_alpha", rep.per_test_alpha),
                 ("device", rep.device), ("power", rep.power), ("scale", rep.scale)):
        ET.SubElement(props, "property", name=k, value=str(v))
    for r in rep.results:
        tc = ET.SubElement(suite, "testcase", classname=f"{rep.verifier}.{r.layer}.{r.cell}", name=r.test, time="0")
        msg = (f"statistic={_fmt(r.statistic)} threshold={_fmt(r.threshold)} p={_fmt(r.p_value)} "
               f"min_detectable_deviation={_fmt(r.mdd)} n={r.n}")
        if not r.passed:
            f = ET.SubElement(tc, "failure", message=msg, type=r.kind)
            f.text = r.note or msg
        elif r.kind == "n/a":
            ET.SubElement(tc, "skipped", message=r.note or "n/a: cannot fail at this cell")
        else:
            ET.SubElement(tc, "system-out").text = msg
    for loc in rep.localisations:
        ET.SubElement(props, "property", name="localisation", value=loc.describe())
    return _xml_legal(ET.tostring(suite, encoding="unicode"))  # names come from user code: any characters


def write_junit(rep: BatteryReport, path: str) -> None:
    with open(path, "w") as fh:
        fh.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        fh.write(junit_xml(rep))


# ------------------------------------------------------------------------- kill matrix
_SHORT = {
    "L1 contract": "L1c", "L1 ks": "ks", "L2 acceptance<=list-bound": "bound", "L2 acceptance=declared": "acc",
    "L3 contract": "L3c", "L3 direction": "dir", "L3 random-direction": "rdir", "L3 chi2-norm": "chi2",
    "L3 mmd": "mmd", "L4 contract": "L4c", "L4 innovation": "innov", "L4 chain-law steps": "chain",
    "L4 chain-law transitions": "trans", "L0 contract": "L0c", "L5 contract": "L5c", "L5 pit-ks": "pit",
    "L5 acceptance<=list-bound": "cbound", "L5 acceptance=declared": "cacc", "L1 tails": "tails",
    "L6 contract": "L6c", "L6 pit-ks": "spit", "L6 acceptance=declared": "sacc", "L6 independent rows": "indep",
    "L6 shift": "shift", "L6 slope on delta": "slope",
    "L7 contract": "L7c", "L7 pit-ks": "lpit", "L7 acceptance=declared": "lacc", "L7 trend": "ltrend",
    "L7 pairs": "lpair", "L7 shift": "lshift", "L7 states": "lstate",
}
#: the law layer's tests, by the start of their names, in families
_LAW_FAMILIES = (("pit-ks of the state", "L7 states"), ("pit-ks", "L7 pit-ks"),
                 ("acceptance=declared", "L7 acceptance=declared"), ("PIT trend", "L7 trend"),
                 ("acceptance trend", "L7 trend"), ("independent rows", "L7 pairs"), ("mean(s_out", "L7 shift"),
                 ("shift proportional", "L7 shift"))
#: the sequence layer's tests, by the start of their names, in families
_SEQUENCE_FAMILIES = (("pit-ks", "L6 pit-ks"), ("acceptance=declared", "L6 acceptance=declared"),
                      ("independent rows", "L6 independent rows"), ("mean(s_out - delta)", "L6 shift"),
                      ("shift proportional", "L6 shift"), ("s_out - delta on delta", "L6 slope on delta"))


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
    if r.layer == "L6":
        return next((family for start, family in _SEQUENCE_FAMILIES if r.test.startswith(start)), f"L6 {r.test}")
    if r.layer == "L7":
        return next((family for start, family in _LAW_FAMILIES if r.test.startswith(start)), f"L7 {r.test}")
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
    order = {"L0": 0, "L1": 1, "L2": 2, "L5": 3, "L3": 4, "L4": 5, "L6": 6, "L7": 7}
    fams.sort(key=lambda f: (order.get(f.split()[0], 9), f))
    return fams, mat


def format_kill_matrix(reports: dict[str, BatteryReport]) -> str:
    """A table: one row per mutant, one column per test family; X = killed by that family."""
    fams, mat = kill_matrix(reports)
    short = [_SHORT.get(f, "tails" if f == "L1 tails" else f) for f in fams]
    w0 = max([len("mutant")] + [len(m) for m in mat])
    head = "mutant".ljust(w0) + "  " + "  ".join(s for s in short) + "  killed"
    lines = [head, "-" * len(head)]
    for m, row in mat.items():
        cells = ["X".center(len(s)) if row.get(f) else ("." if f in row else " ").center(len(s))
                 for f, s in zip(fams, short)]
        killed = any(row.values())
        where = [loc for loc in reports[m].localisations if loc.confirmed]
        at = ""
        if where:
            loc = where[0]
            lo, hi = f"{loc.delta_lo:.4g}", f"{loc.delta_hi:.4g}"
            at = f"  at delta {lo}, K={loc.K}" if lo == hi else f"  at delta [{lo}, {hi}), K={loc.K}"
        lines.append(m.ljust(w0) + "  " + "  ".join(cells) + "  " + ("yes" if killed else "NO") +
                     f" ({reports[m].wall_s:.0f} s){at}")
    n_k = sum(any(r.values()) for r in mat.values())
    lines.append(f"{n_k}/{len(mat)} mutants killed (X: some test of that family failed; '.': ran and passed; "
                 "blank: not run; 'at': the first confirmed localisation)")
    lines.append("columns: " + "; ".join(f"{s_}={f}" for s_, f in zip(short, fams)))
    return "\n".join(lines)
