"""Runs as raw outputs (speccheck.sampler.analysis.run_raw / run_from_raw / join_raw): the process
that runs a verifier sends its run and its declared acceptance per event; the judging process
rebuilds the run, checks it and summarises it to the same numbers, with no verifier."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from speccheck.sampler.analysis import (
    declared_acceptance,
    join_raw,
    run_from_raw,
    run_raw,
    summarize,
    summarize_declared,
)
from speccheck.sampler.core import SpeculativeSampler, resolve_verifier
from speccheck.sampler.experiments import cell_raw, preset, run_cells, summarize_cell
from speccheck.sampler.tree import uniform_tree
from speccheck.seeding import generator
from speccheck.targets.gmm import gmm_preset

PROTO = preset("gmm-paper", steps=8)


def _run(rule: str = "dgrs", n: int = 6, seed: int = 0):
    verifier = resolve_verifier(rule)
    schedule = PROTO.schedule()
    sampler = SpeculativeSampler(gmm_preset(PROTO.target), schedule, uniform_tree(2, 2), verifier)
    target = gmm_preset(PROTO.target)
    gen = generator(seed, "cpu")
    x0 = torch.randn(n, target.d, generator=gen, dtype=torch.float64)
    return sampler.run(x0, gen), verifier, schedule


def _same(a: dict, b: dict) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN fields compare equal


@pytest.mark.parametrize("rule", ["dgrs", "rass"])
def test_a_rebuilt_run_summarises_to_the_same_numbers(rule):
    result, verifier, schedule = _run(rule)
    rebuilt, declared = run_from_raw(run_raw(result, declared_acceptance(result, verifier)))
    assert _same(summarize_declared(rebuilt, declared, schedule.stochastic, 2),
                 summarize(result, verifier, schedule.stochastic, 2))
    mask = np.arange(result.nfe.numel()) % 2 == 0
    assert _same(summarize_declared(rebuilt, declared_acceptance(result, verifier, mask), schedule.stochastic, 2,
                                    mask), summarize(result, verifier, schedule.stochastic, 2, mask))


@pytest.mark.parametrize("rule, K, L", [("dgrs", 2, 2), ("rmc", 3, 2), ("mcrs", 3, 2)])
def test_a_cell_from_its_raw_run_equals_run_cells(rule, K, L):
    """cell_raw + summarize_cell (the two processes) == run_cells (one), also when eager chunking
    splits the run (max_nodes) and the chunks' raw runs are joined."""
    for max_nodes in (400_000, 40):
        rows, summaries = run_cells(PROTO, rule, K, [L], 7, 3, max_nodes=max_nodes)
        summary, columns = summarize_cell(PROTO, cell_raw(PROTO, rule, K, L, 7, 3, max_nodes=max_nodes), K, L, 7, 3)
        assert _same(summary, summaries[0]) and columns["speedup"] == [r["speedup"] for r in rows]


def test_join_raw_offsets_trajectories_and_sums_calls():
    (one, verifier, _), (two, _, _) = _run(n=3, seed=1), _run(n=4, seed=2)
    raw = [run_raw(r, declared_acceptance(r, verifier)) for r in (one, two)]
    joined, declared = run_from_raw(join_raw(raw))
    assert joined.nfe.numel() == 7 and joined.batch_calls == one.batch_calls + two.batch_calls
    assert np.array_equal(joined.events.traj, np.concatenate([one.events.traj, two.events.traj + 3]))
    assert declared.size == len(one.events) + len(two.events)
    with pytest.raises(ValueError, match="differ in n_stochastic"):
        join_raw([raw[0], {**raw[1], "n_stochastic": raw[1]["n_stochastic"] + 1}])


def _tamper(raw: dict, path: str, value) -> dict:
    out = {**raw, "counters": dict(raw["counters"]), "events": dict(raw["events"])}
    group, _, name = path.partition(".")
    if name:
        out[group][name] = value(np.array(out[group][name])) if callable(value) else value
    else:
        out[group] = value(np.array(out[group])) if callable(value) else value
    return out


def _set(index: int, value):
    def change(array):
        array = array.astype(type(value)) if isinstance(value, float) else array
        array[index] = value
        return array
    return change


@pytest.mark.parametrize("path, value, message", [
    ("counters.n_accepted", _set(0, 99), "n_accepted disagrees"),
    ("counters.n_verified", _set(0, 0), "n_verified disagrees"),
    ("counters.nfe", _set(0, -1), r"counters.nfe: expected \d+ values >= 0"),
    ("counters.rounds", lambda a: a[:-1], "counters.rounds: expected"),
    ("counters.nfe", lambda a: a.astype(float), "counters.nfe: expected integers"),
    ("events.traj", _set(0, 10_000), r"events.traj: values outside \[0, 5\]"),
    ("events.depth", _set(0, 0), "events.depth: values outside"),
    ("events.delta", _set(0, float("nan")), "events.delta: 1 non-finite"),
    ("events.delta", _set(0, -1.0), "events.delta: values outside"),
    ("events.K", lambda a: a[:-1], "events.K: expected a 1-d column"),
    ("events.accepted", lambda a: a.astype(np.int64) * 2, "events.accepted: values outside"),
    ("declared", _set(0, 1.5), r"declared: an acceptance probability outside \[0, 1\]"),
    ("declared", _set(0, float("inf")), "declared: 1 non-finite"),
    ("declared", lambda a: a.reshape(1, -1), "declared: expected a 1-d column"),
    ("declared", lambda a: a.astype(str), "declared: expected numbers"),
    ("prefetch", "sideways", "prefetch must be one of"),
    ("n_stochastic", -1, "n_stochastic and batch_calls must be integers >= 0"),
    ("batch_calls", 2.5, "n_stochastic and batch_calls must be integers >= 0"),
    ("events", None, "needs 'counters' and 'events'"),
])
def test_a_malformed_raw_run_is_refused_naming_the_problem(path, value, message):
    result, verifier, _ = _run()
    raw = run_raw(result, declared_acceptance(result, verifier))
    run_from_raw(raw)  # the untouched run is accepted
    with pytest.raises(ValueError, match=message):
        run_from_raw(_tamper(raw, path, value))


def test_the_lists_of_a_json_store_are_accepted():
    result, verifier, schedule = _run()
    raw = json.loads(json.dumps(run_raw(result, declared_acceptance(result, verifier)),
                                default=lambda a: a.tolist()))
    rebuilt, declared = run_from_raw(raw)
    assert _same(summarize_declared(rebuilt, declared, schedule.stochastic, 2),
                 summarize(result, verifier, schedule.stochastic, 2))
