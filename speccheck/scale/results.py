"""Reading the results store: list its jobs, show one (its summary), export its units.

``export`` writes one row per unit (``rows="units"``: job, unit key, identity, seed, spec hash,
code version, timing, worker and the result as JSON text in csv/parquet, an object in json), or
a tidy table with typed columns (:func:`export_table`): ``rows="cells"`` one row per sweep cell,
battery test or calibration record; ``rows="trajectories"`` one row per sampler trajectory.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from datetime import datetime, timezone
from typing import Any, Optional

from speccheck.errors import FileFormatError, InputError
from speccheck.scale.store import ResultsStore

EXPORT_FIELDS = ["job", "kind", "unit_key", "identity", "seed", "spec_hash", "code_version", "wall_s", "worker",
                 "stored_at", "result"]


def _open(path: str) -> ResultsStore:
    if not os.path.exists(path):
        raise FileFormatError(f"results store {path} does not exist (check --store; jobs write it with --store PATH)")
    return ResultsStore(path, create=False, readonly=True)  # reading only: a read-only store can be read


def list_jobs(path: str) -> list[dict]:
    """Every job of the store at ``path``: name, kind, spec, spec hash, creation time, units stored."""
    with _open(path) as st:
        return st.jobs()


def format_jobs(jobs: list[dict]) -> str:
    """One line per job."""
    if not jobs:
        return "(no jobs)"
    width = max(len(j["name"]) for j in jobs)
    lines = [f"{'job':<{width}}  {'kind':<11} {'units':>6}  spec hash         created (UTC)"]
    for j in jobs:
        created = datetime.fromtimestamp(j["created_at"], tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
        lines.append(f"{j['name']:<{width}}  {j['kind']:<11} {j['units']:>6}  {j['spec_hash']}  {created}")
    return "\n".join(lines)


def show_job(path: str, name: str) -> str:
    """The job's spec and its summary: a sweep table, a calibration table or a kill matrix."""
    from speccheck.scale import jobs

    with _open(path) as st:
        job = st.job(name)
        units = st.units(name)
    head = [f"job {name!r} ({job['kind']}, {len(units)} units) in {path}", f"spec: {json.dumps(job['spec'])}", ""]
    if job["kind"] == "sweep":
        rows = sorted((jobs.summary_row(u.result) for u in units), key=lambda r: (r["rule"], r["K"], r["L"]))
        body = jobs.format_sweep(rows)
    elif job["kind"] == "calibration":
        from speccheck.validation.suites import load_suite

        records = [u.result for u in units]
        rules = sorted({r["rule"] for r in records})
        alpha = records[0]["family_alpha"] if records else load_suite(job["spec"]["suite"]).family_alpha
        body = jobs.format_calibration(jobs.summarise_calibration(
            records, rules, family_alpha=alpha, suite=job["spec"]["suite"], device=job["spec"]["device"]))
    elif job["kind"] == "mutants":
        from speccheck.validation.report import format_kill_matrix

        body = format_kill_matrix(jobs.battery_reports({u.unit_key: {**u.result, "wall_s": u.wall_s} for u in units}))
    elif job["kind"] == "battery":
        body = format_reports({u.unit_key: u.result for u in units}, mutants=False)
    else:
        body = "\n".join(f"{u.unit_key}: {json.dumps(u.result)[:200]}" for u in units)
    return "\n".join(head) + body


def format_reports(reports: dict[str, dict], mutants: bool) -> str:
    """One line per report: name, verdict (killed / survived for mutants), failed tests."""
    lines = []
    for name, rep in sorted(reports.items()):
        if rep.get("skipped"):
            lines.append(f"{name:<28} skipped ({rep.get('note', '')})")
            continue
        failed = [f"{r.get('layer', '')} {r['cell']} {r['test']}".strip() for r in rep.get("results", [])
                  if not r.get("passed", True)]
        verdict = ("killed" if not rep["passed"] else "SURVIVED") if mutants else ("pass" if rep["passed"] else "FAIL")
        lines.append(f"{name:<28} {verdict:<9} {len(failed)} failed" + (f": {'; '.join(failed[:3])}" if failed else ""))
    return "\n".join(lines)


def export_rows(path: str, name: Optional[str] = None) -> list[dict]:
    """One dict per stored unit (of job ``name``, or of every job), EXPORT_FIELDS."""
    with _open(path) as st:
        chosen = [st.job(name)] if name else st.jobs()
        rows = []
        for job in chosen:
            for u in st.units(job["name"]):
                rows.append({"job": u.job, "kind": job["kind"], "unit_key": u.unit_key, "identity": u.identity,
                             "seed": u.seed, "spec_hash": u.spec_hash, "code_version": u.code_version,
                             "wall_s": u.wall_s, "worker": u.worker, "stored_at": u.stored_at, "result": u.result})
    return rows


ROW_KINDS = ("units", "cells", "trajectories")
TEST_FIELDS = ["layer", "cell", "test", "kind", "statistic", "threshold", "p_value", "mdd", "n", "passed"]


_TEST_FLOATS = ("statistic", "threshold", "p_value", "mdd")
_TEST_COLUMN = {"kind": "test_kind"}  # "kind" is the job's


def _number(value: Any, sign: Any = None) -> float:
    """A stored float: None (a non-finite value written as null) is NaN, or infinite with the
    ``sign`` (+1 / -1) its test's ``infinite`` map names; "inf"/"-inf" (older reports) infinite."""
    if value is None:
        return math.copysign(math.inf, sign) if sign in (1, -1) else math.nan
    return float(value)


def _cell_rows(job: str, kind: str, unit: dict) -> list[dict]:
    """The tidy rows of one stored unit: a sweep cell's summary, each test of a battery report,
    or a calibration record."""
    from speccheck.scale.tables import summary_row

    result = unit["result"]
    head = {"job": job, "kind": kind, "unit_key": unit["unit_key"], "seed": unit["seed"]}
    if kind == "sweep":
        return [{**head, **summary_row(result)}]
    if kind.startswith(("battery", "mutants")) and isinstance(result.get("results"), list):
        return [{**head, "verifier": result.get("verifier") or str(unit["unit_key"]).split("/")[0],
                 **{_TEST_COLUMN.get(k, k): _number(test.get(k), (test.get("infinite") or {}).get(k))
                    if k in _TEST_FLOATS else test.get(k)
                    for k in TEST_FIELDS}}
                for test in result["results"]]
    if kind == "calibration":
        return [{**head, **{k: v for k, v in result.items() if not isinstance(v, (dict, list))}}]
    return []


def _trajectory_rows(job: str, unit: dict) -> list[dict]:
    from speccheck.scale.tables import TRAJECTORY_FIELDS

    result = unit["result"]
    summary, columns = result["summary"], result["trajectories"]
    fixed = {"job": job, **{k: summary[k] for k in ("rule", "K", "L", "tree", "B")}, "seed": unit["seed"],
             "stochastic_steps": result.get("stochastic_steps")}
    present = [c for c in TRAJECTORY_FIELDS if c in columns]
    return [{**fixed, **{c: columns[c][i] for c in present}} for i in range(len(columns["speedup"]))]


def export_table(path: str, name: Optional[str] = None, rows: str = "cells") -> Any:
    """A pandas DataFrame of job ``name`` (or every job) in the store at ``path``, one row per
    ``rows`` ("units", "cells" or "trajectories", see the module docstring), columns typed
    (integers, floats with NaN for a missing value, booleans, strings; JSON text for the nested
    values of "units")."""
    import pandas as pd

    if rows not in ROW_KINDS:
        raise InputError(f"--rows must be one of {', '.join(ROW_KINDS)}, got {rows!r}")
    units = export_rows(path, name)
    if rows == "units":
        from speccheck.strict_json import dumps

        table = [{**u, "identity": dumps(u["identity"]), "result": dumps(u["result"], sort_keys=True)} for u in units]
        return pd.DataFrame(table, columns=EXPORT_FIELDS).infer_objects()
    if rows == "trajectories":
        table = [r for u in units if u["kind"] == "sweep" for r in _trajectory_rows(u["job"], u)]
    else:
        table = [r for u in units for r in _cell_rows(u["job"], u["kind"], u)]
    return pd.DataFrame(table).infer_objects()


def _write_table(frame: Any, fmt: str, out: Optional[str]) -> Optional[str]:
    if fmt == "parquet":
        if not out:
            raise InputError("--format parquet needs --out FILE (binary output)")
        _write_parquet_frame(frame, out)
        return None
    text = frame.to_json(orient="records", indent=1) + "\n" if fmt == "json" else frame.to_csv(index=False)
    if out is None:
        return text
    with open(out, "w", newline="") as fh:
        fh.write(text)
    return None


def export(path: str, name: Optional[str] = None, *, fmt: str = "csv", out: Optional[str] = None,
           rows: str = "units") -> Optional[str]:
    """Export job ``name`` (or every job) as ``fmt`` (csv, json, parquet) to ``out``, one row per
    ``rows`` (see :func:`export_table`); without ``out`` return the text."""
    if fmt not in ("csv", "json", "parquet"):
        raise InputError(f"--format must be csv, json or parquet, got {fmt!r}")
    if rows != "units":
        return _write_table(export_table(path, name, rows), fmt, out)
    from speccheck.strict_json import dumps

    rows = export_rows(path, name)
    if fmt == "json":
        text = dumps(rows, indent=1) + "\n"
    else:
        flat = [{**r, "identity": dumps(r["identity"]), "result": dumps(r["result"], sort_keys=True)}
                for r in rows]
        if fmt == "parquet":
            if not out:
                raise InputError("--format parquet needs --out FILE (binary output)")
            _write_parquet(flat, out)
            return None
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=EXPORT_FIELDS)
        writer.writeheader()
        writer.writerows(flat)
        text = buffer.getvalue()
    if out is None:
        return text
    with open(out, "w", newline="") as fh:
        fh.write(text)
    return None


def _write_parquet(rows: list[dict], out: str) -> None:
    import pandas as pd

    _write_parquet_frame(pd.DataFrame(rows, columns=EXPORT_FIELDS), out)


def _write_parquet_frame(frame: Any, out: str) -> None:
    try:
        frame.to_parquet(out, index=False)
    except ImportError as exc:
        raise InputError(f"--format parquet needs pyarrow: pip install 'speccheck[parquet]' (or pyarrow); {exc}; "
                         "or use --format csv/json") from None
