"""Layer 6 of the battery: one verifier instance driven through many calls, as a sampler drives it.

The other layers call ``verify`` with large batches of one K. A sampler calls one instance
per tree level: small batches (B = 1 .. a few hundred), K changing from call to call, deltas
that are constant, nearly constant or widely mixed within a batch. Defects that live only
there (a table cached at the first call's K, a branch for small batches, a vectorisation that
reads a block's first delta, state that goes wrong after many calls, the global RNG drawn on
a rare branch, rows of one call sharing uniforms) pass the other layers.

The law of the calls (:class:`speccheck.validation.suites.SequenceSpec`), call i of ``calls``:
K_i from the layer's K (K = 1 with probability ``k1_share``, else uniform), B_i log-uniform on
1 .. ``max_batch``, and the deltas of one of three patterns (each a third of the calls):
*constant* (one anchor delta), *near* (a centre log-uniform on [1, ``delta_hi``] times
1 + e (2U - 1) per row, e log-uniform on [0.005, 0.024] per call: every delta of the call
within 5% of the others, where the slope test has power; sorted or not) or *mixed* (log-uniform on
[``delta_lo``, ``delta_hi``] per row, sorted or not); s[b, :] i.i.d. N(0, 1). The first call
has the smallest K, the second the largest. Each call's
inputs and generator come from seeds of its own, so the first ``replay`` calls can be run
again, in the same order, on a fresh instance after the global RNG was moved.

Under exactness, with z = s_out - delta (i.i.d. N(0, 1) given the deltas, whatever the calls):

- PIT u = Phi(z) is U(0, 1): KS on all rows, on rows of small calls (B <= 16), on the near and
  on the mixed patterns;
- the mean of z is 0 (n^(1/2) mean z ~ N(0, 1), exact); the score of a shift proportional to
  delta among rows with delta <= ``small_delta``, sum(z delta) / sum(delta^2)^(1/2) ~ N(0, 1)
  (exact: power that scales with delta, where every shortcut's effect is O(delta)); the score
  of z on delta's spread inside each call, sum(z c) / sum(c^2)^(1/2) with c = delta - the
  call's mean delta ~ N(0, 1), for near and for mixed calls (exact: a batch verified with
  another row's delta shows as a slope even where the PIT's KS sees nothing);
- rows of one call are independent: adjacent products z_b z_(b+1) and products with a random
  partner in the same call have mean 0 and variance 1 (sum / n^(1/2) ~ N(0, 1) by the CLT for
  a 1-dependent sequence);
- the acceptance count on constant calls is Poisson-binomial with the declared acceptance
  (two-sided), pooled, and for ``small_calls`` extra K = 1 calls at each of the
  ``small_anchors`` on its own: there the count of rejections, O(delta) per row, shows a rule
  that treats delta below a threshold as 0;
- replayed calls give the same outputs (accepted flags exactly, s_out to ``REPLAY_RTOL``; a
  contract check, false-failure rate 0).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from typing import Any

import numpy as np
import torch
from scipy import special

from speccheck.errors import DeviceError
from speccheck.seeding import generator as make_generator
from speccheck.seeding import unit_seed
from speccheck.validation.contract import call_verify, check_batch, contract_result, supports
from speccheck.validation.results import TestResult
from speccheck.validation.stats import bernoulli_sum_test, ks_dkw_test
from speccheck.validation.suites import SequenceSpec

LAYER = "L6"
CELL = "one instance, mixed calls"
SMALL_CALL = 16  # rows: a call at most this large is a "small call"
#: replayed outputs must match to this relative tolerance (accepted flags exactly): a third-party
#: cache that is warm on the replay may round differently in the last bits (rass-icdf's log-B
#: tables did until a row built alone took the same path as rows built together; the built-in
#: rules now replay bit-identically); a draw from the global RNG or state that changes the law
#: differs by O(1)
REPLAY_RTOL = 1e-9
_NEAR = (0.005, 0.024)  # relative half-spread of near-constant calls: all deltas within 5% of each other


def planned_tests(spec: SequenceSpec, has_acceptance: bool) -> int:
    """Statistical tests the layer plans: 4 KS, 4 mean/score tests, 2 pair tests, and with a
    declared acceptance one pooled test plus one per small anchor."""
    return 10 + ((1 + len(spec.small_anchors)) if has_acceptance else 0)


def _normal_test(total: float, n_terms: float, alpha: float, power: float, test: str, n: int,
                 note: str) -> TestResult:
    """Two-sided test that ``total / n_terms^(1/2)`` is N(0, 1); statistic and MDD per term."""
    scale = math.sqrt(max(n_terms, 1e-300))
    t = total / scale
    p = float(special.erfc(abs(t) / math.sqrt(2.0)))
    z_alpha = float(special.ndtri(1.0 - alpha / 2.0))
    mdd = (z_alpha + float(special.ndtri(power))) / scale
    r = TestResult(CELL, test, total / max(n_terms, 1e-300), z_alpha / scale, p, mdd, n, passed=abs(t) < z_alpha,
                   note=note, layer=LAYER)
    if n_terms <= 0:
        r.kind, r.passed, r.note = "n/a", True, "n/a: no rows of this kind were drawn"
    return r


def _identity(v: np.ndarray) -> np.ndarray:
    return v


def _call_plan(spec: SequenceSpec, Ks: list[int], rng: np.random.Generator) -> list[tuple]:
    """(K, B, pattern, anchor, sorted) of every call, drawn from numpy's generator ``rng``."""
    calls = []
    others = [K for K in Ks if K != 1] or Ks
    for _ in range(spec.calls):
        K = 1 if (1 in Ks and rng.random() < spec.k1_share) else int(rng.choice(others))
        B = int(min(spec.max_batch, math.floor(math.exp(rng.uniform(0.0, math.log(spec.max_batch + 1))))))
        pattern = str(rng.choice(["constant", "near", "mixed"]))
        calls.append((K, max(B, 1), pattern, float(rng.choice(spec.anchors)), bool(rng.random() < 0.5)))
    if 1 in Ks:  # K = 1 constant calls at the small anchors, interleaved: rejections there are O(delta)
        for _ in range(spec.small_calls):
            B = int(min(spec.max_batch, math.floor(math.exp(rng.uniform(0.0, math.log(spec.max_batch + 1))))))
            at = int(rng.integers(0, len(calls) + 1))
            calls.insert(at, (1, max(B, 1), "small", float(rng.choice(spec.small_anchors)), False))
    # the instance's first call has the smallest K and its second the largest: state kept from the
    # first call (a table for its K) then meets every larger K
    first = (min(Ks), calls[0][1], "constant", calls[0][3], False)
    return [first, (max(Ks), *calls[1][1:])] + calls[2:]


def _inputs(call: tuple, spec: SequenceSpec, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    K, B, pattern, anchor, is_sorted = call
    g = make_generator(seed, device)
    if pattern in ("constant", "small"):
        delta = torch.full((B,), anchor, dtype=torch.float64, device=device)
    elif pattern == "near":  # centre log-uniform on [1, delta_hi], relative spread log-uniform on _NEAR
        u_centre, u_spread = torch.rand(2, generator=g, dtype=torch.float64, device=device).tolist()
        centre, spread = (math.exp(lo + (hi - lo) * u) for lo, hi, u in (
            (0.0, math.log(spec.delta_hi), u_centre), (math.log(_NEAR[0]), math.log(_NEAR[1]), u_spread)))
        delta = centre * (1.0 + spread * (2.0 * torch.rand(B, generator=g, dtype=torch.float64, device=device) - 1.0))
    else:
        lo, hi = math.log(spec.delta_lo), math.log(spec.delta_hi)
        delta = torch.empty(B, dtype=torch.float64, device=device).uniform_(lo, hi, generator=g).exp()
    if pattern in ("near", "mixed") and is_sorted:
        delta = torch.sort(delta).values
    s = torch.randn(B, K, generator=g, dtype=torch.float64, device=device)
    return delta, s


def _run_calls(verifier: Any, calls: list[tuple], spec: SequenceSpec, base: int, device: torch.device,
               contract: dict[str, TestResult] | None) -> list[tuple] | TestResult:
    """Outputs (s_out, accepted, index) of every call in order, or the contract failure that
    stopped it (an exception, an unusable or non-finite output)."""
    outs = []
    for i, call in enumerate(calls):
        delta, s = _inputs(call, spec, unit_seed(base, 6, "inputs", i), device)
        g = make_generator(unit_seed(base, 6, "verify", i), device)
        try:
            out = call_verify(verifier, delta.clone(), s.clone(), g)
        except DeviceError:
            raise
        except Exception as exc:  # noqa: BLE001 - a defect of the verifier, reported
            return contract_result(CELL, "contract:no-exception", 1, len(calls),
                                   f"call {i} (K={call[0]}, B={call[1]}, {call[2]} deltas): verify raised "
                                   f"{type(exc).__name__}: {exc}", LAYER)
        checks, parsed = check_batch(CELL, delta, s, out, LAYER)
        if contract is not None:
            for r in checks:
                if r.test not in contract or (not r.passed and contract[r.test].passed):
                    contract[r.test] = r
        non_finite = parsed is not None and not bool(torch.isfinite(parsed[0]).all())
        if parsed is None or non_finite:  # nothing to judge: the statistics need every output, finite
            return next((r for r in checks if not r.passed),
                        contract_result(CELL, "contract:output", 1, len(calls), f"call {i}: unusable output", LAYER))
        outs.append((delta, parsed[0], parsed[1]))
    return outs


def _replay(fresh: Any, calls: list[tuple], outs: list[tuple], spec: SequenceSpec, base: int,
            device: torch.device, start_state: torch.Tensor) -> TestResult:
    """The first ``spec.replay`` calls again on a fresh instance, the global RNG first moved to a
    state derived from (so other than) the one the sequence started from; restored afterwards."""
    n = min(spec.replay, len(calls))
    after = torch.get_rng_state()
    other = int.from_bytes(hashlib.sha256(start_state.numpy().tobytes()).digest()[:8], "little") >> 1
    torch.manual_seed(other)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(other)
    try:
        again = _run_calls(fresh, calls[:n], spec, base, device, None)
    finally:
        torch.set_rng_state(after)
    if isinstance(again, TestResult):
        return contract_result(CELL, "contract:replay-identical", 1, n, f"the replay failed: {again.note}", LAYER)
    bad = [i for i in range(n) if not (torch.equal(again[i][2], outs[i][2])
                                       and torch.allclose(again[i][1], outs[i][1], rtol=REPLAY_RTOL, atol=1e-12))]
    note = "" if not bad else (f"calls {bad[:5]} gave other outputs with the same inputs and generator seed on a fresh "
                               "instance (the global RNG, or state other than the generator, decides the output)")
    return contract_result(CELL, "contract:replay-identical", len(bad), n, note, LAYER)


def _pair_products(z: list[np.ndarray], rng: np.random.Generator) -> tuple[float, float, float, float]:
    """(sum, count) of adjacent products z_b z_(b+1) and of random-partner products per call."""
    adj_sum = adj_n = rnd_sum = rnd_n = 0.0
    for zi in z:
        if zi.size < 2:
            continue
        adj_sum += float(np.dot(zi[:-1], zi[1:]))
        adj_n += zi.size - 1
        perm = rng.permutation(zi.size)
        half = zi.size // 2  # disjoint random pairs: (perm[j], perm[half + j])
        rnd_sum += float(np.dot(zi[perm[:half]], zi[perm[half:2 * half]]))
        rnd_n += half
    return adj_sum, adj_n, rnd_sum, rnd_n


def _declared(verifier: Any, calls: list[tuple]) -> dict[str, float]:
    """The verifier's declared acceptance at every (anchor, K) of a constant call: {"anchor|K": a}."""
    declared: dict[str, float] = {}
    for K, _, pattern, anchor, _ in calls:
        key = f"{anchor!r}|{K}"
        if pattern in ("constant", "small") and key not in declared:
            a = float(np.asarray(verifier.acceptance(np.array([anchor]), K), np.float64).ravel()[0])
            if not 0.0 <= a <= 1.0:
                raise ValueError(f"declared acceptance {a!r} at delta={anchor:g}, K={K} is not a probability")
            declared[key] = a
    return declared


def _acceptance_tests(raw: dict, spec: SequenceSpec, accepted: list[np.ndarray], alpha: float,
                      power: float) -> list[TestResult]:
    """Acceptance count vs the declared acceptance: all constant calls pooled, and the K = 1 calls
    at each small anchor on their own (a rule that treats delta below some threshold as 0 has
    too few rejections there: O(delta) of them, so each anchor needs rows of its own)."""
    if raw.get("declared_error"):
        return [TestResult(CELL, "acceptance=declared", math.nan, math.nan, 0.0, math.nan, 0, passed=False,
                           note=raw["declared_error"], layer=LAYER)]
    pooled = "constant calls (all anchors and K)"
    groups: dict[str, tuple[list, list]] = {pooled: ([], [])}
    groups.update({f"K = 1 calls at delta = {a:g}": ([], []) for a in spec.small_anchors})
    for (K, B, pattern, anchor, _), acc in zip(raw["calls"], accepted):
        if pattern not in ("constant", "small"):
            continue
        probs, counts = groups[pooled if pattern == "constant" else f"K = 1 calls at delta = {anchor:g}"]
        probs.append(np.full(B, raw["declared"][f"{anchor!r}|{K}"]))
        counts.append(int(acc.sum()))
    out = []
    for group, (probs, counts) in groups.items():
        test = f"acceptance=declared, {group}"
        if not probs:
            out.append(TestResult(CELL, test, math.nan, math.inf, 1.0, math.inf, 0, kind="n/a", layer=LAYER,
                                  note="n/a: no such call was drawn"))
            continue
        r = bernoulli_sum_test(int(sum(counts)), np.concatenate(probs), alpha, cell=CELL, test=test, power=power)
        r.layer = LAYER
        out.append(r)
    return out


def scaled_spec(spec: SequenceSpec, scale: float) -> SequenceSpec:
    """``spec`` with its call counts times ``scale``."""
    return dataclasses.replace(spec, calls=max(8, int(round(spec.calls * scale))),
                               small_calls=int(round(spec.small_calls * scale)))


def draw_layer(verifier: Any, spec: SequenceSpec, *, Ks: list[int], device: torch.device, base: int,
               has_acceptance: bool) -> tuple[list[TestResult], dict | None]:
    """The user-code half of layer 6: drive ``verifier`` (a fresh instance) through the calls,
    check the contract on each, replay the first ones, read the declared acceptance. Returns the
    contract results and the raw outputs as plain JSON (None when the contract stopped the run):
    ``calls`` [[K, B, pattern, anchor, sorted]], per row ``z`` = s_out - delta, ``delta``,
    ``accepted`` (0/1), and ``declared`` {"anchor|K": a} (or ``declared_error``)."""
    Ks = [K for K in Ks if supports(verifier, K)]
    if not Ks:
        return [], None
    fresh = copy.deepcopy(verifier) if spec.replay else None
    calls = _call_plan(spec, Ks, np.random.default_rng(unit_seed(base, 6, "plan")))
    contract: dict[str, TestResult] = {}
    start_state = torch.get_rng_state()
    outs = _run_calls(verifier, calls, spec, base, device, contract)
    if isinstance(outs, TestResult):
        return list(contract.values()) + ([] if outs.test in contract else [outs]), None
    results = list(contract.values())
    if fresh is not None:
        results.append(_replay(fresh, calls, outs, spec, base, device, start_state))
    raw: dict = {"calls": [list(c) for c in calls],
                 "z": torch.cat([s_out - delta for delta, s_out, _ in outs]).cpu().tolist(),
                 "delta": torch.cat([delta for delta, _, _ in outs]).cpu().tolist(),
                 "accepted": torch.cat([acc for _, _, acc in outs]).to(torch.int8).cpu().tolist()}
    if has_acceptance:
        try:
            raw["declared"] = _declared(verifier, calls)
        except Exception as exc:  # noqa: BLE001 - a broken declaration is a defect
            raw["declared_error"] = f"acceptance() raised {type(exc).__name__}: {exc}"
    return results, raw


def judge_layer(raw: dict, spec: SequenceSpec, *, alpha: float, power: float, base: int) -> list[TestResult]:
    """The statistics half of layer 6, from the raw outputs alone (no verifier, no user code: the
    battery computes it in the process that judges). Malformed raw data raises ValueError."""
    calls = [(int(K), int(B), str(p), float(a), bool(srt)) for K, B, p, a, srt in raw["calls"]]
    sizes_per_call = np.array([c[1] for c in calls], dtype=np.int64)
    z_all = np.asarray(raw["z"], dtype=np.float64)
    d_all = np.asarray(raw["delta"], dtype=np.float64)
    acc_all = np.asarray(raw["accepted"], dtype=np.int64)
    if not (z_all.shape == d_all.shape == acc_all.shape == (int(sizes_per_call.sum()),)):
        raise ValueError("layer 6 raw outputs: the rows do not match the calls")
    if not (np.all(np.isfinite(z_all)) and np.all(np.isfinite(d_all))):
        raise ValueError("layer 6 raw outputs hold non-finite values")
    cuts = np.cumsum(sizes_per_call)[:-1]
    z, deltas, accepted = np.split(z_all, cuts), np.split(d_all, cuts), np.split(acc_all, cuts)
    u = special.ndtr(z_all)
    sizes = np.repeat(sizes_per_call, sizes_per_call)
    pattern = np.repeat([c[2] for c in calls], sizes_per_call)
    results = []
    for label, rows in (("all rows", slice(None)), (f"calls of B <= {SMALL_CALL}", sizes <= SMALL_CALL),
                        ("near-constant deltas", pattern == "near"), ("mixed deltas", pattern == "mixed")):
        x = u[rows]
        if x.size < 2:
            results.append(TestResult(CELL, f"pit-ks {label}", math.nan, math.inf, 1.0, math.inf, int(x.size),
                                      kind="n/a", layer=LAYER, note="n/a: too few rows"))
            continue
        r = ks_dkw_test(x, _identity, alpha, cell=CELL, test=f"pit-ks {label}", power=power)
        r.layer = LAYER
        results.append(r)
    results.append(_normal_test(float(z_all.sum()), float(z_all.size), alpha, power, "mean(s_out - delta)",
                                int(z_all.size), "exact N(0, 1) test; MDD: a mean shift"))
    small = d_all <= spec.small_delta
    results.append(_normal_test(float(np.dot(z_all[small], d_all[small])), float(np.dot(d_all[small], d_all[small])),
                                alpha, power, f"shift proportional to delta (delta <= {spec.small_delta:g})",
                                int(small.sum()), "exact N(0, 1) score test; MDD: the shift per unit delta"))
    spread = np.concatenate([d - d.mean() for d in deltas])  # delta's spread inside each call
    for kind in ("near", "mixed"):
        rows = pattern == kind
        results.append(_normal_test(float(np.dot(z_all[rows], spread[rows])), float(np.dot(spread[rows], spread[rows])),
                                    alpha, power, f"s_out - delta on delta within {kind} calls", int(rows.sum()),
                                    "exact N(0, 1) score test; MDD: the slope (rows read with another row's delta)"))
    adj_sum, adj_n, rnd_sum, rnd_n = _pair_products(z, np.random.default_rng(unit_seed(base, 6, "pairs")))
    results.append(_normal_test(adj_sum, adj_n, alpha, power, "independent rows (adjacent pairs)", int(adj_n),
                                "CLT N(0, 1) test of mean z_b z_(b+1); MDD: a correlation"))
    results.append(_normal_test(rnd_sum, rnd_n, alpha, power, "independent rows (random pairs)", int(rnd_n),
                                "CLT N(0, 1) test of mean z_b z_c; MDD: a correlation"))
    if "declared" in raw or "declared_error" in raw:
        results += _acceptance_tests(raw, spec, accepted, alpha, power)
    for r in results:
        r.extra.update({"pooled": True, "calls": len(calls), "rows": int(z_all.size)})
    return results


__all__ = ["LAYER", "draw_layer", "judge_layer", "planned_tests", "scaled_spec"]
