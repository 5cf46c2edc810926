"""Battery wall and CPU time per built-in rule, as ratios against the budgets, with the wall time per layer.

    python benchmarks/bench_battery.py                       # gate and smoke, every built-in rule
    python benchmarks/bench_battery.py --suite smoke --rules dgrs rmc

Budgets (issue 12): gate <= 60 s and smoke <= 15 s per rule on a 2-core CPU with one torch
thread. Each (rule, suite) runs once after a warm-up: the same suite's grid and continuous
layers at a tenth of the draws, which fills the weight / policy caches (RASS weights, MCRS
policies) that a fresh install builds once per K; that one-off cost is printed separately.
Printed per run: wall seconds, process CPU seconds, and wall / budget and CPU / budget. On a
shared machine the wall clock is inflated by other processes: the CPU-time ratio is the one
load does not change. The baseline measured in the
same run is the D-GRS row (the fastest kernel): ratios of the other rules to it are printed
too, so a slow rule shows up whatever the load.

Per layer: the battery calls ``heartbeat(label)`` at the start of every unit of work, labels
starting with the layer id (``L0`` contract, ``L1``/``L2`` scalar grid, ``L3`` wrapper, ``L4``
trajectory, ``L5`` continuous, ``L6`` sequence); the wall time from one label to the next is charged to the
first one's layer (the report assembly after the last unit to the last layer). Printed per
layer: wall and CPU seconds, the layer's share of the run's CPU time, and its CPU time relative
to D-GRS's same layer (the load-independent comparison).

A budget (issue 39): ``--budget-demo SECONDS`` runs ``speccheck battery --budget SECONDS`` on
``tests.slow_rules:SlowDGRS`` (exact D-GRS at 10 ms of wall time per row, a third-party rule's
speed) and prints the wall time against the budget, the sizing note and the promise afforded.

Evidence per second (issue 39): the rule runs wrapped in :class:`Timed`, which charges the process
CPU time spent inside its ``verify`` (and ``verify_states``, ``acceptance``) to the rule; the
battery's own CPU is everything else. Printed per run: the rule's CPU, the battery's own CPU,
their ratio (target: battery <= rule on the dgrs gate), and the rows the law layer (L7) sent
through ``verify`` with the promise they bought.
"""

from __future__ import annotations

import argparse
import re
import time

import torch

BUDGET_S = {"gate": 60.0, "smoke": 15.0}
RULES = ("rmc", "dgrs", "rass", "rass-icdf", "mcrs", "mcrs2")  # every built-in rule
LAYER_OF = re.compile(r"^(L\d)")


class LayerClock:
    """heartbeat(label) callback that charges the wall and CPU time between labels to their layers
    (and tells :class:`Timed` which layer the rule's CPU time goes to)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._layer: str | None = None
        Timed.LAYER[0] = "other"
        self._since = time.perf_counter()
        self._cpu_since = time.process_time()

    def __call__(self, label: str) -> None:
        self._charge()
        match = LAYER_OF.match(label)
        self._layer = match.group(1) if match else "other"
        Timed.LAYER[0] = self._layer

    def _charge(self) -> None:
        now, cpu_now = time.perf_counter(), time.process_time()
        if self._layer is not None:
            self.seconds[self._layer] = self.seconds.get(self._layer, 0.0) + now - self._since
            self.cpu[self._layer] = self.cpu.get(self._layer, 0.0) + cpu_now - self._cpu_since
        self._since, self._cpu_since = now, cpu_now

    def stop(self) -> dict[str, tuple[float, float]]:
        """{layer: (wall s, CPU s)}."""
        self._charge()
        self._layer = None
        return {layer: (self.seconds[layer], self.cpu[layer]) for layer in sorted(self.seconds)}


class Timed:
    """A rule whose ``verify``, ``verify_states`` and ``acceptance`` charge their process CPU time
    to :attr:`RULE_CPU` and to the layer running (:attr:`BY_LAYER`; class-level: the battery
    deep-copies the rule for every cell)."""

    RULE_CPU = [0.0]
    LAYER: list[str] = ["other"]
    BY_LAYER: dict[str, float] = {}

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        if name == "inner":
            raise AttributeError(name)
        value = getattr(self.inner, name)
        if name in ("verify", "verify_states", "acceptance") and callable(value):
            def timed(*args: object, **kwargs: object) -> object:
                t0 = time.process_time()
                try:
                    return value(*args, **kwargs)
                finally:
                    spent = time.process_time() - t0
                    Timed.RULE_CPU[0] += spent
                    Timed.BY_LAYER[Timed.LAYER[0]] = Timed.BY_LAYER.get(Timed.LAYER[0], 0.0) + spent
            return timed
        return value


def time_run(rule: str, suite: str, **options: object
             ) -> tuple[float, float, bool, int, dict[str, tuple[float, float]], float, object]:
    """(wall s, CPU s, passed, tests, (wall s, CPU s) per layer, the rule's CPU s, the report) of one
    battery run (in this process, the rule wrapped in :class:`Timed`)."""
    from speccheck.validation.battery import load_verifier, run_battery

    clock = LayerClock()
    Timed.RULE_CPU[0] = 0.0
    Timed.BY_LAYER.clear()
    w0, c0 = time.perf_counter(), time.process_time()
    rep = run_battery(Timed(load_verifier(rule)), suite, heartbeat=clock, **options)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return wall, cpu, rep.passed, len(rep.results), clock.stop(), Timed.RULE_CPU[0], rep


def layer_line(layers: dict[str, tuple[float, float]], base: dict[str, tuple[float, float]] | None) -> str:
    """'L0 wall 0.4 s CPU 0.3 s (1% of the CPU, rule 0.1 s) ...' with, given D-GRS's layers, each
    layer's CPU time relative to D-GRS's same layer."""
    total_cpu = max(sum(c for _, c in layers.values()), 1e-9)
    parts = []
    for layer, (wall, cpu) in layers.items():
        ratio = f", {cpu / base[layer][1]:.2f} x dgrs" if base and base.get(layer, (0, 0))[1] > 0 else ""
        parts.append(f"{layer} wall {wall:5.1f} s CPU {cpu:5.1f} s ({cpu / total_cpu:4.0%}, rule "
                     f"{Timed.BY_LAYER.get(layer, 0.0):5.1f} s{ratio})")
    return "   per layer: " + ";\n              ".join(parts)


def budget_demo(budget: float, suite: str = "gate") -> int:
    """A budgeted run of a 10 ms-per-row rule: exit 0 when it passed within its budget with a promise."""
    from speccheck.api import battery

    t0 = time.perf_counter()
    outcome = battery("tests.slow_rules:SlowDGRS", suite, budget=budget)
    wall = time.perf_counter() - t0
    report = outcome.report
    print(f"slow-dgrs (10 ms per row) {suite} --budget {budget:g}: {outcome.verdict} (exit {outcome.exit_code}) in "
          f"{wall:.1f} s ({wall / budget:.2f} x the budget), CPU {report.cpu_s if report else float('nan'):.1f} s")
    for note in (report.notes if report else []):
        print(f"   note: {note}")
    if report is not None and report.promise is not None:
        print(f"   {report.promise.line()}")
    ok = outcome.verdict == "exact" and wall <= budget and report is not None and report.promise is not None
    print("within budget, with a promise" if ok else f"NOT within budget with a promise ({outcome.reason})")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", nargs="+", default=["smoke", "gate"], choices=sorted(BUDGET_S))
    ap.add_argument("--rules", nargs="+", default=list(RULES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-warmup", action="store_true", help="skip the warm-up run (measure a cold cache)")
    ap.add_argument("--budget-demo", type=float, metavar="SECONDS", default=None,
                    help="only the budgeted run of a 10 ms-per-row rule on --suite (the first one given)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.budget_demo is not None:
        return budget_demo(args.budget_demo, args.suite[0])
    rows = []
    base_layers: dict[str, dict[str, tuple[float, float]]] = {}
    rules = sorted(args.rules, key=lambda r: r != "dgrs")  # D-GRS first: the per-layer baseline
    for rule in rules:
        for suite in args.suite:
            if not args.no_warmup:
                w, c, *_ = time_run(rule, suite, layers=["scalar", "continuous"], scale=0.1)
                print(f"{rule:10s} {suite:6s} warm-up (caches): wall {w:6.1f} s  CPU {c:6.1f} s", flush=True)
            w, c, ok, n, layers, rule_cpu, rep = time_run(rule, suite)
            if rule == "dgrs":
                base_layers[suite] = layers
            rows.append((rule, suite, w, c, ok, n))
            budget = BUDGET_S[suite]
            print(f"{rule:10s} {suite:6s} wall {w:6.1f} s ({w / budget:4.2f} x budget {budget:.0f} s)  "
                  f"CPU {c:6.1f} s ({c / budget:4.2f} x budget)  {'PASS' if ok else 'FAIL'} ({n} tests)", flush=True)
            print(layer_line(layers, None if rule == "dgrs" else base_layers.get(suite)), flush=True)
            own = c - rule_cpu
            print(f"   CPU inside the rule (verify, verify_states, acceptance) {rule_cpu:6.1f} s; the battery's own "
                  f"{own:6.1f} s ({own / max(rule_cpu, 1e-9):4.2f} x the rule's)", flush=True)
            if rep.promise is not None:
                print(f"   {rep.promise.line()}", flush=True)
    base = {s: c for r, s, _, c, _, _ in rows if r == "dgrs"}
    if base:
        print("CPU time relative to dgrs in the same run:")
        for rule, suite, _, c, _, _ in rows:
            if suite in base and base[suite] > 0:
                print(f"  {rule:10s} {suite:6s} {c / base[suite]:5.2f} x dgrs")
    over = [(r, s) for r, s, _, c, _, _ in rows if c > BUDGET_S[s]]
    print("within budget (CPU time)" if not over else f"over budget (CPU time): {over}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
