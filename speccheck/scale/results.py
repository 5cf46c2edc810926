"""Reading the results store: list its jobs, show one (its summary), export its units.

``export`` writes one row per unit: job, unit key, identity, seed, spec hash, code version,
timing, worker and the result (JSON text in csv/parquet, an object in json).
"""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import datetime, timezone
from typing import Optional

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


def export(path: str, name: Optional[str] = None, *, fmt: str = "csv", out: Optional[str] = None) -> Optional[str]:
    """Export units as ``fmt`` (csv, json, parquet) to ``out``; without ``out`` return the text."""
    if fmt not in ("csv", "json", "parquet"):
        raise InputError(f"--format must be csv, json or parquet, got {fmt!r}")
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
    try:
        import pandas as pd

        pd.DataFrame(rows, columns=EXPORT_FIELDS).to_parquet(out, index=False)
    except ImportError as exc:
        raise InputError(f"--format parquet needs pandas with pyarrow (`pip install pyarrow`): {exc}; "
                         "or use --format csv/json") from None
