"""Heavy jobs as sets of units: sweeps, calibrations, mutant matrices, battery runs.

Each job builds its units (:mod:`speccheck.scale.units`), runs the ones its store lacks on an
executor (:mod:`speccheck.scale.executors`; default in-process), stores each result as it
arrives (:mod:`speccheck.scale.store`) and summarises from the store, so an interrupted job
resumes where it stopped and gives the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence, Union

from speccheck.errors import FileFormatError, InputError
from speccheck.scale.deps import rule_digest
from speccheck.scale.executors import Executor, InProcessExecutor
from speccheck.scale.store import ResultsStore
from speccheck.scale.tables import SUMMARY_FIELDS, TRAJECTORY_FIELDS, summary_row
from speccheck.scale.units import Unit, plain, suite_digest

if TYPE_CHECKING:
    from speccheck.sampler.experiments import Protocol
    from speccheck.validation.verdict import CheckOutcome

StoreArg = Union[None, str, os.PathLike, ResultsStore]
Log = Callable[[str], None]


# ----------------------------------------------------------------------------- running units
def _open_store(store: StoreArg) -> Optional[ResultsStore]:
    if store is None or isinstance(store, ResultsStore):
        return store
    return ResultsStore(os.fspath(store))


def run_units(units: Sequence[Unit], *, job: str, kind: str, spec: dict, store: StoreArg = None,
              executor: Optional[Executor] = None,
              on_new: Optional[Callable[[Unit, dict], None]] = None,
              on_outcome: Optional[Callable[[Unit, dict], None]] = None,
              judge: Optional[Callable[[Unit, dict], dict]] = None) -> dict[str, dict]:
    """Run the units of ``job`` that ``store`` lacks, storing each as it finishes; return
    ``{unit key: result}`` for every unit (stored or new). Without a store nothing persists.
    ``judge(unit, result)``, called HERE as each unit's result arrives, replaces it before it is
    stored or seen (a battery cell's raw outputs -> its judged tests). ``on_new(unit, result)``
    and ``on_outcome(unit, outcome)`` (with ``wall_s``, ``worker``) see each unit run now."""
    keys = [u.key for u in units]
    if len(set(keys)) != len(keys):
        raise InputError(f"job {job!r}: duplicate units {sorted({k for k in keys if keys.count(k) > 1})[:5]}")
    executor = executor or InProcessExecutor()
    if judge is not None:
        executor = _Judged(executor, judge)
    opened = _open_store(store)
    if opened is None:
        results: dict[str, dict] = {}

        def keep(unit: Unit, outcome: dict) -> None:
            results[unit.key] = outcome["result"]
            if on_outcome:
                on_outcome(unit, outcome)
            if on_new:
                on_new(unit, outcome["result"])

        executor.run(list(units), keep)
        return results
    try:
        digest = opened.open_job(job, kind, spec)
        done = reusable(opened, job, keys)
        todo = [u for u in units if u.key not in done]

        def store_one(unit: Unit, outcome: dict) -> None:
            opened.put(job, unit.key, identity=unit.identity, seed=unit.seed, spec_hash=digest,
                       wall_s=outcome["wall_s"], worker=outcome["worker"], result=outcome["result"],
                       code=outcome.get("code"), deps=outcome.get("deps"))
            if on_outcome:
                on_outcome(unit, outcome)
            if on_new:
                on_new(unit, outcome["result"])

        executor.run(todo, store_one)
        stored = {row.unit_key: row.result for row in opened.units(job, keys)}
    finally:
        if opened is not store:
            opened.close()
    missing = [k for k in keys if k not in stored]
    if missing:  # cannot happen unless the store was altered under us; never a silent partial result
        raise FileFormatError(f"results store {opened.path}: job {job!r} lacks units {missing[:5]} after the run")
    return stored


def reusable(store: ResultsStore, job: str, keys: Sequence[str], log: Optional[Log] = None) -> set[str]:
    """The units of ``job`` among ``keys`` that ``store`` holds and may be reused: a unit whose
    recorded dependencies changed (:func:`speccheck.scale.deps.stale`: its rule's or a helper
    module's file, a data file in their package, a dependency's version, a declared environment
    variable, speccheck's source) is discarded, to run again. Every reuse and every discard is
    said on stderr (``log``), naming the job, the store, when the units were stored and their code:
    a stored verdict never passes silently."""
    import sys
    import time

    from speccheck.scale.deps import stale, unseen

    log = log or (lambda line: print(f"speccheck: {line}", file=sys.stderr, flush=True))
    wanted = set(keys)
    done = store.stored_keys(job) & wanted
    if not done:
        return set()
    manifests = store.manifests(job)
    verdicts: dict[str, list[str]] = {}  # manifest text -> what changed (one check per distinct manifest)
    old: dict[str, list[str]] = {}
    unrecorded, hidden = [], set()
    for key in sorted(done):
        if key not in manifests:
            unrecorded.append(key)
            continue
        text = json.dumps(manifests[key], sort_keys=True)
        if text not in verdicts:
            verdicts[text] = stale(manifests[key])
            hidden.update(unseen(manifests[key]))
        if verdicts[text]:
            old[key] = verdicts[text]
    if old:
        changed = sorted({c for cs in old.values() for c in cs})
        store.discard(job, old)
        log(f"job {job!r} in {store.path}: {len(old)} stored unit(s) not reused, what they depended on changed "
            f"({'; '.join(changed[:4])}{'; ...' if len(changed) > 4 else ''}); running them again")
    kept = done - set(old)
    if kept:
        rows = store.units(job, kept)
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(min(r.stored_at for r in rows)))
        codes = sorted({r.code_version for r in rows})
        log(f"reusing {len(kept)} stored unit(s) of job {job!r} from {store.path} (stored since {when}, code "
            f"{', '.join(codes[:2])}; " + (f"{len(unrecorded)} with no recorded dependencies, stored by an older "
                                           "speccheck" if unrecorded else "their dependencies unchanged")
            + (f"; {len(hidden)} recorded file(s) not visible on this machine, not compared (units run on other "
               f"hosts), e.g. {sorted(hidden)[0]}" if hidden else "") + ")")
    return kept


class _Judged:
    """``executor`` whose outcomes reach the caller with ``judge(unit, result)`` as their result."""

    def __init__(self, executor: Executor, judge: Callable[[Unit, dict], dict]) -> None:
        self.executor, self.judge = executor, judge

    def run(self, units: Sequence[Unit], on_result: Callable[[Unit, dict], None]) -> None:
        self.executor.run(units, lambda unit, outcome: on_result(
            unit, {**outcome, "result": self.judge(unit, outcome["result"])}))


# ----------------------------------------------------------------------------- sweeps
def sweep_units(proto: Protocol, verifiers: Sequence[str], cells: Iterable[tuple[int, int]], n_traj: int,
                seed: int, chunk: Optional[int] = None) -> tuple[dict, list[Unit]]:
    """The sweep's spec (protocol, trajectories per cell, seed) and one unit per (rule, K, L),
    largest trees first (better load balance; results do not depend on the order). With
    ``chunk`` (trajectories per unit) smaller than ``n_traj``, the spec records it and the units
    are the cells' chunks, ``sweep-chunk`` ``(rule, K, L, index)``, each with its own seed."""
    if n_traj < 2:
        raise InputError(f"trajectories must be >= 2 (a standard error needs two), got {n_traj}")
    if seed < 0:
        raise InputError(f"--seed must be >= 0, got {seed}")
    if chunk is not None and chunk < 1:
        raise InputError(f"--chunk must be >= 1 trajectories per unit, got {chunk}")
    spec = {"protocol": asdict(proto), "trajectories": int(n_traj), "seed": int(seed)}
    cells = sorted(set((int(k), int(l)) for k, l in cells), key=lambda c: (-(c[0] ** c[1]), c))
    if chunk is None or chunk >= n_traj:
        units = [Unit("sweep-cell", spec, (str(rule), K, L), base_seed=int(seed))
                 for K, L in cells for rule in verifiers]
        return spec, units
    spec["chunk"] = int(chunk)
    n_chunks = -(-n_traj // chunk)
    units = [Unit("sweep-chunk", spec, (str(rule), K, L, index), base_seed=int(seed))
             for K, L in cells for rule in verifiers for index in range(n_chunks)]
    return spec, units


def merge_chunks(proto: Protocol, rule: str, K: int, L: int, chunks: Sequence[dict], seed: int, n_traj: int) -> dict:
    """A sweep cell's stored result from its chunks' raw results (in index order; an unchunked
    cell is one chunk), computed here from the raw outputs alone (no verifier): the trajectory
    columns concatenated (trajectory ids running on over the chunks, ``n_traj`` in all) and the summary of
    :func:`speccheck.sampler.analysis.summarize` on the chunks' runs joined into one, exactly
    what one run of all the trajectories would summarise. Malformed raw outputs raise
    :class:`~speccheck.errors.FileFormatError` (no result from corrupt evidence)."""
    from speccheck.sampler.analysis import join_raw
    from speccheck.sampler.experiments import summarize_cell

    if not chunks:
        raise InputError(f"sweep cell {rule} K={K} L={L}: no chunks to merge")
    fields = ("rule", "tree_L")
    try:
        if any(chunk.get(name) != chunks[0].get(name) for chunk in chunks for name in fields):
            raise ValueError(f"the chunks differ in {fields}")
        raw = {**join_raw(list(chunks)), **{name: chunks[0].get(name) for name in fields}}
        summary, columns = summarize_cell(proto, raw, int(K), int(L), int(n_traj), int(seed))
    except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
        older = all(isinstance(chunk, dict) and "protocol" in chunk and "declared" not in chunk for chunk in chunks)
        raise FileFormatError(f"sweep cell {rule} K={K} L={L}: " + (
            "chunks stored by an older speccheck (no declared acceptance); run the sweep under another --name"
            if older else f"malformed raw outputs ({exc}); no result from them")) from None
    return {"summary": plain(summary), "trajectories": columns, "stochastic_steps": int(raw["n_stochastic"])}


def _run_chunked(units: Sequence[Unit], proto: Protocol, spec: dict, *, job: str, store: StoreArg,
                 executor: Optional[Executor], on_new: Optional[Callable[[Unit, dict], None]]) -> dict[str, dict]:
    """The chunk units of the cells that ``job`` lacks (stored in job ``<job>.chunks`` as they
    finish, so a big cell resumes mid-way), each cell merged and stored in ``job`` once its chunks
    are in: ``{cell key: result}``. The cells have the same keys as unchunked sweep cells."""
    cells: dict[str, list[Unit]] = {}
    for unit in units:
        cells.setdefault("/".join(str(p) for p in unit.identity[:3]), []).append(unit)
    opened = _open_store(store)
    try:
        done = set()
        if opened is not None:
            digest = opened.open_job(job, "sweep", spec)
            done = opened.stored_keys(job)
        todo = [u for key, group in cells.items() if key not in done for u in group]
        chunk_results = run_units(todo, job=f"{job}.chunks", kind="sweep-chunks", spec=spec, store=opened,
                                  executor=executor) if todo else {}
        merged: dict[str, dict] = {}
        for key, group in cells.items():
            if key in done:
                continue
            rule, K, L = group[0].identity[:3]
            result = merge_chunks(proto, str(rule), int(K), int(L), [chunk_results[u.key] for u in group],
                                  int(spec["seed"]), int(spec["trajectories"]))
            merged[key] = result
            if opened is not None:
                opened.put(job, key, identity=[rule, K, L], seed=int(spec["seed"]), spec_hash=digest, wall_s=0.0,
                           worker="merged-chunks", result=result)
            if on_new:
                on_new(Unit("sweep-cell", spec, (rule, K, L), base_seed=int(spec["seed"])), result)
        if opened is None:
            return merged
        return {row.unit_key: row.result for row in opened.units(job, list(cells))}
    finally:
        if opened is not store and opened is not None:
            opened.close()


def _log_cell(log: Log) -> Callable[[Unit, dict], None]:
    def show(unit: Unit, result: dict) -> None:
        s = summary_row(result)
        log(f"{s['rule']} K={s['K']} L={s['L']}: speedup {s['speedup']:.3f} +- {s['speedup_se']:.3f} "
            f"(predicted {s['predicted_speedup']:.3f}, z_cal {s['calibration_z']:+.2f})")
    return show


def calibration_contradictions(rows: Sequence[dict], alpha: float) -> list[dict]:
    """The cells whose acceptance calibration z contradicts the verifier's acceptance law, by
    Holm's step-down at family-wise false-failure rate ``alpha`` over the m cells with a z.

    Under the law, z = (accepts - sum_i a_i) / sqrt(sum_i a_i (1 - a_i)) (a_i: the law's acceptance
    at event i's delta and K) is approximately N(0, 1), so p = P(|Z| >= |z|) = erfc(|z| / sqrt 2).
    Holm: sort p_(1) <= ... <= p_(m) and reject p_(j) while p_(j) <= alpha / (m - j + 1), i.e.
    |z| > Phi^-1(1 - alpha / (2 (m - j + 1))); P(any false rejection) <= alpha. A NaN z (no
    events) is no test; z = +-inf (accepts where the law says 0 or 1, or none where it says 1) has
    p = 0. Returns the rejected rows with ``calibration_p`` and ``calibration_threshold`` added."""
    from statistics import NormalDist

    tests = sorted(((math.erfc(abs(z) / math.sqrt(2.0)), row) for row in rows
                    if not math.isnan(z := float(row.get("calibration_z", math.nan)))), key=lambda t: t[0])
    rejected = []
    for j, (p, row) in enumerate(tests):
        level = alpha / (len(tests) - j)
        if p > level:
            break
        rejected.append({**row, "calibration_p": p, "calibration_threshold": NormalDist().inv_cdf(1 - level / 2)})
    return rejected


def format_contradictions(rejected: Sequence[dict], alpha: float, m: int) -> str:
    """One line per rejected cell, naming it, its z and the Holm threshold it exceeds."""
    lines = [f"THEORY CONTRADICTED: {len(rejected)} of {m} cell(s) measure an acceptance their verifier's law rules "
             f"out (acceptance calibration z, two-sided, Holm over the cells at false-failure rate {alpha:g}):"]
    for r in rejected:
        lines.append(f"  {r['rule']} K={r['K']} L={r['L']}: acceptance {r['acceptance']:.4f}, calibration z = "
                     f"{r['calibration_z']:+.2f}, |z| > {r['calibration_threshold']:.2f} "
                     f"(p = {r['calibration_p']:.2g})")
    return "\n".join(lines)


def judge_calibration(rows: Sequence[dict], alpha: float) -> CheckOutcome:
    """The theory-vs-measurement verdict of speed-up cells (``rule``, ``K``, ``L``,
    ``acceptance``, ``calibration_z``): defect when :func:`calibration_contradictions` rejects a
    cell (Holm over the cells at ``alpha``), its lines naming them; no verdict when no cell has a
    z (no events anywhere); else exact. ``data``:
    ``{"rejected": [...]}``."""
    from speccheck.validation.verdict import CheckOutcome

    rejected = calibration_contradictions(rows, alpha)
    untested = [r for r in rows if math.isnan(float(r.get("calibration_z", math.nan)))]
    if rows and len(untested) == len(rows):
        return CheckOutcome("no_verdict", "no cell has a calibration z (no verification events): no evidence",
                            {"rejected": []}, [f"no verdict: none of the {len(rows)} cell(s) verified anything"])
    if rejected:
        return CheckOutcome("defect", f"{len(rejected)} of {len(rows)} cell(s) contradict their verifier's law",
                            {"rejected": rejected}, [format_contradictions(rejected, alpha, len(rows))])
    return CheckOutcome("exact", "every cell's acceptance is consistent with its verifier's law", {"rejected": []})


def run_sweep(proto: Protocol, verifiers: Sequence[str], cells: Iterable[tuple[int, int]], n_traj: int,
              seed: int, *, store: StoreArg = None, name: Optional[str] = None, executor: Optional[Executor] = None,
              threads: int = 1, log: Optional[Log] = None, chunk: Optional[int] = None) -> list[dict]:
    """Run the sweep's missing cells (``proto``: a :class:`speccheck.sampler.experiments.Protocol`)
    into ``store`` under job ``name`` (default: target + protocol hash); returns one summary row per
    requested cell, sorted by (rule, K, L). Units run with one torch thread (``threads`` is kept for
    the CLI's option and must be >= 1). ``chunk``: trajectories per unit (a cell of more is split
    into chunks, merged exactly by :func:`merge_chunks`; another spec than the unchunked sweep)."""
    if threads < 1:
        raise InputError(f"--threads must be >= 1, got {threads}")
    if not verifiers:
        raise InputError("--verifiers needs at least one rule")
    from speccheck.verifiers.registry import check_spec

    for rule in verifiers:  # fail fast (exit 2) before any unit runs; the verifiers' code runs only in the units
        try:
            check_spec(rule)
        except ValueError as exc:
            raise InputError(f"--verifiers: cannot load {rule!r}: {exc}") from None
    spec, units = sweep_units(proto, verifiers, cells, n_traj, seed, chunk)
    job = name or f"{proto.target}-{proto.key()}" + (f"-chunk{spec['chunk']}" if "chunk" in spec else "")
    if "chunk" in spec:
        results = _run_chunked(units, proto, spec, job=job, store=store, executor=executor,
                               on_new=_log_cell(log) if log else None)
        units = [Unit("sweep-cell", spec, (str(rule), K, L), base_seed=int(seed))
                 for rule, K, L in {u.identity[:3]: None for u in units}]
    else:
        def judge(unit: Unit, raw: dict) -> dict:  # the cell's summary, computed here from its raw run
            rule, K, L = unit.identity
            return merge_chunks(proto, str(rule), int(K), int(L), [raw], unit.seed, n_traj)

        results = run_units(units, job=job, kind="sweep", spec=spec, store=store, executor=executor,
                            on_new=_log_cell(log) if log else None, judge=judge)
    return sorted((summary_row(results[u.key]) for u in units), key=lambda r: (r["rule"], r["K"], r["L"]))


def load_sweep(path: str, name: Optional[str] = None) -> tuple[list[dict], dict]:
    """Summary rows and spec of a sweep: job ``name`` of the store file ``path`` (default: its only
    sweep), or a legacy CSV sweep folder (``trajectories.csv``, ``cells.jsonl``, ``protocol.json``)."""
    if os.path.isdir(path):
        store = os.path.join(path, "sweep.sqlite")
        if not os.path.exists(store):
            return _load_legacy_sweep(path)
        path = store
    if not os.path.exists(path):
        raise FileFormatError(f"sweep {path} does not exist (a results store file or a legacy sweep folder)")
    with ResultsStore(path, create=False) as st:
        sweeps = [j for j in st.jobs() if j["kind"] == "sweep"]
        if name is None:
            if len(sweeps) != 1:
                raise InputError(f"results store {path} holds {len(sweeps)} sweeps "
                                 f"{[j['name'] for j in sweeps]}; name one")
            name = sweeps[0]["name"]
        job = st.job(name)
        if job["kind"] != "sweep":
            raise InputError(f"job {name!r} in {path} is a {job['kind']} job, not a sweep")
        rows = [summary_row(u.result) for u in st.units(name)]
    return sorted(rows, key=lambda r: (r["rule"], r["K"], r["L"])), job["spec"]


_LEGACY_INT = ("K", "L", "B", "traj", "nfe")
_LEGACY_FLOAT = ("speedup",)


def _legacy_rows(path: str) -> list[dict]:
    """Rows of a legacy trajectories.csv, strictly parsed: a short, glued or truncated row is an
    error naming the file and line (no silent '2.142857' -> '2')."""
    rows = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or "rule" not in reader.fieldnames:
            raise FileFormatError(f"{path}: not a sweep trajectories file (header {reader.fieldnames}); "
                                  "delete the folder and rerun the sweep into a store (--store)")
        width = len(reader.fieldnames)
        for row in reader:
            if None in row or any(v is None for v in row.values()) or len(row) != width:
                raise FileFormatError(f"{path} line {reader.line_num}: {width} fields expected (a partial or glued "
                                      "row); remove the line and rerun, or convert the folder with --convert")
            try:
                parsed = {**row, **{k: int(row[k]) for k in _LEGACY_INT}, **{k: float(row[k]) for k in _LEGACY_FLOAT}}
            except ValueError:
                raise FileFormatError(f"{path} line {reader.line_num}: a number is malformed") from None
            rows.append(parsed)
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        last = b"\n"
        if size:
            fh.seek(-1, os.SEEK_END)
            last = fh.read(1)
        if last != b"\n":
            raise FileFormatError(f"{path}: the last line is incomplete (an interrupted write); remove it and "
                                  "rerun, or convert the folder with --convert")
    return rows


def _legacy_cells(folder: str) -> tuple[dict, dict]:
    """A legacy CSV sweep folder's spec and ``{(rule, K, L): (stored-style result, legacy seed)}`` for
    its complete cells (all trajectories present and a theory record in cells.jsonl)."""
    traj_path = os.path.join(folder, "trajectories.csv")
    proto_path = os.path.join(folder, "protocol.json")
    if not os.path.exists(traj_path) or not os.path.exists(proto_path):
        raise FileFormatError(f"{folder} is not a sweep folder (needs trajectories.csv and protocol.json)")
    try:
        with open(proto_path) as fh:
            protocol = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FileFormatError(f"{proto_path}: unreadable JSON ({exc})") from None
    theory: dict = {}
    cells_path = os.path.join(folder, "cells.jsonl")
    if os.path.exists(cells_path):
        with open(cells_path) as fh:
            for number, line in enumerate(fh, 1):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    raise FileFormatError(f"{cells_path} line {number}: unreadable JSON (an interrupted "
                                          "write)") from None
                theory[(record["rule"], int(record["K"]), int(record["L"]))] = record
    by_cell: dict = {}
    for row in _legacy_rows(traj_path):
        key = (row["rule"], row["K"], row["L"])
        seen = by_cell.setdefault(key, {})
        if row["traj"] in seen and seen[row["traj"]]["speedup"] != row["speedup"]:
            raise FileFormatError(f"{traj_path}: cell {key} trajectory {row['traj']} appears twice with different "
                                  "values (a re-run half-written cell); delete the folder and rerun into a store")
        seen[row["traj"]] = row
    n_traj = int(protocol.get("trajectories", 0))
    columns = ("traj", "nfe", "root_calls", "det_calls", "rounds", "accepted", "verified", "speedup")
    cells = {}
    for key in sorted(by_cell):
        trajectories = by_cell[key]
        if (n_traj and len(trajectories) < n_traj) or key not in theory:
            continue  # incomplete, or its theory record was never written: not a result
        ordered = [trajectories[t] for t in sorted(trajectories)]
        result = {"summary": {**theory[key], "tree": ordered[0]["tree"], "B": ordered[0]["B"]},
                  "trajectories": {c: [float(o[c]) if c == "speedup" else int(o[c]) for o in ordered]
                                   for c in columns if c in ordered[0]},
                  "stochastic_steps": int(ordered[0].get("stochastic_steps", 0))}
        cells[key] = (result, int(ordered[0].get("seed", 0)))
    spec = {"protocol": {k: v for k, v in protocol.items() if k not in ("seed", "trajectories", "schedule",
                                                                          "mixture_seed")},
            "trajectories": n_traj, "seed": protocol.get("seed")}
    return spec, cells


def _load_legacy_sweep(folder: str) -> tuple[list[dict], dict]:
    spec, cells = _legacy_cells(folder)
    return [summary_row(result) for result, _ in cells.values()], spec


def write_summary_files(rows: Sequence[dict], out_dir: str) -> None:
    """summary.csv and summary.md (one line per cell) in ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    with open(os.path.join(out_dir, "summary.md"), "w") as fh:
        fh.write(format_sweep(rows) + "\n")


def export_trajectories(store: StoreArg, name: str, path: str) -> int:
    """Write one CSV row per trajectory of sweep ``name`` to ``path`` (atomically: a temporary file
    renamed into place); returns the number of rows."""
    st = _open_store(store)
    try:
        units = st.units(name)
    finally:
        if st is not store:
            st.close()
    tmp = f"{path}.tmp{os.getpid()}"
    count = 0
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=TRAJECTORY_FIELDS)
        writer.writeheader()
        for unit in sorted(units, key=lambda u: (u.result["summary"]["rule"], u.result["summary"]["K"],
                                                 u.result["summary"]["L"])):
            summary, columns = unit.result["summary"], unit.result["trajectories"]
            fixed = {k: summary[k] for k in ("rule", "K", "L", "tree", "B")}
            for i in range(len(columns["speedup"])):
                writer.writerow({**fixed, "seed": unit.seed, "stochastic_steps": unit.result.get("stochastic_steps"),
                                 **{c: columns[c][i] for c in TRAJECTORY_FIELDS if c in columns}})
                count += 1
    os.replace(tmp, path)
    return count


def format_sweep(rows: Sequence[dict]) -> str:
    """Markdown table of a sweep's summary rows."""
    lines = ["speed-up = stochastic steps / target calls (warm-up included); mean +- SE over trajectories; "
             "predicted = DP of speccheck.theory.expected_nfe with measured per-(step, depth) acceptance", "",
             "| rule | K | L | tree | B | n | speed-up | SE | predicted | no warm-up | acceptance | z_cal | z_nfe |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['rule']} | {r['K']} | {r['L']} | {r['tree']} | {r['B']} | {r['trajectories']} | "
                     f"{r['speedup']:.3f} | {r['speedup_se']:.3f} | {r['predicted_speedup']:.3f} | "
                     f"{r['speedup_no_warmup']:.3f} | {r['acceptance']:.3f} | {r['calibration_z']:+.2f} | "
                     f"{r['nfe_z']:+.2f} |")
    return "\n".join(lines)


def convert_legacy_sweep(folder: str, store: StoreArg, name: Optional[str] = None,
                         expect_spec: Optional[dict] = None) -> str:
    """Import a legacy CSV sweep folder's complete cells into ``store`` as sweep job ``name``
    (default: the folder's name), once; returns the job name. With ``expect_spec`` the folder
    must hold that sweep (protocol, trajectories, seed), else ``FileFormatError`` names the
    differences. Incomplete cells are left out (a later run computes them)."""
    spec, cells = _legacy_cells(folder)
    if expect_spec is not None:
        from speccheck.scale.store import _spec_diff

        diff = _spec_diff(spec, expect_spec)
        if diff:
            raise FileFormatError(f"{folder} holds a CSV sweep with another spec (folder, asked): {diff}; use "
                                  "another folder")
    job = name or Path(folder).name
    st = _open_store(store)
    try:
        digest = st.open_job(job, "sweep", spec)
        for (rule, K, L), (result, seed) in cells.items():
            st.put(job, f"{rule}/{K}/{L}", identity=[rule, K, L], seed=seed, spec_hash=digest, wall_s=0.0,
                   worker="legacy-csv", result=result)
    finally:
        if st is not store:
            st.close()
    return job


# ----------------------------------------------------------------------------- calibration
def calibration_units(suite: str, verifiers: Sequence[str], seeds: Iterable[int],
                      device: str = "cpu") -> tuple[dict, list[Unit]]:
    """Spec (suite name and file hash, device) and one unit per (rule, battery seed)."""
    spec = {"suite": suite, "suite_sha": suite_digest(suite), "device": device}
    units = [Unit("calibration-seed", spec, (str(rule), int(s)), device=device, fixed_seed=int(s))
             for rule in verifiers for s in seeds]
    return spec, units


def calibrate(suite: str, verifiers: Sequence[str], *, seeds: Iterable[int], device: str = "cpu",
              store: StoreArg = None, name: Optional[str] = None, executor: Optional[Executor] = None,
              run: bool = True, cells: bool = False) -> dict:
    """Run the suite on each correct rule under each seed and summarise (see
    :func:`summarise_calibration`). ``run=False`` summarises every run of these rules already in
    ``store`` (the split-runs use case) without running anything. ``cells``: each battery run is
    split into its cells (:func:`battery_cell_runs`; stored in job ``NAME.cells``, the runs'
    records in ``NAME`` as they complete), for big suites on many workers; same records. A rule
    that is not one of speccheck's own always runs in cells, so that its statistics are computed
    here from its raw outputs, never in the process that runs its code."""
    # the summary's statistics (scipy.stats), imported now: on Dask, while the workers start, rather
    # than after the last unit
    import speccheck.validation.stats  # noqa: F401
    from speccheck.validation.suites import load_suite

    if not verifiers:
        raise InputError("--verifier needs at least one rule")
    try:
        family_alpha = load_suite(suite).family_alpha
    except ValueError as exc:
        raise InputError(f"--suite: {exc}") from None
    from speccheck.verifiers.registry import BUILTIN

    spec, units = calibration_units(suite, verifiers, seeds, device)
    cells = cells or any(str(v) not in BUILTIN for v in verifiers)
    job = name or f"calibrate-{Path(suite).stem}" + ("" if device == "cpu" else f"-{device.replace(':', '')}")
    if run and cells:
        records = _calibrate_in_cells(units, suite, spec, job=job, device=device, store=store, executor=executor,
                                      family_alpha=family_alpha)
    elif run:
        results = run_units(units, job=job, kind="calibration", spec=spec, store=store, executor=executor)
        records = [results[u.key] for u in units]
    else:
        if store is None:
            raise InputError("--summarise-only needs --store (the store holding the runs)")
        if isinstance(store, (str, os.PathLike)) and not os.path.exists(store):
            raise FileFormatError(f"results store {store} does not exist (run `speccheck calibrate --store` first)")
        st = store if isinstance(store, ResultsStore) else ResultsStore(os.fspath(store), readonly=True)
        try:
            if not st.check_job(job, "calibration", spec):
                raise InputError(f"results store {st.path} holds no calibration {job!r}: no runs to summarise, no "
                                 "verdict from no evidence (run `speccheck calibrate --store` first, or check --name)")
            records = [u.result for u in st.units(job) if u.result["rule"] in set(map(str, verifiers))]
        finally:
            if st is not store:
                st.close()
        missing = [str(v) for v in verifiers if not any(r["rule"] == str(v) for r in records)]
        if missing:
            raise InputError(f"results store {st.path}: calibration {job!r} holds no runs of {missing}; no verdict "
                             "from no evidence (run them first, or drop them from --verifier)")
    return summarise_calibration(records, [str(v) for v in verifiers], family_alpha=family_alpha, suite=suite,
                                 device=device)


def _calibrate_in_cells(units: Sequence[Unit], suite: str, spec: dict, *, job: str, device: str, store: StoreArg,
                        executor: Optional[Executor], family_alpha: float) -> list[dict]:
    """The calibration runs that ``job`` lacks, as battery cells (job ``<job>.cells``); each run's
    record is stored in ``job`` as the calibration-seed unit would have stored it."""
    from speccheck.scale.units import calibration_record

    opened = _open_store(store)
    try:
        done: set = set()
        if opened is not None:
            digest = opened.open_job(job, "calibration", spec)
            done = reusable(opened, job, [u.key for u in units])
        todo = [u for u in units if u.key not in done]
        runs = [(str(u.identity[0]), int(u.identity[1])) for u in todo]
        reports = battery_cell_runs(runs, suite, {**spec, "family_alpha": float(family_alpha)}, job=f"{job}.cells",
                                    device=device, store=opened, executor=executor) if runs else {}
        records = {u.key: calibration_record(run[0], run[1], reports[run]) for u, run in zip(todo, runs)}
        if opened is not None:
            from speccheck.scale.deps import merged

            cell_deps = opened.manifests(f"{job}.cells")
            for unit in todo:  # a run's record depends on what its cells depended on
                prefix = f"{unit.identity[0]}/{int(unit.identity[1])}/"
                opened.put(job, unit.key, identity=unit.identity, seed=unit.seed, spec_hash=digest, wall_s=0.0,
                           worker="merged-cells", result=plain(records[unit.key]),
                           deps=merged(m for k, m in cell_deps.items() if k.startswith(prefix)))
            records = {row.unit_key: row.result for row in opened.units(job, [u.key for u in units])}
    finally:
        if opened is not store and opened is not None:
            opened.close()
    return [records[u.key] for u in units]


def summarise_calibration(records: Sequence[dict], rules: Sequence[str], *, family_alpha: float, suite: str,
                          device: str) -> dict:
    """Per rule: failures k of n runs, rate, 95% Clopper-Pearson interval [lo, hi], and the
    shares of raw statistical p-values below 0.01 and 0.05 (at most 0.01 and 0.05 for valid
    p-values). A rule is *consistent* when lo <= family_alpha: the runs do not show a failure
    rate significantly above the suite's stated family-wise rate."""
    from speccheck.validation.stats import clopper_pearson

    seeds = sorted({int(r["seed"]) for r in records})
    summary: dict = {"suite": suite, "family_alpha": family_alpha, "device": device,
                     "seeds": [seeds[0], seeds[-1]] if seeds else [], "distinct_seeds": len(seeds), "rules": {}}
    total_fail = total_runs = 0
    for rule in rules:
        runs = [r for r in records if r["rule"] == rule]
        failures, n = sum(not r["passed"] for r in runs), len(runs)
        low, high = clopper_pearson(failures, n) if n else (0.0, 1.0)
        n_stat = sum(r["n_stat"] for r in runs)
        summary["rules"][rule] = {
            "runs": n, "failures": failures, "rate": failures / n if n else math.nan, "cp95": [low, high],
            "frac_p_lt_0.01": sum(r["p_lt_001"] for r in runs) / n_stat if n_stat else math.nan,
            "frac_p_lt_0.05": sum(r["p_lt_005"] for r in runs) / n_stat if n_stat else math.nan,
            "n_stat_tests": n_stat, "failed_runs": [r for r in runs if not r["passed"]],
            "consistent": bool(n > 0 and low <= family_alpha)}
        total_fail += failures
        total_runs += n
    low, high = clopper_pearson(total_fail, total_runs) if total_runs else (0.0, 1.0)
    summary["pooled"] = {"runs": total_runs, "failures": total_fail, "cp95": [low, high]}
    summary["consistent"] = bool(summary["rules"]) and all(v["consistent"] for v in summary["rules"].values())
    summary["records"] = sorted(records, key=lambda r: (r["rule"], r["seed"]))
    return summary


def format_calibration(summary: dict) -> str:
    """The calibration table (one line per rule, the failed runs under it, the pooled line)."""
    seeds = summary["seeds"]
    lines = [f"suite={summary['suite']} family-wise rate {summary['family_alpha']:g}; seeds "
             f"{seeds[0] if seeds else '-'}..{seeds[-1] if seeds else '-'} ({summary['distinct_seeds']} distinct); "
             f"device={summary['device']}",
             f"{'rule':<10} {'runs':>5} {'fails':>5} {'rate':>8} {'95% CP interval':>22} {'P(p<.01)':>9} "
             f"{'P(p<.05)':>9}  verdict"]
    for rule, v in summary["rules"].items():
        low, high = v["cp95"]
        verdict = "consistent" if v["consistent"] else ("NO RUNS" if not v["runs"] else "TOO MANY FAILURES")
        lines.append(f"{rule:<10} {v['runs']:>5} {v['failures']:>5} {v['rate']:>8.4f} [{low:.2e}, {high:.2e}] "
                     f"{v['frac_p_lt_0.01']:>9.4f} {v['frac_p_lt_0.05']:>9.4f}  {verdict}")
        for run in v["failed_runs"]:
            lines.append(f"    seed {run['seed']}: {'; '.join(run['failed'][:3])}")
    pooled = summary["pooled"]
    lines.append(f"{'pooled':<10} {pooled['runs']:>5} {pooled['failures']:>5} "
                 f"[{pooled['cp95'][0]:.2e}, {pooled['cp95'][1]:.2e}]")
    return "\n".join(lines)


def finite_json(value: object) -> object:
    """``value`` with every non-finite float replaced by None (containers recursively)."""
    from speccheck.strict_json import finite_json as _finite

    return _finite(value)


def write_json(value: dict, path: str) -> None:
    """``value`` as indented, strict JSON at ``path`` (its folder created; NaN and infinities, which
    JSON has no spelling for, written as null)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(finite_json(value), fh, indent=2, allow_nan=False)
    os.replace(tmp, path)  # atomic: never a half-written JSON file


# ----------------------------------------------------------------------------- batteries and mutants
def _battery_spec(suite: str, device: str, seed: Optional[int], options: Optional[dict] = None) -> dict:
    """The spec of battery-like jobs; ``seed`` None means the suite's own fixed seed; ``options``
    (``layers``, ``Ks``, ``scale``) enter the spec only when given (older stores stay valid)."""
    from speccheck.validation.suites import load_suite

    try:
        seed = load_suite(suite).seed if seed is None else int(seed)
    except ValueError as exc:
        raise InputError(f"--suite: {exc}") from None
    spec = {"suite": suite, "suite_sha": suite_digest(suite), "device": device, "seed": seed}
    options = {k: v for k, v in (options or {}).items() if v is not None}
    if options:
        spec["options"] = _plain_options(options)
    return spec


def _plain_options(options: dict) -> dict:
    """``layers``/``Ks``/``scale``/``sizes`` as plain JSON (lists of str / int, a float, a mapping
    of suite section to factor), checked."""
    known = {"layers", "Ks", "scale", "sizes"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"battery options {unknown} are not supported here; allowed: {sorted(known)}")
    out: dict = {}
    if "layers" in options:
        layers = options["layers"]
        out["layers"] = [str(x) for x in ([layers] if isinstance(layers, str) else layers)]
    if "Ks" in options:
        Ks = options["Ks"]
        out["Ks"] = [int(k) for k in ([Ks] if isinstance(Ks, int) else Ks)]
    if "scale" in options:
        out["scale"] = float(options["scale"])
    if "sizes" in options:
        sizes = options["sizes"]
        if not isinstance(sizes, dict):
            raise InputError(f"battery option sizes must be a mapping of section to factor, got {sizes!r}")
        out["sizes"] = {str(k): float(v) for k, v in sorted(sizes.items())}
    return out


def _options_tag(spec: dict) -> str:
    """``-o<hash>`` of the spec's battery options, or nothing: runs with other options are other jobs."""
    from speccheck.scale.store import spec_hash

    return f"-o{spec_hash(spec['options'])[:8]}" if spec.get("options") else ""


def mutant_matrix(suite: str, *, names: Optional[Sequence[str]] = None, device: str = "cpu",
                  seed: Optional[int] = None, executor: Optional[Executor] = None,
                  store: StoreArg = None, options: Optional[dict] = None,
                  on_outcome: Optional[Callable[[Unit, dict], None]] = None) -> dict[str, dict]:
    """The suite on every mutant (or ``names``), one unit per mutant: ``{mutant: report dict}``
    (a killed mutant has ``passed`` False), the same reports as
    :func:`speccheck.validation.mutants.run_mutants`. ``options`` (``layers``, ``Ks``, ``scale``)
    go to each battery run; ``on_outcome(unit, outcome)`` sees each unit run now (its ``wall_s``).
    Mutants a suite cannot run (sampler mutants without the trajectory
    layer) are left out."""
    from speccheck.validation.mutants import mutant_factories

    known = mutant_factories()
    chosen = list(names) if names else list(known)
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise InputError(f"--mutant: unknown mutant(s) {unknown}; known: {sorted(known)}")
    spec = _battery_spec(suite, device, seed, options)
    units = [Unit("mutant", spec, (name,), device=device, fixed_seed=spec["seed"]) for name in chosen]
    job = f"mutants-{Path(suite).stem}" + ("" if seed is None else f"-seed{seed}") + _options_tag(spec)
    results = run_units(units, job=job, kind="mutants", spec=spec, store=store, executor=executor,
                        on_outcome=on_outcome)
    return {u.key: results[u.key] for u in units if not results[u.key].get("skipped")}


def battery_runs(verifiers: Sequence[str], suite: str, *, device: str = "cpu", seed: Optional[int] = None,
                 executor: Optional[Executor] = None, store: StoreArg = None) -> dict[str, dict]:
    """The suite on each verifier, one unit per verifier: ``{verifier: report dict}``."""
    spec = _battery_spec(suite, device, seed)
    spec["verifier_sha"] = {str(v): rule_digest(str(v)) for v in verifiers}
    units = [Unit("battery", spec, (str(v),), device=device, fixed_seed=spec["seed"]) for v in verifiers]
    job = f"battery-{Path(suite).stem}" + ("" if seed is None else f"-seed{seed}")
    results = run_units(units, job=job, kind="battery", spec=spec, store=store, executor=executor)
    return {u.key: results[u.key] for u in units}


def _job_token(text: str) -> str:
    """``text`` as a store-name token (letters, digits, ``._-``)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in str(text))[:60]


Run = tuple  # (verifier spec string, battery seed): one battery run


def battery_cell_runs(runs: Sequence[Run], suite: str, spec: dict, *, job: str, device: str = "cpu",
                      store: StoreArg = None, executor: Optional[Executor] = None, localise_failures: bool = True,
                      on_outcome: Optional[Callable[[Unit, dict], None]] = None) -> dict[Run, object]:
    """Battery runs ``(verifier, seed)`` split into units (their cells), merged into one
    :class:`~speccheck.validation.results.BatteryReport` per run: the same report as
    :func:`speccheck.validation.battery.run_battery` with one torch thread, whatever the executor.

    Three rounds of ``battery-cell`` units, identity ``(verifier, seed, *cell)``, each round over
    every run at once: (1) the plan (it loads the verifier, so it runs on a worker too), the
    contract ``L0`` and the trajectory layer ``L4``; (2) the grid cells ``("L1", label)``, the
    continuous layer per K ``("L5", K)`` and the wrapper per dimension ``("L3", d)``, all at the
    per-test level alpha / m of the WHOLE family (m from the plan plus L4's count, never a unit's
    share); (3) for a run with a test failed after Holm over its whole family, the localisation.
    Each cell's seed is derived from the run's seed and the cell's identity. The client only
    merges: it never loads a verifier. ``spec``: the job's (suite, its hash, device, options,
    family_alpha); units are stored in job ``job``."""
    import torch

    from speccheck.validation import battery
    from speccheck.validation.results import Localisation, TestResult
    from speccheck.validation.suites import check_cost, load_suite, sized_suite

    opts = spec.get("options", {})
    st = sized_suite(load_suite(suite), opts["sizes"]) if opts.get("sizes") else load_suite(suite)
    layers = battery.resolve_layers(opts.get("layers"))  # options checked here, before any unit runs
    Ks = battery._check_Ks(opts.get("Ks"))
    scale = battery._check_scale(opts.get("scale", 1.0))
    check_cost(st, scale)  # a suite beyond the bounds is refused before any unit runs
    alpha = float(spec["family_alpha"])

    def cell_unit(run: Run, cell: tuple, extra: Optional[dict] = None) -> Unit:
        kind = "battery-law" if cell == ("L7",) else "battery-cell"  # the law layer: see units.battery_law
        return Unit(kind, {**spec, **(extra or {})}, (str(run[0]), int(run[1]), *cell), device=device,
                    fixed_seed=int(run[1]))

    def judged(unit: Unit, result: dict) -> dict:
        """A cell's contract results and raw outputs -> its judged tests, computed in this process."""
        cell = tuple(unit.identity[2:])
        if cell in (("plan",), ("localise",)):
            return result
        try:
            contract = [TestResult.from_dict(r) for r in result["results"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise FileFormatError(f"battery cell {unit.key}: malformed contract results ({exc}); no verdict") from None
        if any(r.kind != "contract" for r in contract):
            raise FileFormatError(f"battery cell {unit.key}: the process that ran the verifier sent statistical "
                                  "results; statistics are computed only where the run is judged; no verdict")
        tests = battery.judge_cell(st, cell, contract, result.get("raw"), plan=unit.spec.get("plan"),
                                   base=int(unit.identity[1]), alpha_t=float(unit.spec.get("alpha_t", alpha)),
                                   scale=scale)
        return {"results": [plain(r.as_dict()) for r in tests]}

    def run_round(units: list[Unit]) -> dict[str, dict]:
        return run_units(units, job=job, kind="battery-cells", spec=spec, store=store, executor=executor,
                         on_outcome=on_outcome, judge=judged)

    def tests(got: dict, unit: Unit) -> list[TestResult]:
        return [TestResult.from_dict(r) for r in got[unit.key]["results"]]

    first = {run: [cell_unit(run, ("plan",))] + [cell_unit(run, c) for c in battery.first_cells(st, layers)]
             for run in runs}
    got = run_round([u for units in first.values() for u in units])
    plans, contracts, trajectories, levels, later = {}, {}, {}, {}, {}
    for run, units in first.items():
        plans[run] = got[units[0].key]["plan"]
        by_cell = {u.identity[2:]: u for u in units}
        contracts[run] = tests(got, by_cell[("L0",)]) if ("L0",) in by_cell else []
        keeps = all(r.passed for r in contracts[run])
        trajectories[run] = tests(got, by_cell[("L4",)]) if ("L4",) in by_cell and keeps else None
        battery.check_evidence(plans[run], st, contracts[run], trajectories[run] or [], Ks)
        levels[run] = battery.per_test_alpha(plans[run], trajectories[run] or [], alpha)
        later[run] = [cell_unit(run, c, {"plan": plans[run], "alpha_t": levels[run]})
                      for c in battery.battery_cells(plans[run])]
    got = run_round([u for units in later.values() for u in units])
    reports, where = {}, {}
    for run in runs:
        reports[run] = battery.assemble_report(plans[run], st, base=int(run[1]), alpha=alpha,
                                               device=str(torch.device(device)), scale=scale,
                                               contract=contracts[run], trajectory=trajectories[run],
                                               cells=[tests(got, u) for u in later[run]])
        failures = battery.failures_to_localise(reports[run])
        if failures and localise_failures:
            where[run] = cell_unit(run, ("localise",), {"plan": plans[run], "alpha_t": levels[run],
                                                        "failures": [r.as_dict() for r in failures]})
    if where:
        got = run_round(list(where.values()))
        for run, unit in where.items():
            reports[run].localisations = [Localisation.from_dict(x) for x in got[unit.key]["localisations"]]
            reports[run].notes += list(got[unit.key]["notes"])
    return reports


def battery_job(verifier: str, suite: str, *, device: str = "cpu", seed: Optional[int] = None,
                options: Optional[dict] = None, executor: Optional[Executor] = None, store: StoreArg = None,
                name: Optional[str] = None, localise_failures: bool = True) -> dict:
    """One battery run split into units (its cells; see :func:`battery_cell_runs`), merged into
    one report dict: the same report as :func:`speccheck.validation.battery.run_battery` run
    with one torch thread, whatever the executor and its number of workers. ``wall_s`` is the
    client's wall time, ``cpu_s`` the CPU time of every process that did work: this one's (judging,
    and the units when they run here) plus what the executor's processes report (an isolated
    child's whole life, a Dask worker's units; units found in the store cost none)."""
    import time

    from speccheck.validation.suites import load_suite

    start, cpu = time.perf_counter(), time.process_time()
    others = float(getattr(executor, "cpu_s", 0.0))
    spec = _battery_spec(suite, device, seed, options)
    spec.update(verifier=str(verifier), family_alpha=float(load_suite(suite).family_alpha),
                verifier_sha=rule_digest(str(verifier)))
    job = name or (f"battery-{Path(suite).stem}-{_job_token(verifier)}-seed{spec['seed']}{_options_tag(spec)}"
                   f"-v{spec['verifier_sha'][:8]}")  # a changed verifier is another job: nothing stale reused
    run = (str(verifier), int(spec["seed"]))
    report = battery_cell_runs([run], suite, spec, job=job, device=device, store=store, executor=executor,
                               localise_failures=localise_failures)[run]
    report.wall_s = time.perf_counter() - start
    report.cpu_s = time.process_time() - cpu + float(getattr(executor, "cpu_s", 0.0)) - others
    return report.to_dict()


def battery_reports(report_dicts: dict[str, dict]) -> dict:
    """``{name: BatteryReport}`` from the report dicts of :func:`mutant_matrix` / :func:`battery_runs`
    (for ``speccheck.validation.report.format_kill_matrix`` and the other report writers)."""
    from speccheck.validation.results import BatteryReport

    return {name: BatteryReport.from_dict(d) for name, d in report_dicts.items() if not d.get("skipped")}
