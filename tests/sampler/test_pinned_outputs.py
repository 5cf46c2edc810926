"""Pinned outputs of Algorithm 1: the sampler refactor must not change one bit of any stream.

``pinned_outputs.json`` was recorded with the sampler *before* the issue-16 refactor of
``sampler/core.py`` (and re-recorded with that old core when the verifiers' kernels changed);
every snapshot below is recomputed and compared: integer and boolean tensors (accepted flags,
indices, depths, counts) exactly by the SHA-256 of their bytes; floats and float tensors (by
their sum, sum of squares and first values) to a relative :data:`FLOAT_RTOL`. Bit-identity of
floats cannot hold across numpy/torch builds (libm's exp/log differ in the last bits: 1.5e-13
relative at most was measured between the builds these pins met); any change of a random
stream moves the discrete streams or the float fingerprints by far more than the tolerance.

Two kinds of pins:

- *sampler pins* (``frozen_*``) run the sampler with :class:`FrozenVerifier`, a verifier
  defined here (deterministic, NOT exact), so they change only if the sampler, the targets, the
  schedules or ``verify_states`` change: ``run_cells`` on gmm-paper (eager and lazy, summaries
  included), ``SpeculativeSampler.run`` for every freeze / prefetch / leaves / lazy switch, mixed
  widths, cond and depth caps, and the four sampler mutants (the ``_hook_*`` seams);
- *rule pins* (``rules_*``) use the built-in D-GRS and RMC kernels and the trajectory
  checks: they also move when a verifier's kernel, the theory's closed forms or the battery's
  trajectory layer changes its numbers on purpose.

Regenerate (only when a change of the random streams is intended and documented):
``python -m tests.sampler.test_pinned_outputs``.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

PIN_FILE = Path(__file__).with_name("pinned_outputs.json")
F64 = torch.float64


FLOAT_RTOL = 1e-9  # relative tolerance on pinned floats (cross-build differences measured <= 1.5e-13)


def _digest(value):
    """An integer/boolean tensor's SHA-256 (dtype, shape, bytes); a float tensor's fingerprint
    (dtype, shape, sum, sum of squares, first 6 values), compared to :data:`FLOAT_RTOL`."""
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    arr = np.ascontiguousarray(arr)
    head = f"{arr.dtype.str}{arr.shape}"
    if np.issubdtype(arr.dtype, np.floating):
        flat = arr.astype(np.float64).ravel()
        return {"tensor": head, "sum": repr(float(flat.sum())), "sumsq": repr(float((flat * flat).sum())),
                "head": [repr(float(v)) for v in flat[:6]]}
    return hashlib.sha256(head.encode() + arr.tobytes()).hexdigest()


def _close(now, want) -> bool:
    """``now`` equals ``want`` with float reprs compared to :data:`FLOAT_RTOL`."""
    if isinstance(want, dict):
        return isinstance(now, dict) and now.keys() == want.keys() and all(_close(now[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(now, list) and len(now) == len(want) and all(_close(a, b) for a, b in zip(now, want))
    if isinstance(want, str) and isinstance(now, str) and now != want:
        try:
            a, b = float(now), float(want)
        except ValueError:
            return False
        return math.isclose(a, b, rel_tol=FLOAT_RTOL, abs_tol=1e-300)
    return now == want


def _plain(value):
    """JSON-stable form: floats by repr (NaN/inf included), containers recursively."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return value


def _result_snapshot(res) -> dict:
    ev = res.events
    return {
        "x": _digest(res.x), "x_sum": repr(float(res.x.double().sum())),
        "nfe": res.nfe.tolist(), "root_calls": res.root_calls.tolist(), "det_calls": res.det_calls.tolist(),
        "rounds": res.rounds.tolist(), "n_accepted": res.n_accepted.tolist(),
        "n_verified": res.n_verified.tolist(), "commit_depth": _digest(res.commit_depth),
        "events": {name: _digest(getattr(ev, name)) for name in ("traj", "round", "step", "depth", "K",
                                                                   "delta", "accepted", "index")},
        "n_events": len(ev), "batch_calls": int(res.batch_calls), "lazy_eval_calls": int(res.lazy_eval_calls),
        "states": None if res.states is None else _digest(res.states),
    }


class FrozenVerifier:
    """A deterministic stand-in for a verifier (NOT an exact rule): child j is a candidate when
    U_j < min(1, exp(delta s_j - delta^2 / 2)), the first candidate is accepted, and a rejection
    returns delta + N(0, 1). Its ``acceptance`` is 1 - (1 - exp(-delta^2 / 2))^K (a made-up
    closed form, only so that the summaries have a theory column)."""

    name = "frozen-test-rule"

    def verify(self, delta: torch.Tensor, s: torch.Tensor, generator: torch.Generator):
        rows, width = s.shape
        u = torch.rand(rows, width, generator=generator, dtype=s.dtype, device=s.device)
        log_ratio = torch.clamp(delta[:, None] * s - 0.5 * delta[:, None] ** 2, max=0.0)
        candidate = u < torch.exp(log_ratio)
        accepted = candidate.any(1)
        first = candidate.to(torch.uint8).argmax(1)
        index = torch.where(accepted, first, torch.full_like(first, width))
        residual = delta + torch.randn(rows, generator=generator, dtype=s.dtype, device=s.device)
        chosen = s.gather(1, first[:, None]).squeeze(1)
        return torch.where(accepted, chosen, residual), accepted, index

    def acceptance(self, delta, K: int):
        return 1.0 - (1.0 - np.exp(-0.5 * np.asarray(delta, dtype=np.float64) ** 2)) ** K


FROZEN = FrozenVerifier()


# ---------------------------------------------------------------------------- snapshots
RULE_CELLS = [  # (rule, K, Ls, lazy, max_nodes: small values split eager runs into chunks)
    ("dgrs", 3, [2, 4], True, 400_000), ("dgrs", 3, [2, 4], False, 400_000), ("dgrs", 2, [2, 3], False, 40),
    ("rmc", 2, [3], True, 400_000), ("rmc", 2, [3], False, 400_000),
]  # (RASS is left out: its kernel's numerics are still being reworked in issue 16's verifier dedupe)
FROZEN_CELLS = [(FROZEN, 3, [2, 4], True, 400_000), (FROZEN, 3, [2, 4], False, 400_000),
                (FROZEN, 2, [1, 3], True, 400_000), (FROZEN, 2, [2, 3], False, 40)]


def _run_cells_snapshot(cells) -> dict:
    from speccheck.sampler.experiments import preset, run_cells

    out = {}
    for rule, K, Ls, lazy, max_nodes in cells:
        rows, summaries = run_cells(preset("gmm-paper", lazy=lazy), rule, K, Ls, 4, 7, max_nodes=max_nodes)
        key = f"{getattr(rule, 'name', rule)}-K{K}-L{Ls}-lazy{lazy}" + ("" if max_nodes == 400_000 else f"-{max_nodes}")
        out[key] = _plain({"rows": rows, "summaries": summaries})
    return out


def snapshot_rules_run_cells() -> dict:
    return _run_cells_snapshot(RULE_CELLS)


def snapshot_frozen_run_cells() -> dict:
    return _run_cells_snapshot(FROZEN_CELLS)


SAMPLER_RUNS = [  # (name, tree spec, verifier, protocol)
    ("velocity-nearest-leaves-lazy", ("uniform", 2, 3), "dgrs",
     dict(freeze="velocity", prefetch="nearest", leaves=True, lazy=True)),
    ("velocity-nearest-leaves-eager", ("uniform", 2, 3), "dgrs",
     dict(freeze="velocity", prefetch="nearest", leaves=True, lazy=False)),
    ("velocity-nearest-internal-lazy", ("uniform", 3, 2), "dgrs",
     dict(freeze="velocity", prefetch="nearest", leaves=False, lazy=True)),
    ("velocity-nearest-internal-eager", ("uniform", 3, 2), "dgrs",
     dict(freeze="velocity", prefetch="nearest", leaves=False, lazy=False)),
    ("drift-parent-leaves-lazy", ("uniform", 2, 3), "dgrs",
     dict(freeze="drift", prefetch="parent", leaves=True, lazy=True)),
    ("drift-parent-leaves-eager", ("uniform", 2, 3), "dgrs",
     dict(freeze="drift", prefetch="parent", leaves=True, lazy=False)),
    ("denoised-none-eager", ("uniform", 2, 2), "dgrs",
     dict(freeze="denoised", prefetch="none", leaves=False, lazy=False)),
    ("denoised-none-lazy", ("uniform", 2, 2), "dgrs",
     dict(freeze="denoised", prefetch="none", leaves=False, lazy=True)),
    ("widths-eager", ("widths", 3, 1, 2), "dgrs",
     dict(freeze="velocity", prefetch="nearest", leaves=False, lazy=False)),
    ("widths-lazy", ("widths", 3, 1, 2), "dgrs",
     dict(freeze="velocity", prefetch="nearest", leaves=True, lazy=True)),
    ("chain-rmc-lazy", ("chain", 4), "rmc",
     dict(freeze="velocity", prefetch="nearest", leaves=False, lazy=True)),
]


def _tree(spec):
    from speccheck.sampler.tree import chain, uniform_tree, widths_tree

    kind, *args = spec
    return {"uniform": lambda: uniform_tree(*args), "widths": lambda: widths_tree(list(args)),
            "chain": lambda: chain(*args)}[kind]()


def snapshot_sampler_runs(verifier=None) -> dict:
    from speccheck.sampler.core import SpeculativeSampler
    from speccheck.targets.schedules import flow_matching
    from speccheck.validation.trajectory import small_mixture

    out = {}
    target = small_mixture(4)
    sched = flow_matching(12, 0.4)
    for name, spec, rule, proto in SAMPLER_RUNS:
        sp = SpeculativeSampler(target, sched, _tree(spec), verifier or rule, **proto)
        g = torch.Generator().manual_seed(13)
        x0 = torch.randn(24, 4, generator=g, dtype=F64)
        out[name] = _result_snapshot(sp.run(x0, g, record_states=True))
    # per-trajectory depth caps and conditioning (conditioning is ignored by the mixture)
    for lazy in (False, True):
        sp = SpeculativeSampler(target, sched, _tree(("uniform", 2, 3)), verifier or "dgrs", lazy=lazy,
                                leaves=True)
        g = torch.Generator().manual_seed(21)
        x0 = torch.randn(12, 4, generator=g, dtype=F64)
        caps = torch.tensor([1, 2, 3] * 4)
        out[f"depth-cap-cond-lazy{lazy}"] = _result_snapshot(
            sp.run(x0, g, cond=torch.arange(12) % 3, depth_cap=caps))
    return out


def snapshot_mutants(verifier=None) -> dict:
    from speccheck.targets.schedules import flow_matching
    from speccheck.validation.sampler_mutants import SAMPLER_MUTANTS
    from speccheck.validation.trajectory import small_mixture

    out = {}
    target = small_mixture(4)
    sched = flow_matching(12, 0.4)
    for name, factory in sorted(SAMPLER_MUTANTS.items()):
        for lazy in (False, True):
            sp = factory(target, sched, _tree(("uniform", 2, 3)), verifier or "dgrs", freeze="velocity",
                         prefetch="nearest", leaves=False, lazy=lazy)
            g = torch.Generator().manual_seed(5)
            x0 = torch.randn(16, 4, generator=g, dtype=F64)
            out[f"{name}-lazy{lazy}"] = _result_snapshot(sp.run(x0, g, record_states=True))
    return out


def snapshot_trajectory_checks() -> dict:
    from speccheck.validation.trajectory import run_trajectory_checks

    out = {}
    for rule, lazy in (("dgrs", True), ("dgrs", False), ("rmc", True)):
        res = run_trajectory_checks(rule, n_traj=40, seed=3, alpha=1e-3, lazy=lazy)
        out[f"{rule}-lazy{lazy}"] = [_plain([r.name, r.statistic, r.p_value, r.level, r.passed]) for r in res]
    return out


SNAPSHOTS = {
    "frozen_run_cells": snapshot_frozen_run_cells,
    "frozen_sampler_runs": lambda: snapshot_sampler_runs(FROZEN),
    "frozen_mutants": lambda: snapshot_mutants(FROZEN),
    "rules_run_cells": snapshot_rules_run_cells,
    "rules_sampler_runs": snapshot_sampler_runs,
    "rules_mutants": snapshot_mutants,
    "rules_trajectory_checks": snapshot_trajectory_checks,
}


# ---------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def pinned() -> dict:
    return json.loads(PIN_FILE.read_text())


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_outputs_match_pins(pinned, name):
    now = _plain(json.loads(json.dumps(SNAPSHOTS[name]())))
    want = pinned[name]
    assert now.keys() == want.keys()
    for key in want:
        assert _close(now[key], want[key]), (
            f"{name}/{key} changed: the sampler's random streams moved (frozen_* pins), or a verifier kernel, "
            "the theory or the trajectory layer changed its numbers (rules_* pins); see the module docstring")


def test_pins_are_not_degenerate(pinned):
    """The pinned cells exercise rejections, multi-depth commits and both warm-up kinds."""
    for kind in ("frozen", "rules"):
        cells = pinned[f"{kind}_run_cells"]
        speedups = [float(s["speedup"]) for c in cells.values() for s in c["summaries"]]
        assert all(0.9 < s < 30.0 and math.isfinite(s) for s in speedups), kind
        runs = pinned[f"{kind}_sampler_runs"]
        assert any(min(r["n_accepted"]) < min(r["n_verified"]) for r in runs.values()), kind
        assert len({json.dumps(r["x"], sort_keys=True) for r in runs.values()}) == len(runs), kind


if __name__ == "__main__":
    PIN_FILE.write_text(json.dumps({name: _plain(fn()) for name, fn in SNAPSHOTS.items()}, indent=1,
                                   sort_keys=True) + "\n")
    print(f"wrote {PIN_FILE}")
