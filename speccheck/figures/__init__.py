"""Every theory and speed-up figure of the papers (and ours), from one call: compute the data
(a pure function returning tables), then draw it; PNG + SVG + the CSV behind each figure.

    from speccheck.figures import render
    render(out_dir="figures", only=["acceptance"], quick=True)

Figure names (for ``only``): see :data:`FIGURES` (``fig1_acceptance`` may be given as
``acceptance``, ``fig1`` or ``1``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Callable, Optional, Sequence

from speccheck.errors import FileFormatError, InputError
from speccheck.figures.base import FigureConfig, FigureData, FigureSpec
from speccheck.figures.style import Table, save_figure, style_context


def _specs() -> list[FigureSpec]:
    from speccheck.figures import battery_fig as B
    from speccheck.figures import measured as M
    from speccheck.figures import theory_figs as Th

    return [
        FigureSpec(
            "fig1_acceptance", "acceptance",
            "D-GRS acceptance rises with K at every delta (K = 1 is RMC's 2 Phibar(delta/2)); RASS with optimal "
            "weights is above D-GRS",
            "D-GRS paper Fig. 6", Th.compute_acceptance, Th.draw_acceptance,
            "RASS added (dashed, same colours); closed forms, no simulation."),
        FigureSpec(
            "fig2_bounds", "bounds",
            "RMC <= D-GRS <= RASS (<= MCRS) <= i.i.d.-list bound <= dependent-drafts bound; RASS's gap to the "
            "i.i.d. bound stays below 3.7e-2",
            "RASS paper Fig. 3", Th.compute_bounds, Th.draw_bounds,
            "K = 2, 4, 8 side by side, a second row with each rule's gap to the i.i.d.-list bound (RMC's gap leaves "
            "the axes at K >= 4), and MCRS (issue 7) as triangles where it could be computed."),
        FigureSpec(
            "fig3_rank_weights", "rank-weights",
            "optimal rank weights go from uniform (delta -> 0) to the top rank (delta >~ 2 for K = 4, "
            ">~ 2.5 for K = 8)",
            "RASS paper section D.1 (stated in the text, no figure)", Th.compute_rank_weights, Th.draw_rank_weights,
            "ours; the dotted line marks where omega_K >= 0.99 on the plotted grid. Weights are ill-conditioned at "
            "small delta (SPEC section 1): bumps there are alternative optima with the same acceptance."),
        FigureSpec(
            "fig4_frontier", "frontier",
            "a chain saturates at 1/(1 - a) while trees keep turning budget B into speed-up; where the measured "
            "mixture cells sit against the constant-delta theory",
            "D-GRS paper Fig. 1 (efficiency frontier)", M.compute_frontier, M.draw_frontier,
            "the paper's frontier is measured; ours draws the theory (finite horizon N = 30, one warm-up call, "
            "constant per-level acceptance at three deltas, D-GRS and RASS trees, RMC chains) and overlays every "
            "measured (rule, K, L) cell at its B. delta = 1.287 gives the paper's RMC acceptance 0.52. The "
            "measured cells need not follow any one curve: on the mixture delta varies along a trajectory and "
            "with depth (the sampler's own DP prediction with measured acceptances is in the CSV, "
            "`predicted_speedup`)."),
        FigureSpec(
            "fig5_heatmaps", "heatmaps",
            "RMC is flat across (K, L); D-GRS and RASS improve as budget goes to width K",
            "D-GRS paper Fig. 3", M.compute_heatmaps, M.draw_heatmaps,
            "RASS panel added; one colour scale for all panels; RMC runs the chain matched on budget B "
            "(capped at the 30 steps)."),
        FigureSpec(
            "fig6_speedup_vs_K", "speedup-vs-K",
            "speed-up grows with K for L >= 3 and then saturates; L = 2 is the worst depth",
            "D-GRS paper Fig. 7", M.compute_speedup_vs_K, M.draw_speedup_vs_K,
            "RASS panel added; the dashed line is RMC's mean over its cells."),
        FigureSpec(
            "fig7_battery", "battery",
            "every mutant is killed and no exact reference is; the smallest KS distance / acceptance shift the "
            "gate and full suites detect with probability 0.99",
            "ours (no paper figure)", B.compute_battery, B.draw_battery,
            "kill matrix of the scalar/wrapper mutants (sampler mutants need the trajectory harness and are "
            "left out) on the suite named in the notes."),
    ]


FIGURES: dict[str, FigureSpec] = {}


def figures() -> dict[str, FigureSpec]:
    """stem -> FigureSpec, in order."""
    if not FIGURES:
        FIGURES.update({s.stem: s for s in _specs()})
    return FIGURES


def resolve(names: Optional[Sequence[str]]) -> list[FigureSpec]:
    """Specs for ``names`` (stem, short name, 'figN' or 'N'); all when None/empty."""
    specs = figures()
    if not names:
        return list(specs.values())
    out = []
    for n in names:
        key = str(n).strip().lower()
        hit = [s for s in specs.values()
               if key in (s.stem, s.name, s.stem.split("_")[0], s.stem.split("_")[0][3:])]
        if not hit:
            known = ", ".join(f"{s.stem.split('_')[0][3:]}/{s.name}" for s in specs.values())
            raise InputError(f"unknown figure {n!r} (--only); known: {known}")
        if hit[0] not in out:
            out.append(hit[0])
    return out


MEASURED = ("fig4_frontier", "fig5_heatmaps", "fig6_speedup_vs_K")
SWEEP_STORE_FILE = "sweep.sqlite"  # speccheck.scale.sweep.STORE_FILE (not imported: figures stay light)


def check_inputs(specs: Sequence[FigureSpec], sweep_dir: Optional[str] = None, sweep_run: bool = True,
                 battery_json: Optional[str] = None) -> None:
    """Refuse, before any work, inputs that would silently drop points from a figure: a
    ``--sweep`` store file that is not SQLite; with ``--no-sweep-run`` a ``--sweep`` that does
    not exist or is a folder without a sweep (``sweep.sqlite`` or an earlier ``trajectories.csv``);
    a ``--battery-json`` that exists but is not a non-empty set of reports."""
    stems = {s.stem for s in specs}
    if sweep_dir is not None and stems & set(MEASURED):
        store = os.path.join(sweep_dir, SWEEP_STORE_FILE) if os.path.isdir(sweep_dir) else sweep_dir
        if os.path.isfile(store):
            try:
                with open(store, "rb") as f:
                    header = f.read(16)
            except OSError as exc:
                raise FileFormatError(f"--sweep {sweep_dir!r}: cannot read {store!r} ({exc.strerror})") from None
            if header and header != b"SQLite format 3\x00":
                raise FileFormatError(f"--sweep {sweep_dir!r}: {store!r} is not a results store (SQLite)")
        if not sweep_run:
            if not os.path.exists(sweep_dir):
                raise InputError(f"--sweep {sweep_dir!r} does not exist (with --no-sweep-run it must hold a sweep "
                                 "written by a previous run)")
            legacy = os.path.isfile(os.path.join(sweep_dir, "trajectories.csv"))
            if os.path.isdir(sweep_dir) and not (os.path.isfile(store) or legacy):
                raise FileFormatError(f"--sweep {sweep_dir!r} holds no sweep ({SWEEP_STORE_FILE} or trajectories.csv)")
    if battery_json is not None and "fig7_battery" in stems:
        if os.path.isdir(battery_json):
            raise InputError(f"--battery-json {battery_json!r} is a folder; give a JSON file path")
        if os.path.exists(battery_json):
            from speccheck.figures.battery_fig import load_reports

            load_reports(battery_json)  # FileFormatError naming the file when empty or malformed


def compute(name: str, cfg: Optional[FigureConfig] = None) -> FigureData:
    """The data behind one figure (no drawing)."""
    spec = resolve([name])[0]
    return spec.compute(cfg or FigureConfig())


def write_tables(data: FigureData, out_dir: str, stem: str) -> list[str]:
    paths = []
    for key, tab in data.tables.items():
        p = os.path.join(out_dir, f"{stem}.csv" if key == "main" else f"{stem}-{key}.csv")
        paths.append(tab.to_csv(p))
    return paths


def render(out_dir: str = "figures", only: Optional[Sequence[str]] = None, quick: bool = False,
           sweep_dir: Optional[str] = None, sweep_run: bool = True, seed: int = 0, battery_suite: Optional[str] = None,
           battery_json: Optional[str] = None, log: Callable[[str], None] = print) -> dict:
    """Compute, draw and write the selected figures into ``out_dir`` (PNG, SVG, CSVs) and a
    ``manifest.json`` describing the run. Returns the manifest. A figure whose computation
    fails is reported in the manifest (``error``) and the others still render; the caller
    decides whether that is fatal."""
    specs = resolve(only)
    os.makedirs(out_dir, exist_ok=True)
    cfg = FigureConfig(quick=quick, sweep_dir=sweep_dir, sweep_run=sweep_run, seed=seed, battery_suite=battery_suite,
                       battery_json=battery_json, log=log)
    man_path = os.path.join(out_dir, "manifest.json")
    done: dict = {}
    for spec in specs:
        t0 = time.perf_counter()
        entry = {"name": spec.name, "claim": spec.claim, "paper": spec.paper}
        try:
            with style_context():
                data = spec.compute(cfg)
                t1 = time.perf_counter()
                fig = spec.draw(data)
                files = save_figure(fig, out_dir, spec.stem)
            files += write_tables(data, out_dir, spec.stem)
            entry.update(files=[os.path.basename(p) for p in files], notes=data.notes, meta=data.meta,
                         compute_s=round(t1 - t0, 2), draw_s=round(time.perf_counter() - t1, 2))
            log(f"[figures] {spec.stem}: {time.perf_counter() - t0:.1f} s -> {', '.join(entry['files'])}")
            for n in data.notes:
                log(f"    {n}")
        except Exception as exc:  # noqa: BLE001 - reported, the other figures still render
            entry.update(error=f"{type(exc).__name__}: {exc}")
            log(f"[figures] {spec.stem}: FAILED {entry['error']}")
        done[spec.stem] = entry
    for d in cfg.cache.get("_tmp_dirs", []):
        shutil.rmtree(d, ignore_errors=True)
    # merge with the entries on disk at write time (figures not re-rendered now keep theirs)
    manifest = {"quick": quick, "figures": {}}
    if os.path.exists(man_path):
        try:
            with open(man_path) as f:
                old = json.load(f)
            if old.get("quick") == quick:
                manifest["figures"].update(old.get("figures", {}))
        except (OSError, ValueError):
            pass
    manifest["figures"].update(done)
    manifest["figures"] = {k: manifest["figures"][k] for k in figures() if k in manifest["figures"]}
    from speccheck.strict_json import dumps

    with open(man_path, "w") as f:
        f.write(dumps(manifest, indent=2, default=_json_default))
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(gallery_markdown(json.loads(json.dumps(manifest, default=_json_default))))
    return manifest


def gallery_markdown(manifest: dict, command: str = "speccheck figures") -> str:
    """The figures/README.md gallery: per figure the image, the claim it checks, the paper
    figure it reproduces and where ours differs, the notes of the run, and the command."""
    specs = figures()
    lines = [
        "# Figures",
        "",
        "Generated by `speccheck figures` from `speccheck.figures` (one function per figure computes the "
        "data, another draws it); each figure comes as PNG + SVG + the CSV(s) of the data behind it, and "
        "`manifest.json` lists the files, notes and timings of the last run. Colours: Okabe-Ito (rules) "
        "and cividis/viridis (ordered quantities), all colour-blind safe. Other folders under figures/ "
        "(e.g. e2e/) are written by other commands.",
        "",
        "- `speccheck figures --quick --out DIR`: every figure at CI sizes (coarse grids, a 3-trajectory "
        "sweep, a tiny battery suite) in well under a minute of CPU.",
        "- Figures 1-3 are closed forms (about a minute of CPU, plus up to 4 CPU-minutes for the MCRS "
        "points of figure 2).",
        "- Figures 4-6 run the sampler sweep of the D-GRS paper's section 5.1 (RMC, D-GRS, RASS x K 1..7 x "
        "L 2..7 x 100 trajectories; about 10 CPU-minutes with the lazy sampler) unless `--sweep DIR` points "
        "to a sweep folder (`speccheck sweep ... --out results --name NAME`), which is resumed; "
        "`--no-sweep-run` only reads it.",
        "- Figure 7 runs the battery on every mutant and reference (`smoke` suite by default, "
        "`--battery-suite gate` for the CI gate); `--battery-json PATH` reads saved reports "
        "(`speccheck battery --mutants --json PATH`) or saves them there.",
        "",
        "The committed figures come from `speccheck sweep --verifiers rmc dgrs rass --K 1..7 --L 2..7 "
        "--trajectories 100 --seed 0 --out results --name gmm-paper-full` (per-cell seeds depend on "
        "(seed, rule, K) only, so the sweep may be run in pieces and merged), then "
        "`speccheck figures --sweep results/gmm-paper-full --battery-json results/battery-smoke.json`.",
        "",
    ]
    if manifest.get("quick"):
        lines += ["**This is a `--quick` run (CI sizes): numbers are not the paper-sized ones.**", ""]
    for stem, spec in specs.items():
        e = manifest.get("figures", {}).get(stem)
        num = stem.split("_")[0][3:]
        lines += [f"## {num}. {spec.name} (`{stem}`)", ""]
        if e and "error" not in e:
            lines += [f"![{spec.name}]({stem}.png)", ""]
        lines += [f"- **Claim checked:** {spec.claim}.",
                  f"- **Reproduces:** {spec.paper}. **Differs:** {spec.differs}"]
        if e and "error" in e:
            lines.append(f"- **Last run failed:** {e['error']}")
        elif e:
            lines.append("- **Data:** " + ", ".join(f"[`{f}`]({f})" for f in e.get("files", []) if f.endswith(".csv")))
            for n in e.get("notes", []):
                lines.append(f"- {n}")
        else:
            lines.append("- not rendered in the last run")
        lines += [f"- **Regenerate:** `{command} --only {num}`", ""]
    return "\n".join(lines)


def _json_default(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


__all__ = ["FIGURES", "FigureConfig", "FigureData", "FigureSpec", "Table", "compute", "figures",
           "gallery_markdown", "render", "resolve", "write_tables"]
