"""One way to regenerate every checked-in artefact: ``speccheck reproduce NAME`` (issue 16).

:data:`REGISTRY` maps an artefact's name to what it writes (paths relative to the output root,
the repository root by default), a rough wall time on one CPU core, and the function that
regenerates it, given as a ``"module:function"`` string resolved only when that artefact is
run or listed (importing this module imports nothing heavy). Every regenerator has the signature
``fn(root: Path) -> list[Path]`` and is a thin call into the library; the pieces it relies on
are listed in ``needs`` and checked by ``--list``.

    speccheck reproduce --list
    speccheck reproduce paper-claims            # rewrites theory/paper_claims.md
    speccheck reproduce mcrs-speedups --out /tmp/fresh

Randomised artefacts use the seeds recorded in their outputs; every random stream inside them is
seeded through :func:`speccheck.seeding.unit_seed` or an explicit seed argument.
"""

from __future__ import annotations

import csv
import importlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from speccheck.errors import InputError, LoadError

if TYPE_CHECKING:
    from speccheck.scale.executors import Executor


@dataclass(frozen=True)
class Artefact:
    """One checked-in artefact family: ``writes`` (paths under the output root), ``duration``
    (rough wall time on one CPU core), ``func`` (``"module:function"``, called with the output
    root), ``needs`` (library callables it relies on, ``"module:function"``)."""

    name: str
    summary: str
    writes: tuple[str, ...]
    duration: str
    func: str
    needs: tuple[str, ...] = ()


def source_checkout() -> Path | None:
    """The source checkout speccheck runs from (the folder holding ``speccheck/`` and ``research/``),
    or None for an installed wheel (which has no research code)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "research" / "__init__.py").is_file() else None


def resolve(spec: str) -> Callable:
    """The callable named by ``"module:function"``; LoadError naming it if it is not there.

    ``research.*`` modules (research and reproduction code, not in the wheel) are looked up in
    the source checkout (:func:`source_checkout`), so ``speccheck reproduce`` finds them from a
    checkout whatever the working directory; an installed wheel reports them missing."""
    module_name, _, attr = spec.partition(":")
    checkout = source_checkout() if module_name.split(".")[0] == "research" else None
    if checkout is not None and str(checkout) not in sys.path:
        sys.path.append(str(checkout))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        where = " (research code: run from a source checkout)" if module_name.split(".")[0] == "research" else ""
        raise LoadError(f"{spec}: module {exc.name!r} is not available in this installation{where}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise LoadError(f"{spec}: {module_name} has no function {attr!r} in this installation")
    return fn


def missing_needs(artefact: Artefact) -> list[str]:
    """The ``needs`` of ``artefact`` that cannot be resolved here (empty: it can run)."""
    missing = []
    for spec in (artefact.func, *artefact.needs):
        try:
            resolve(spec)
        except LoadError:
            missing.append(spec)
    return missing


# ---------------------------------------------------------------------------- theory
def golden(root: Path) -> list[Path]:
    """The mpmath golden acceptance table (theory/golden_acceptance.csv)."""
    return [Path(resolve("research.reference:write_golden")(root / "theory"))]


def paper_claims(root: Path) -> list[Path]:
    """The papers' theory claims checked against speccheck.theory (theory/paper_claims.md)."""
    path = root / "theory" / "paper_claims.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    resolve("research.claims:write_paper_claims")(path)
    return [path]


def mcrs_gap_table(root: Path) -> list[Path]:
    """Share of RASS's gap MCRS closes (theory/mcrs_gap_table.{csv,md})."""
    path = root / "theory" / "mcrs_gap_table.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    resolve("research.mcrs_tables:write_gap_table")(path)
    return [path, path.with_suffix(".csv")]


def mcrs_minmax_table(root: Path) -> list[Path]:
    """The richer (min-max) MCRS policy table (theory/mcrs_minmax_table.md)."""
    path = root / "theory" / "mcrs_minmax_table.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    resolve("research.mcrs_tables:write_minmax_table")(path)
    return [path]


MCRS_POLICY_KS = tuple(range(2, 17))
"""Draft counts whose checked MCRS LP policies ship (above 16, MCRS runs RASS's constant policy)."""


def mcrs_policies(root: Path) -> list[Path]:
    """The shipped MCRS LP policies (G = 64) at every delta-grid point, K = 2..16."""
    path = root / "speccheck" / "data" / "mcrs_policies_G64.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    resolve("speccheck.verifiers.mcrs:build_policy_data")(list(MCRS_POLICY_KS), path)
    return [path]


RASS_WEIGHT_KS = tuple(range(1, 65))
"""Draft counts whose RASS weight tables ship: every K of the full suite's continuous layer."""


def rass_weights(root: Path) -> list[Path]:
    """The shipped RASS optimal rank weights at every delta-grid point, K = 1..64."""
    path = root / "speccheck" / "data" / "rass_weights.npz"
    return [resolve("speccheck.verifiers.rass:build_weight_data")(list(RASS_WEIGHT_KS), path)]


RASS_SURVEY_KS = (17, 24, 32, 48, 64, 96, 110, 121, 128)
# 1e-9 .. 3e-7 and K = 110, 121: where omega >= 0 starts to bind at large K (the LP is ill-conditioned there)
RASS_SURVEY_DELTAS = (1e-12, 1e-9, 1e-8, 3e-8, 1e-7, 3e-7, 1e-6, 1e-3, 0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 10.0,
                      20.0, 40.0)


def rass_survey(root: Path) -> list[Path]:
    """Certified optimality gap of the RASS weights above K = 16 (theory/rass_dual_survey.md)."""
    import time

    from speccheck.theory import acceptance_dgrs
    from speccheck.theory.rass import dual as rass_dual

    gaps, times, below_dgrs = {}, {}, []
    for K in RASS_SURVEY_KS:
        for d in RASS_SURVEY_DELTAS:
            rass_dual._solution.cache_clear()
            t0 = time.perf_counter()
            sol = rass_dual.certified_rank_weights(d, K)
            times[K, d], gaps[K, d] = time.perf_counter() - t0, sol.gap
            if sol.upper_bound < float(acceptance_dgrs(d, K)):
                below_dgrs.append((K, d))
    above = [key for key, gap in gaps.items() if gap > 1e-12]
    summary = (f"{len(gaps) - len(above)} of {len(gaps)} cells certified to <= 1e-12 absolute; worst "
               f"{max(gaps.values()):.2e}; above 1e-12: "
               + (", ".join(f"K = {K} at delta = {d:g} ({gaps[K, d]:.1e})" for K, d in above) or "none")
               + f". Certified optimum below D-GRS: {below_dgrs or 'no cell'}.")
    lines = ["# Certified optimality gap of the RASS rank weights above K = 16", "",
             "Generated by `speccheck reproduce rass-survey`: `speccheck.theory.rass.dual.certified_rank_weights`",
             "(the full solve; its cache emptied before each cell). The gap bounds A* - A(omega) (absolute) and is",
             "deterministic; the times (seconds, in parentheses) are this machine's, with whatever ran beside it.",
             "", summary, "",
             "| K | " + " | ".join(f"{d:g}" for d in RASS_SURVEY_DELTAS) + " |",
             "|---|" + "---|" * len(RASS_SURVEY_DELTAS)]
    lines += [f"| {K} | " + " | ".join(f"{gaps[K, d]:.1e} ({times[K, d]:.1f})" for d in RASS_SURVEY_DELTAS) + " |"
              for K in RASS_SURVEY_KS]
    path = root / "theory" / "rass_dual_survey.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return [path]


# ---------------------------------------------------------------------------- figures
def figures(root: Path) -> list[Path]:
    """Every figure (PNG, SVG, the CSV behind it) and the manifest, into figures/."""
    out = root / "figures"
    out.mkdir(parents=True, exist_ok=True)
    resolve("speccheck.figures:render")(out_dir=str(out))
    return [out / "manifest.json"]


# ---------------------------------------------------------------------------- sampler sweeps
SWEEP_SEED = 0
SENSITIVITY_TRAJECTORIES = 100
MCRS_SPEEDUP_TRAJECTORIES = 200
MCRS_SPEEDUP_PRESETS = ("gmm-paper", "gmm-d512")
MCRS_SPEEDUP_RULES = ("rmc", "dgrs", "rass", "mcrs")
MCRS_SPEEDUP_CELLS = ((2, 4), (2, 6), (3, 4), (3, 6), (4, 4), (4, 6), (6, 6), (8, 4))


def protocol_sensitivity(root: Path) -> list[Path]:
    """Gaussian-mixture speed-ups under every protocol switch (validation/gmm_protocol_sensitivity.*).

    One resumable sweep per protocol of ``speccheck.scale.sweep.SENSITIVITY_PROTOCOLS`` under
    results/protocol-sensitivity/, then the table."""
    from speccheck.sampler.experiments import preset
    from speccheck.scale import sweep as sweeps

    sweep_root = root / "results" / "protocol-sensitivity"
    for name, (preset_name, overrides, _) in sweeps.SENSITIVITY_PROTOCOLS.items():
        proto = preset(preset_name, **overrides)
        for rule, cells in sweeps.SENSITIVITY_CELLS.items():
            sweeps.sweep(proto, [rule], [], [], SENSITIVITY_TRAJECTORIES, SWEEP_SEED, str(sweep_root / name),
                         cells=list(cells), log=None)
    out_csv = root / "validation" / "gmm_protocol_sensitivity.csv"
    out_md = out_csv.with_suffix(".md")
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    sweeps.sensitivity_table(str(sweep_root), str(out_csv), str(out_md))
    return [out_csv, out_md]


def mcrs_speedup_rows(sweep_root: Path) -> list[dict]:
    """One row per (preset, K, L): speed-up, SE, predicted speed-up and acceptance of each rule,
    and MCRS's gain over RASS and D-GRS in percent with its z = gain / sqrt(SE^2 + SE^2)
    (independent trajectories). Reads ``sweep_root/<preset>/summary.csv``."""
    rows = []
    for preset_name in MCRS_SPEEDUP_PRESETS:
        with open(sweep_root / preset_name / "summary.csv") as fh:
            stored = {(r["rule"], int(r["K"]), int(r["L"])): r for r in csv.DictReader(fh)}
        for K, L in MCRS_SPEEDUP_CELLS:
            row: dict = {"preset": preset_name, "K": K, "L": L}
            for rule in MCRS_SPEEDUP_RULES:
                cell = stored.get((rule, K, L))
                for suffix, column in (("", "speedup"), ("_se", "speedup_se"), ("_pred", "predicted_speedup"),
                                       ("_acc", "acceptance")):
                    row[f"{rule}{suffix}"] = float(cell[column]) if cell else math.nan
            for other in ("rass", "dgrs"):
                gain = row["mcrs"] - row[other]
                row[f"mcrs_vs_{other}_pct"] = 100.0 * gain / row[other]
                row[f"mcrs_vs_{other}_z"] = gain / math.hypot(row["mcrs_se"], row[f"{other}_se"])
            rows.append(row)
    return rows


def write_mcrs_speedups(rows: list[dict], out_csv: Path, out_md: Path, n_traj: int) -> None:
    """The long table (csv) and one markdown table per preset."""
    with open(out_csv, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with open(out_md, "w") as fh:
        fh.write("# MCRS vs RASS vs D-GRS vs RMC: measured speed-ups on the mixture presets (issue 7)\n\n")
        fh.write(f"Generated by `speccheck reproduce mcrs-speedups` ({n_traj} trajectories per cell; sweep "
                 "outputs in validation/mcrs_speedups/<preset>/). Speed-up = stochastic steps / target calls "
                 "(warm-up included), mean +- SE over trajectories; every rule on the same (K, L) tree, RMC on "
                 "the chain matched to it (gmm-paper: same drafted budget B; gmm-d512: same rows). `pred` = the "
                 "theory prediction (speccheck.theory.expected_nfe with the measured per-(step, depth) "
                 "acceptance); `acc` = mean acceptance per verification. z = (MCRS - other) / sqrt(SE^2 + SE^2), "
                 "independent trajectories.\n\n")
        for preset_name in MCRS_SPEEDUP_PRESETS:
            fh.write(f"## {preset_name}\n\n| K x L | RMC | D-GRS | RASS | MCRS | MCRS pred | acc RASS / MCRS | "
                     "MCRS vs RASS | MCRS vs D-GRS |\n|---|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                if r["preset"] != preset_name:
                    continue
                cells = " | ".join(f"{r[rule]:.3f} +- {r[rule + '_se']:.3f}" for rule in MCRS_SPEEDUP_RULES)
                fh.write(f"| {r['K']}x{r['L']} | {cells} | {r['mcrs_pred']:.3f} | {r['rass_acc']:.4f} / "
                         f"{r['mcrs_acc']:.4f} | {r['mcrs_vs_rass_pct']:+.2f}% (z {r['mcrs_vs_rass_z']:+.1f}) | "
                         f"{r['mcrs_vs_dgrs_pct']:+.2f}% (z {r['mcrs_vs_dgrs_z']:+.1f}) |\n")
            fh.write("\n")


def mcrs_speedups(root: Path) -> list[Path]:
    """MCRS vs RASS vs D-GRS vs RMC speed-ups at matched trees, both mixture presets.

    One resumable sweep per preset in validation/mcrs_speedups/<preset>/, then the tables."""
    from speccheck.sampler.experiments import preset
    from speccheck.scale.sweep import sweep

    sweep_root = root / "validation" / "mcrs_speedups"
    for preset_name in MCRS_SPEEDUP_PRESETS:
        sweep(preset(preset_name), list(MCRS_SPEEDUP_RULES), [], [], MCRS_SPEEDUP_TRAJECTORIES, SWEEP_SEED,
              str(sweep_root / preset_name), cells=list(MCRS_SPEEDUP_CELLS), log=None)
    out_csv, out_md = root / "validation" / "mcrs_speedups.csv", root / "validation" / "mcrs_speedups.md"
    write_mcrs_speedups(mcrs_speedup_rows(sweep_root), out_csv, out_md, MCRS_SPEEDUP_TRAJECTORIES)
    return [out_csv, out_md]


# ---------------------------------------------------------------------------- end to end
# (json name, config fields, verifiers, Ks, Ls, eps values): the runs behind validation/e2e/*.json
# (speed-up figures go to figures/e2e/ unless the fields say figures=None)
_EDM_EXACT = dict(model="digits-edm", samples=2000)
_FLOW_SD3 = dict(model="digits-flow", steps=50, shift=3.0)
E2E_RUNS: tuple[tuple[str, dict, tuple[str, ...], tuple[int, ...], tuple[int, ...], tuple[float, ...]], ...] = (
    ("digits-edm_exact_n2000", _EDM_EXACT, ("rmc", "dgrs", "rass"), (2,), (3,), (0.3,)),
    ("digits-edm_mcrs_exact_n2000", _EDM_EXACT, ("mcrs",), (2,), (3,), (0.3,)),
    *((f"digits-flow_sd3style_exact_n2000_{rule}", {**_FLOW_SD3, "samples": 2000}, (rule,), (4,), (2,), (0.8,))
      for rule in ("rmc", "dgrs", "rass")),
    ("digits-flow_cfg3_sd3style_n500", {**_FLOW_SD3, "samples": 500, "guidance": 3.0}, ("dgrs",), (4,), (2,),
     (0.8,)),
    ("digits-edm_mutant_n2000", {**_EDM_EXACT, "sampler_mutant": "wrong-noise-index"}, ("dgrs",), (2,), (3,),
     (0.3,)),
    ("digits-edm_mutant2_n2000", {**_EDM_EXACT, "sampler_mutant": "root-target-mean", "innovation": False,
                                  "figures": None},
     ("dgrs",), (2,), (3,), (0.3,)),
    ("digits-edm_grid_K2_eps0.3", dict(model="digits-edm", samples=300), ("rmc", "dgrs", "rass"), (2,), (3, 5),
     (0.3,)),
    ("digits-edm_grid_K34_eps0.3", dict(model="digits-edm", samples=300), ("rmc", "dgrs", "rass"), (3, 4), (4,),
     (0.3,)),
    *((f"digits-edm_grid_K2_eps{eps}", dict(model="digits-edm", samples=200, two_sample=False),
       ("rmc", "dgrs", "rass"), (2,), (3, 5), (eps,)) for eps in (0.1, 0.6)),
    *((f"digits-edm_grid_K34_eps{eps}", dict(model="digits-edm", samples=200, two_sample=False),
       ("rmc", "dgrs", "rass"), (3, 4), (4,), (eps,)) for eps in (0.1, 0.6)),
    *((f"digits-edm_freeze_{freeze}", dict(model="digits-edm", samples=200, two_sample=False, freeze=freeze,
                                           figures=None),
       ("dgrs",), (2,), (3,), (0.3,)) for freeze in ("velocity", "drift")),
    ("digits-flow_sd3style_grid", {**_FLOW_SD3, "samples": 200, "two_sample": False}, ("dgrs", "rass", "rmc"),
     (2, 3, 5, 6, 7), (2,), (0.8,)),
    ("digits-flow_grid_K2L3_eps0.3", dict(model="digits-flow", samples=200, two_sample=False),
     ("dgrs", "rass", "rmc"), (2,), (3,), (0.3,)),
)


def e2e_summaries(root: Path) -> list[Path]:
    """End-to-end speed-up and exactness on the digits models (validation/e2e/, figures/e2e/).

    One :func:`speccheck.validation.e2e.run_e2e_grid` per run."""
    from speccheck.validation import e2e

    out_dir, figure_dir = root / "validation" / "e2e", root / "figures" / "e2e"
    out_dir.mkdir(parents=True, exist_ok=True)
    figure_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fields, verifiers, Ks, Ls, epss in E2E_RUNS:
        base = e2e.E2EConfig(**{"figures": str(figure_dir), **fields})
        reports = e2e.run_e2e_grid(base, list(verifiers), list(Ks), list(Ls), list(epss))
        path = out_dir / f"{name}.json"
        e2e.write_json(reports, str(path))
        written.append(path)
    return written


# ---------------------------------------------------------------------------- battery
BUILTIN_RULES = ("rmc", "dgrs", "rass", "rass-icdf", "mcrs", "mcrs2")  # speccheck.verifiers.registry.BUILTIN
CALIBRATION_SEEDS = range(1, 201)


def battery_reports(root: Path, executor: Executor | None = None) -> list[Path]:
    """The gate suite on every built-in rule (validation/reports/gate-<rule>.{txt,json}), each run
    split into its cells on ``executor`` (``speccheck.scale.jobs.battery_job``; in-process if None)."""
    from speccheck.scale.jobs import battery_job
    from speccheck.validation.report import format_report, write_json
    from speccheck.validation.results import BatteryReport

    out = root / "validation" / "reports"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rule in BUILTIN_RULES:
        report = BatteryReport.from_dict(battery_job(rule, "gate", executor=executor))
        (out / f"gate-{rule}.txt").write_text(format_report(report, verbose=True) + "\n")
        write_json(report, str(out / f"gate-{rule}.json"))
        written += [out / f"gate-{rule}.txt", out / f"gate-{rule}.json"]
    return written


def kill_matrix(root: Path, executor: Executor | None = None) -> list[Path]:
    """Every mutant under the gate suite (validation/reports/kill_matrix.txt), one unit per mutant
    on ``executor`` (``speccheck.scale.jobs.mutant_matrix``; in-process if None)."""
    from speccheck.scale.jobs import battery_reports as reports_from_dicts
    from speccheck.scale.jobs import mutant_matrix
    from speccheck.validation.report import format_kill_matrix

    path = root / "validation" / "reports" / "kill_matrix.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    unit_wall: dict[str, float] = {}
    dicts = mutant_matrix("gate", executor=executor,
                          on_outcome=lambda unit, outcome: unit_wall.update({unit.key: outcome["wall_s"]}))
    for name, report in dicts.items():  # the unit's wall time (kept out of the stored result)
        report["wall_s"] = report["cpu_s"] = unit_wall.get(name, 0.0)
    header = ("# speccheck reproduce kill-matrix: every mutant under the gate suite, one unit per mutant "
              f"({type(executor).__name__ if executor is not None else 'in-process'}); times are each unit's wall "
              "time.\n# Regenerate: speccheck reproduce kill-matrix [--workers N] (or speccheck battery --mutants "
              "--suite gate).\n")
    path.write_text(header + format_kill_matrix(reports_from_dicts(dicts)) + "\n")
    return [path]


def calibration(root: Path, executor: Executor | None = None, seeds: range = CALIBRATION_SEEDS) -> list[Path]:
    """Gate-suite false-failure rate of every built-in rule over 200 battery seeds.

    Writes validation/reports/calibration_gate.{txt,json} via speccheck.scale.jobs.calibrate (one
    unit per battery run on ``executor``; in-process if None). For a run that can stop and resume,
    use ``speccheck calibrate --store`` and ``--summarise-only`` instead."""
    from speccheck.scale.jobs import calibrate, format_calibration, write_json

    out = root / "validation" / "reports"
    out.mkdir(parents=True, exist_ok=True)
    summary = calibrate("gate", list(BUILTIN_RULES), seeds=seeds, executor=executor)
    header = ("# speccheck reproduce calibration: the gate suite on every built-in rule, one unit per battery run "
              f"({type(executor).__name__ if executor is not None else 'in-process'}).\n")
    (out / "calibration_gate.txt").write_text(header + format_calibration(summary) + "\n")
    write_json(summary, str(out / "calibration_gate.json"))
    return [out / "calibration_gate.txt", out / "calibration_gate.json"]


# ---------------------------------------------------------------------------- registry
def _entry(name: str, func: Callable, writes: tuple[str, ...], duration: str, needs: tuple[str, ...] = ()
           ) -> tuple[str, Artefact]:
    summary = (func.__doc__ or "").strip().splitlines()[0]
    return name, Artefact(name=name, summary=summary, writes=writes, duration=duration,
                          func=f"{__name__}:{func.__name__}", needs=needs)


REGISTRY: dict[str, Artefact] = dict([
    _entry("golden", golden, ("theory/golden_acceptance.csv",), "~20 min",
           ("research.reference:write_golden",)),
    _entry("paper-claims", paper_claims, ("theory/paper_claims.md",), "~1 min",
           ("research.claims:write_paper_claims",)),
    _entry("mcrs-gap-table", mcrs_gap_table, ("theory/mcrs_gap_table.csv", "theory/mcrs_gap_table.md"), "~7 min",
           ("research.mcrs_tables:write_gap_table",)),
    _entry("mcrs-minmax-table", mcrs_minmax_table, ("theory/mcrs_minmax_table.md",), "~3 min",
           ("research.mcrs_tables:write_minmax_table",)),
    _entry("mcrs-policies", mcrs_policies, ("speccheck/data/mcrs_policies_G64.npz",), "~45 min",
           ("speccheck.verifiers.mcrs:build_policy_data",)),
    _entry("rass-survey", rass_survey, ("theory/rass_dual_survey.md",), "~4-8 min"),
    _entry("rass-weights", rass_weights, ("speccheck/data/rass_weights.npz",), "~40 min",
           ("speccheck.verifiers.rass:build_weight_data",)),
    _entry("figures", figures, ("figures/*.png", "figures/*.svg", "figures/*.csv", "figures/manifest.json"),
           "~20 min", ("speccheck.figures:render",)),
    _entry("protocol-sensitivity", protocol_sensitivity,
           ("validation/gmm_protocol_sensitivity.csv", "validation/gmm_protocol_sensitivity.md",
            "results/protocol-sensitivity/<protocol>/"), "~3 h",
           ("speccheck.scale.sweep:sweep", "speccheck.scale.sweep:sensitivity_table")),
    _entry("mcrs-speedups", mcrs_speedups,
           ("validation/mcrs_speedups.csv", "validation/mcrs_speedups.md", "validation/mcrs_speedups/<preset>/"),
           "~4 h", ("speccheck.scale.sweep:sweep",)),
    _entry("e2e", e2e_summaries, ("validation/e2e/<run>.json", "figures/e2e/*.png"), "~2 h",
           ("speccheck.validation.e2e:run_e2e_grid", "speccheck.validation.e2e:write_json")),
    _entry("battery-reports", battery_reports, ("validation/reports/gate-<rule>.txt",
                                                "validation/reports/gate-<rule>.json"), "~10 min",
           ("speccheck.scale.jobs:battery_job", "speccheck.validation.report:format_report",
            "speccheck.validation.report:write_json")),
    _entry("kill-matrix", kill_matrix, ("validation/reports/kill_matrix.txt",), "~1 h",
           ("speccheck.scale.jobs:mutant_matrix", "speccheck.validation.report:format_kill_matrix")),
    _entry("calibration", calibration, ("validation/reports/calibration_gate.txt",
                                        "validation/reports/calibration_gate.json"), "~6 h on 2 workers",
           ("speccheck.scale.jobs:calibrate", "speccheck.scale.jobs:format_calibration",
            "speccheck.scale.jobs:write_json")),
])


EXECUTOR_ARTEFACTS = ("battery-reports", "kill-matrix", "calibration")


def reproduce(name: str, root: str | Path = ".", executor: Executor | None = None) -> list[Path]:
    """Regenerate artefact ``name`` under ``root`` (the repository root by default); returns the
    paths written. ``executor`` runs the units of the battery artefacts (:data:`EXECUTOR_ARTEFACTS`;
    in-process if None). InputError for an unknown name, LoadError when a piece it needs is missing."""
    if name not in REGISTRY:
        raise InputError(f"unknown artefact {name!r}; `speccheck reproduce --list` names them: {sorted(REGISTRY)}")
    artefact = REGISTRY[name]
    missing = missing_needs(artefact)
    if missing:
        raise LoadError(f"reproduce {name}: needs {', '.join(missing)}, which this installation does not have")
    func = resolve(artefact.func)
    if name in EXECUTOR_ARTEFACTS:
        return list(func(Path(root), executor=executor))
    return list(func(Path(root)))


def format_list() -> str:
    """The registry as text: name, rough time, what it writes, and what is missing (if anything)."""
    width = max(len(name) for name in REGISTRY)
    lines = []
    for artefact in REGISTRY.values():
        missing = missing_needs(artefact)
        status = f"  [unavailable: needs {', '.join(missing)}]" if missing else ""
        lines.append(f"{artefact.name:<{width}}  {artefact.duration:>8}  {artefact.summary}{status}")
        lines.append(f"{'':<{width}}  {'':>8}  writes: {', '.join(artefact.writes)}")
    return "\n".join(lines)


def run_artefact(name: Optional[str], root: str | Path = ".", *, workers: int = 1, scheduler: Optional[str] = None,
                 progress: bool = False) -> list[Path]:
    """``speccheck reproduce NAME``: :func:`reproduce` with its options checked, the artefacts
    whose units may run on Dask (:data:`EXECUTOR_ARTEFACTS`) on ``workers`` local processes or
    the cluster at ``scheduler``; the paths written. Bad options raise InputError."""
    if not name:
        raise InputError("reproduce needs an artefact NAME or --list; names: " + ", ".join(REGISTRY))
    out, root = root, Path(root)
    if root.exists() and not root.is_dir():
        raise InputError(f"--out {str(out)!r} is a file; give a directory")
    if name not in EXECUTOR_ARTEFACTS:
        if workers != 1 or scheduler:
            raise InputError(f"--workers/--scheduler apply only to {', '.join(EXECUTOR_ARTEFACTS)}, not {name!r}")
        return reproduce(name, root)
    from speccheck.scale.executors import make_executor

    executor = make_executor(workers=None if scheduler else workers, scheduler=scheduler,
                             progress=progress).start()  # local workers start while the artefact plans
    try:
        return reproduce(name, root, executor=executor)
    finally:
        executor.close()
