"""Theory vs measurement for sampler runs (issue 5): acceptance calibration and predicted NFE.

(a) calibration: observed accepts vs sum_i a(delta_i, K_i) over the verification events, with
    a = the verifier's own ``acceptance(delta, K)`` when it declares one, else the closed form of
    speccheck.theory for its name (rmc, dgrs, rass with optimal weights);
    z = (observed - sum a_i) / sqrt(sum a_i (1 - a_i)) (independent Bernoulli events given deltas).
(b) predicted E[NFE]: the finite-horizon DP of speccheck.theory.expected_nfe per stochastic block,
    with the acceptance per (root step, depth) measured on the run, compared with the measured
    mean NFE. Two estimates of that acceptance:
    - ``predicted_nfe``: the mean theoretical acceptance a(delta, K) over the events at (step,
      depth) (events reaching a depth are exactly those conditioned on, so this is unbiased for
      P(accept | reached)); a genuine prediction;
    - ``predicted_nfe_freq``: the observed accept frequencies. Note: fitted on the same runs this
      reproduces the measured mean NFE *identically* (flow conservation of the empirical chain of
      round roots), so it is reported only as a consistency check of the bookkeeping.
    ``nfe_z`` = (measured - predicted) / SE of that difference, the SE from a trajectory
    bootstrap (100 resamples) since both numbers come from the same trajectories.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from speccheck.errors import DefectError
from speccheck.sampler.core import PREFETCH_MODES, EventLog, SamplerResult

_FAST_CLOSED_FORM = ("rmc", "dgrs")
#: the per-trajectory counters of a run that its summary reads
RUN_COUNTERS = ("nfe", "root_calls", "det_calls", "rounds", "n_accepted", "n_verified")
INTERP_STEP = 0.01
_TABLES: dict = {}


def _interpolated(acc_fn, key, d: np.ndarray, K: int) -> np.ndarray:
    """acc_fn(., K) at the grid points h j, h (j + 1) around each delta (h = INTERP_STEP; only
    the cells that hold deltas, cached per verifier and K), interpolated linearly: error
    <= max|a''| h^2 / 8 ~ 1e-5 per event, far below the Bernoulli noise the calibration z
    measures."""
    table = _TABLES.setdefault((key, K), {})
    j = np.floor(d / INTERP_STEP).astype(np.int64)
    need = np.unique(np.concatenate([j, j + 1]))
    missing = np.array([i for i in need.tolist() if i not in table], dtype=np.int64)
    if missing.size:
        vals = np.asarray(acc_fn(INTERP_STEP * missing.astype(np.float64), K), dtype=np.float64)
        table.update(zip(missing.tolist(), vals.tolist()))
    lo = np.array([table[i] for i in j.tolist()])
    hi = np.array([table[i] for i in (j + 1).tolist()])
    w = d / INTERP_STEP - j
    return lo + w * (hi - lo)


def theoretical_acceptance(verifier: object, delta: np.ndarray, K: np.ndarray) -> np.ndarray:
    """P(accept) per event (arrays of equal length); uses ``verifier.acceptance`` if present
    (directly for the built-in closed forms rmc/dgrs, else tabulated and interpolated, see
    :func:`_interpolated`: a RASS acceptance costs ~10 ms per delta), else the closed form of
    speccheck.theory for the verifier's name."""
    delta = np.asarray(delta, dtype=np.float64)
    K = np.asarray(K, dtype=np.int64)
    out = np.empty_like(delta)
    acc_fn = getattr(verifier, "acceptance", None)
    name = str(getattr(verifier, "name", "")).lower()
    for k in np.unique(K):
        sel = K == k
        d = delta[sel]
        if acc_fn is not None:
            if name in _FAST_CLOSED_FORM:
                out[sel] = np.asarray(acc_fn(d, int(k)), dtype=np.float64)
            else:
                out[sel] = _interpolated(acc_fn, (id(verifier), name), d, int(k))
            continue
        from speccheck import theory

        if name.startswith("rmc") or int(k) == 1 and name.startswith(("dgrs", "rass")):
            out[sel] = theory.acceptance_rmc(d)
        elif name.startswith("dgrs"):
            out[sel] = theory.acceptance_dgrs(d, int(k))
        elif name.startswith("rass"):
            # optimal weights per distinct delta (cached by the theory module); round to 1e-3
            dr = np.round(d, 3)
            uniq, inv = np.unique(dr, return_inverse=True)
            vals = np.array([float(theory.acceptance_rass(float(x), int(k))) for x in uniq])
            out[sel] = vals[inv]
        else:
            raise ValueError(f"verifier {name!r} declares no acceptance(delta, K) and has no "
                             "closed form in speccheck.theory")
    return out


def calibration(verifier: object, events: EventLog, mask: Optional[np.ndarray] = None,
                a: Optional[np.ndarray] = None) -> dict:
    """Observed vs expected accepts over the (masked) events: {'observed', 'expected', 'z', 'n'}.
    ``a``: precomputed theoretical acceptance of the masked events (optional). No events: z is NaN."""
    sel = np.ones(len(events), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if a is None:
        a = theoretical_acceptance(verifier, events.delta[sel], events.K[sel])
    obs = float(events.accepted[sel].sum())
    exp = float(a.sum())
    var = float((a * (1 - a)).sum())
    if not sel.any():  # no events: no test (NaN), never a pass
        z = np.nan
    else:
        z = (obs - exp) / np.sqrt(var) if var > 0 else (0.0 if obs == exp else np.inf)
    return {"n_events": int(sel.sum()), "observed_accepts": obs, "expected_accepts": exp,
            "calibration_z": float(z)}


def measured_alpha(events: EventLog, start: int, end: int, L: int, mask: Optional[np.ndarray] = None,
                   values: Optional[np.ndarray] = None, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """alpha[n - start, j]: (weighted) mean of ``values`` (default: the accept indicators) over
    the events at depth j + 1 of rounds rooted at step n in the stochastic block [start, end).
    Cells without events take the pooled value at that depth (then overall; 0.5 if none)."""
    sel = np.ones(len(events), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    root = events.step - events.depth + 1
    sel &= (root >= start) & (root < end) & (events.depth <= L)
    Nb = end - start
    idx = (root[sel] - start) * L + (events.depth[sel] - 1)
    acc = (events.accepted if values is None else np.asarray(values))[sel].astype(np.float64)
    w = np.ones(acc.size) if weights is None else np.asarray(weights, dtype=np.float64)[sel]
    num = np.bincount(idx, weights=acc * w, minlength=Nb * L).reshape(Nb, L)
    den = np.bincount(idx, weights=w, minlength=Nb * L).reshape(Nb, L)
    overall = (acc * w).sum() / w.sum() if w.sum() > 0 else 0.5
    pooled = np.where(den.sum(0) > 0, num.sum(0) / np.maximum(den.sum(0), 1e-300), overall)
    return np.where(den > 0, num / np.maximum(den, 1e-300), pooled[None, :])


def stochastic_blocks(stochastic: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs [start, end) of stochastic steps."""
    blocks, n, N = [], 0, len(stochastic)
    while n < N:
        if stochastic[n]:
            m = n
            while m < N and stochastic[m]:
                m += 1
            blocks.append((n, m))
            n = m
        else:
            n += 1
    return blocks


def predicted_nfe(result: SamplerResult, stochastic: np.ndarray, L: int, prefetch: str,
                  mask_traj: Optional[np.ndarray] = None, values: Optional[np.ndarray] = None,
                  traj_weights: Optional[np.ndarray] = None) -> float:
    """E[stochastic-part target calls] from the DP with per-(step, depth) acceptance estimated
    from ``values`` per event (default the accept indicators; see module docstring).

    One call per round plus one warm-up per block (prefetch 'none': two calls per round)."""
    from speccheck.theory import expected_nfe

    ev = result.events
    mask = None if mask_traj is None else np.asarray(mask_traj, dtype=bool)[ev.traj.astype(np.int64)]
    w = None if traj_weights is None else np.asarray(traj_weights, dtype=np.float64)[ev.traj.astype(np.int64)]
    total = 0.0
    for s, e in stochastic_blocks(np.asarray(stochastic)):
        alpha = measured_alpha(ev, s, e, L, mask, values, w)
        if prefetch == "none":
            total += 2.0 * expected_nfe(alpha, e - s, L, warmup=0)
        else:
            total += expected_nfe(alpha, e - s, L, warmup=1)
    return float(total)


def _host(values: torch.Tensor) -> np.ndarray:
    """A result tensor (on any device) as a host numpy array."""
    return values.detach().cpu().numpy()


def _mean_se(values: np.ndarray) -> float:
    """Standard error of the mean (NaN for fewer than two values)."""
    return float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else float("nan")


def _nfe_gap_se(result: SamplerResult, stochastic: np.ndarray, L: int, in_cell: np.ndarray,
                a_theory: np.ndarray, nfe_all: np.ndarray) -> float:
    """SE of (measured mean NFE - predicted NFE): both come from the same trajectories, so
    resample trajectories (bootstrap, 100 resamples, numpy seed 0) and recompute both."""
    rng = np.random.default_rng(0)
    chosen = np.nonzero(in_cell)[0]
    gaps = []
    for _ in range(100 if chosen.size > 1 else 0):
        counts = np.bincount(rng.choice(chosen, chosen.size), minlength=in_cell.size).astype(np.float64)
        predicted = predicted_nfe(result, stochastic, L, result.protocol["prefetch"], in_cell, a_theory, counts)
        gaps.append((counts * nfe_all).sum() / counts.sum() - predicted)
    return float(np.std(gaps, ddof=1)) if len(gaps) > 1 else float("nan")


def declared_acceptance(result: SamplerResult, verifier: object, mask_traj: Optional[np.ndarray] = None
                        ) -> np.ndarray:
    """The verifier's own law at each verification event of the trajectories in ``mask_traj``
    (all by default): a_i = P(accept | delta_i, K_i) from :func:`theoretical_acceptance`, 0 for
    events outside the mask. The only part of a summary that needs the verifier."""
    events = result.events
    in_cell = np.ones(result.nfe.numel(), dtype=bool) if mask_traj is None else np.asarray(mask_traj, dtype=bool)
    event_in_cell = in_cell[events.traj.astype(np.int64)]
    declared = np.zeros(len(events))
    declared[event_in_cell] = theoretical_acceptance(verifier, events.delta[event_in_cell], events.K[event_in_cell])
    return declared


def summarize(result: SamplerResult, verifier: object, stochastic: np.ndarray, L: int,
              mask_traj: Optional[np.ndarray] = None) -> dict:
    """Speed-up (mean, SE), NFE, acceptance, calibration z, predicted NFE for the trajectories
    in ``mask_traj`` (all by default): :func:`summarize_declared` with the verifier's
    :func:`declared_acceptance`. Result tensors may live on any device."""
    return summarize_declared(result, declared_acceptance(result, verifier, mask_traj), stochastic, L, mask_traj)


def summarize_declared(result: SamplerResult, declared: np.ndarray, stochastic: np.ndarray, L: int,
                       mask_traj: Optional[np.ndarray] = None) -> dict:
    """:func:`summarize` from the run and the declared acceptance per event (``declared``, as
    :func:`declared_acceptance` returns it) alone: no verifier, so the judging process can
    summarise a run made elsewhere."""
    n_batch = result.nfe.numel()
    in_cell = np.ones(n_batch, dtype=bool) if mask_traj is None else np.asarray(mask_traj, dtype=bool)
    speedup = _host(result.speedup)[in_cell]
    speedup_no_warmup = _host(result.speedup_no_warmup)[in_cell]
    nfe_all = _host(result.nfe.double())
    nfe = nfe_all[in_cell]
    events = result.events
    event_in_cell = in_cell[events.traj.astype(np.int64)]
    a_theory = np.where(event_in_cell, np.asarray(declared, dtype=np.float64), 0.0)
    calibrated = calibration(None, events, event_in_cell, a_theory[event_in_cell])
    predicted = predicted_nfe(result, stochastic, L, result.protocol["prefetch"], in_cell, a_theory)
    predicted_freq = predicted_nfe(result, stochastic, L, result.protocol["prefetch"], in_cell)
    gap_se = _nfe_gap_se(result, stochastic, L, in_cell, a_theory, nfe_all)
    nfe_se = _mean_se(nfe)
    acceptance = _host(result.n_accepted)[in_cell].sum() / max(_host(result.n_verified)[in_cell].sum(), 1)
    return {
        "trajectories": int(in_cell.sum()),
        "speedup": float(speedup.mean()), "speedup_se": _mean_se(speedup),
        "speedup_no_warmup": float(speedup_no_warmup.mean()), "speedup_no_warmup_se": _mean_se(speedup_no_warmup),
        "nfe_mean": float(nfe.mean()), "nfe_se": nfe_se,
        "root_calls_mean": float(_host(result.root_calls.double())[in_cell].mean()),
        "det_calls_mean": float(_host(result.det_calls.double())[in_cell].mean()),
        "rounds_mean": float(_host(result.rounds.double())[in_cell].mean()),
        "batch_calls": int(result.batch_calls),   # target calls of the whole batched run
        "batch_trajectories": int(n_batch),
        "stochastic_steps": int(result.n_stochastic),
        "acceptance": float(acceptance),
        **calibrated,
        "predicted_nfe": predicted,
        "predicted_speedup": float(result.n_stochastic / predicted),
        "predicted_nfe_freq": predicted_freq,
        "nfe_gap_se": gap_se,
        "nfe_z": float((nfe.mean() - predicted) / gap_se) if gap_se and gap_se > 0 else float("nan"),
        "nfe_z_measured_se_only": float((nfe.mean() - predicted) / nfe_se) if nfe_se and nfe_se > 0 else float("nan"),
    }


# ----------------------------------------------------------------------------- runs as raw outputs
def run_raw(result: SamplerResult, declared: np.ndarray) -> dict:
    """What :func:`summarize_declared` reads of a run, as host numpy arrays and plain numbers:
    the per-trajectory ``counters`` (:data:`RUN_COUNTERS`), the ``events`` columns, the
    ``declared`` acceptance per event, ``n_stochastic``, ``batch_calls`` and ``prefetch``. The
    process that ran the verifier sends this; :func:`run_from_raw` rebuilds the run elsewhere."""
    return {"counters": {name: _host(getattr(result, name)).astype(np.int64) for name in RUN_COUNTERS},
            "events": {name: np.asarray(getattr(result.events, name)) for name in EventLog.__dataclass_fields__},
            "declared": np.asarray(declared, dtype=np.float64),
            "n_stochastic": int(result.n_stochastic), "batch_calls": int(result.batch_calls),
            "prefetch": str(result.protocol["prefetch"])}


def join_raw(parts: list[dict]) -> dict:
    """Raw runs of consecutive trajectory chunks as one (event trajectory ids offset by the
    trajectories before them; ``batch_calls`` summed). The chunks must share ``n_stochastic``
    and ``prefetch``. Malformed parts raise ValueError (checked by :func:`run_from_raw`)."""
    if not parts:
        raise ValueError("no runs to join")
    checked = [run_from_raw(part) for part in parts]
    for name in ("n_stochastic", "prefetch"):
        if len({str(part[name]) for part in parts}) != 1:
            raise ValueError(f"the runs to join differ in {name}: {[part[name] for part in parts]}")
    offsets = np.cumsum([0] + [result.nfe.numel() for result, _ in checked[:-1]])
    return {"counters": {name: np.concatenate([_host(getattr(result, name)) for result, _ in checked])
                         for name in RUN_COUNTERS},
            "events": {name: np.concatenate([getattr(result.events, name) + (int(offset) if name == "traj" else 0)
                                             for (result, _), offset in zip(checked, offsets)])
                       for name in EventLog.__dataclass_fields__},
            "declared": np.concatenate([declared for _, declared in checked]),
            "n_stochastic": int(parts[0]["n_stochastic"]),
            "batch_calls": int(sum(int(part["batch_calls"]) for part in parts)),
            "prefetch": str(parts[0]["prefetch"])}


def _column(values: object, name: str, *, integer: bool, length: Optional[int] = None) -> np.ndarray:
    """A 1-d column of a raw run: integers (or booleans) as int64, else finite float64."""
    array = np.asarray(values)
    if array.ndim != 1 or (length is not None and array.size != length):
        raise ValueError(f"{name}: expected a 1-d column of {length if length is not None else 'any'} values, "
                         f"got shape {array.shape}")
    if integer:
        if array.size and array.dtype.kind not in "iub":
            raise ValueError(f"{name}: expected integers, got {array.dtype}")
        return array.astype(np.int64)
    if array.size and array.dtype.kind not in "iuf":
        raise ValueError(f"{name}: expected numbers, got {array.dtype}")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: {int((~np.isfinite(array)).sum())} non-finite value(s)")
    return array


def run_from_raw(raw: dict) -> tuple[SamplerResult, np.ndarray]:
    """The run and its declared acceptance per event from :func:`run_raw`'s dict (arrays or the
    lists a JSON store holds), checked before use: every column 1-d and of its length and type,
    counters >= 0, events pointing at existing trajectories with depth, K >= 1, delta >= 0 and
    finite, accepted 0/1, declared in [0, 1], and the counters agreeing with the events
    (n_verified = events per trajectory, n_accepted = accepts per trajectory). ValueError
    naming the first problem otherwise; the run has no states (``x`` is [n, 0])."""
    import torch

    if not (isinstance(raw, dict) and isinstance(raw.get("counters"), dict) and isinstance(raw.get("events"), dict)):
        raise ValueError("a raw run needs 'counters' and 'events' tables")
    counters = {name: _column(raw["counters"].get(name), f"counters.{name}", integer=True) for name in RUN_COUNTERS}
    n = counters["nfe"].size
    if n < 1:
        raise ValueError("a raw run needs at least one trajectory")
    for name, values in counters.items():
        if values.size != n or (values < 0).any():
            raise ValueError(f"counters.{name}: expected {n} values >= 0")
    first = raw["events"].get("delta")
    m = np.asarray(first).size if first is not None else -1
    columns = {name: _column(raw["events"].get(name), f"events.{name}", integer=name != "delta", length=m)
               for name in EventLog.__dataclass_fields__}
    bounds = {"traj": (0, n - 1), "depth": (1, None), "K": (1, None), "step": (0, None), "round": (0, None),
              "accepted": (0, 1), "delta": (0, None), "index": (0, None)}
    for name, (low, high) in bounds.items():
        values = columns[name]
        if values.size and (values.min() < low or (high is not None and values.max() > high)):
            raise ValueError(f"events.{name}: values outside [{low}, {high if high is not None else 'inf'}]")
    declared = _column(raw.get("declared"), "declared", integer=False, length=m)
    if declared.size and (declared.min() < 0 or declared.max() > 1):
        raise ValueError("declared: an acceptance probability outside [0, 1]")
    if not np.array_equal(np.bincount(columns["traj"], minlength=n), counters["n_verified"]):
        raise ValueError("counters.n_verified disagrees with the events per trajectory")
    if not np.array_equal(np.bincount(columns["traj"], weights=columns["accepted"], minlength=n).astype(np.int64),
                          counters["n_accepted"]):
        raise ValueError("counters.n_accepted disagrees with the accepted events per trajectory")
    n_stochastic, batch_calls, prefetch = raw.get("n_stochastic"), raw.get("batch_calls"), raw.get("prefetch")
    if not (isinstance(n_stochastic, (int, np.integer)) and isinstance(batch_calls, (int, np.integer))
            and not isinstance(n_stochastic, bool) and n_stochastic >= 0 and batch_calls >= 0):
        raise ValueError(f"n_stochastic and batch_calls must be integers >= 0, got {n_stochastic!r}, {batch_calls!r}")
    if prefetch not in PREFETCH_MODES:
        raise ValueError(f"prefetch must be one of {PREFETCH_MODES}, got {prefetch!r}")
    columns["accepted"] = columns["accepted"].astype(bool)
    result = SamplerResult(x=torch.empty(n, 0, dtype=torch.float64), commit_depth=torch.empty(n, 0, dtype=torch.long),
                           events=EventLog(**columns), n_stochastic=int(n_stochastic), batch_calls=int(batch_calls),
                           lazy_eval_calls=0, protocol={"prefetch": str(prefetch)},
                           **{name: torch.from_numpy(values) for name, values in counters.items()})
    return result, declared


#: slack of the declared acceptance over the i.i.d.-list bound (tabulated laws interpolate to ~1e-5)
BOUND_SLACK = 1e-4


def check_run(result: SamplerResult, declared: np.ndarray, stochastic: np.ndarray, *, n_traj: int, tree_L: int,
              width: int, prefetch: str) -> None:
    """What every run of Algorithm 1 with ``n_traj`` trajectories on a schedule with the stochastic
    steps ``stochastic`` and a tree of depth ``tree_L`` and ``width`` children per node obeys,
    checked on a run rebuilt by :func:`run_from_raw` (ValueError naming the first that fails):
    n_traj trajectories and n_stochastic = sum(stochastic) >= 1; each trajectory verifies each
    stochastic step once (n_verified = n_stochastic, the (trajectory, step) pairs of the events
    distinct and at stochastic steps); nfe = rounds + root_calls with rounds >= 1; event depths in
    [1, tree_L] and K = width; and the declared acceptance a law an exact rule can have, at most
    the i.i.d.-list bound of its (delta, K) (+ :data:`BOUND_SLACK`). A run that is not the one
    asked for (trajectories, schedule, ``prefetch`` mode) is ValueError (malformed evidence); one
    that breaks the rest is :class:`~speccheck.errors.DefectError` (a defect of the code that ran)."""
    from speccheck.theory import list_bound_iid

    n = result.nfe.numel()
    mask = np.asarray(stochastic)
    if n != n_traj:
        raise ValueError(f"the run has {n} trajectories, {n_traj} were asked for")
    if result.protocol["prefetch"] != prefetch:
        raise ValueError(f"prefetch {result.protocol['prefetch']!r}, the cell asked for {prefetch!r}")
    if mask.ndim != 1 or mask.dtype != bool or int(mask.sum()) != result.n_stochastic or result.n_stochastic < 1:
        raise ValueError(f"n_stochastic {result.n_stochastic} is not the schedule's {int(mask.sum())} (>= 1) "
                         "stochastic steps")
    events = result.events
    if not (_host(result.n_verified) == result.n_stochastic).all():
        raise DefectError(f"the run breaks Algorithm 1: a trajectory did not verify each of the "
                          f"{result.n_stochastic} stochastic steps once")
    if (events.step >= mask.size).any() or not mask[events.step].all():
        raise DefectError("the run breaks Algorithm 1: an event at a step that is not stochastic")
    pairs = events.traj.astype(np.int64) * mask.size + events.step
    if np.unique(pairs).size != pairs.size:
        raise DefectError("the run breaks Algorithm 1: a (trajectory, step) verified twice")
    if len(events) and (events.depth.max() > tree_L or (events.K != width).any() or events.index.max() > width):
        raise DefectError(f"the run breaks Algorithm 1: events outside the tree: depth > {tree_L}, K != {width} "
                          f"or a child index > {width}")
    _check_accounting(result, mask)
    bound = list_bound_iid(events.delta, width) if len(events) else np.zeros(0)
    above = np.nonzero(declared > bound + BOUND_SLACK)[0]
    if above.size:
        i = int(above[0])
        raise DefectError(f"declared acceptance {declared[i]:.6g} at delta={events.delta[i]:.6g}, K={width} exceeds "
                         f"the i.i.d.-list bound {bound[i]:.6g}: no exact rule has it")


def _check_accounting(result: SamplerResult, stochastic: np.ndarray) -> None:
    """The call accounting of Algorithm 1, from the events: a round verifies depths 1, 2, ..., m
    on consecutive steps, every one accepted but possibly the last; rounds = the rounds the events
    show, numbered 0, 1, ...; root_calls = one warm-up per stochastic block (prefetch 'none': one
    per round); nfe = rounds + root_calls. DefectError naming the first that fails."""
    events = result.events
    n = result.nfe.numel()
    order = np.lexsort((events.depth, events.round, events.traj))
    traj, rnd, depth = events.traj[order], events.round[order], events.depth[order]
    step, accepted = events.step[order], events.accepted[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (traj[1:] != traj[:-1]) | (rnd[1:] != rnd[:-1])
    starts = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = first[1:]
    root = step - depth                                     # the step a round started from, per event
    if not (np.array_equal(depth, np.arange(len(order)) - starts + 1) and np.array_equal(root, root[starts])
            and accepted[~last].all()):
        raise DefectError("the run breaks Algorithm 1: a round whose depths are not 1, 2, ... on consecutive steps, "
                          "or that went on after a rejection")
    rounds = np.bincount(traj[first], minlength=n)
    counted = np.zeros(n, dtype=np.int64)
    np.maximum.at(counted, traj, rnd + 1)
    blocks = len(stochastic_blocks(stochastic))
    root_calls = rounds if result.protocol["prefetch"] == "none" else np.full(n, blocks)
    if not (np.array_equal(_host(result.rounds), rounds) and np.array_equal(counted, rounds)
            and np.array_equal(_host(result.root_calls), root_calls)
            and np.array_equal(_host(result.nfe), rounds + root_calls)):
        raise DefectError("the run breaks Algorithm 1: its counters (rounds, root calls, target calls) are not "
                          "those its verifications show")
