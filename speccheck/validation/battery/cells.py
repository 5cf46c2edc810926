"""The battery's cell loop: one unit of work per cell (the contract, a delta x K grid cell, a
continuous-layer K, a wrapper dimension, the trajectory, the sequence), each seeded from its
identity so it gives the same results wherever and in whatever order it runs."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch
from scipy import special
from scipy import stats as sstats

from speccheck.errors import DeviceError, InputError
from speccheck.seeding import generator as make_generator
from speccheck.seeding import one_thread, pinned_global_rngs, unit_seed
from speccheck.validation import continuous, device_stats, law, sequence
from speccheck.validation.battery.plan import _Plan, _plan_of
from speccheck.validation.contract import (
    call_verify,
    check_batch,
    contract_checks,
    contract_result,
    is_device_failure,
    supports,
)
from speccheck.validation.results import TestResult
from speccheck.validation.stats import binom_test, ks_dkw_test
from speccheck.validation.suites import Suite
from speccheck.validation.trajectory import draw_trajectories, judge_trajectories

__all__ = ["STAT_LAYERS", "draw_cell", "judge_cell", "run_cell"]


# ------------------------------------------------------------------------- L1 + L2
def _draw_grid_cell(v: Any, delta: float, K: int, n_draws: int, cell: str, st: Suite, device: torch.device,
                    seed: int, has_acc: bool) -> tuple[list[TestResult], dict | None]:
    """User-code half of one (delta, K) grid cell: draw, verify, check the contract on every
    batch, read the declared acceptance. Raw outputs (host numpy): ``x`` = s_out, ``accepted``,
    ``declared`` (a probability, or the error ``acceptance`` raised); None without a usable sample."""
    spec = st.scalar
    g = make_generator(seed, device)
    outs, accepted, n_done = [], [], 0
    contract: dict[str, TestResult] = {}
    while n_done < n_draws:
        b = min(spec.chunk, n_draws - n_done)
        s = torch.randn(b, K, generator=g, dtype=torch.float64, device=device)
        d = torch.full((b,), delta, dtype=torch.float64, device=device)
        out = call_verify(v, d.clone(), s.clone(), g)
        checks, parsed = check_batch(cell, d, s, out, "L1")
        for r in checks:
            if r.test not in contract or (not r.passed and contract[r.test].passed):
                contract[r.test] = r
        if parsed is None:
            break
        outs.append(parsed[0])
        accepted.append(parsed[1])
        n_done += b
    results = list(contract.values())
    if not outs or not all(r.passed for r in results if r.test == "contract:finite"):
        return results, None  # no usable sample: the contract failures say why
    raw: dict = {"x": torch.cat(outs).cpu().numpy(), "accepted": torch.cat(accepted).cpu().numpy()}
    if has_acc:
        try:
            declared = float(np.asarray(v.acceptance(np.array([delta]), K), np.float64).ravel()[0])
            if not 0.0 <= declared <= 1.0:
                raise ValueError(f"declared acceptance {declared!r} is not a probability")
            raw["declared"] = declared
        except Exception as exc:  # noqa: BLE001 - a broken declaration is a defect
            raw["declared"] = f"acceptance() raised {type(exc).__name__}: {exc}"
    return results, raw


def _judge_grid_cell(raw: dict, delta: float, K: int, n_draws: int, cell: str, st: Suite, alpha_t: float,
                     has_acc: bool) -> list[TestResult]:
    """Statistics half of one grid cell, from its raw outputs alone: KS and tails of s_out against
    N(delta, 1), acceptance <= the i.i.d. list bound, acceptance = declared."""
    from speccheck.theory import list_bound_iid

    spec = st.scalar
    x = torch.from_numpy(np.ascontiguousarray(raw["x"], dtype=np.float64))
    acc = np.asarray(raw["accepted"], dtype=bool)
    if x.dim() != 1 or not 0 < x.numel() <= n_draws or acc.shape != (x.numel(),):
        raise ValueError(f"grid cell {cell!r}: {x.numel()} outputs, {acc.size} accepted flags for {n_draws} draws")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"grid cell {cell!r}: non-finite outputs")
    where = {"delta": delta, "K": K}
    cdf = device_stats.normal_cdf(delta)
    stat = [device_stats.ks_dkw_test(x, cdf, alpha_t, cell=cell, test="ks", power=st.power),
            device_stats.tail_test(x, cdf, alpha_t, q=spec.tail_q, cell=cell, test=f"tails{spec.tail_q:g}",
                                   power=st.power)]
    n, n_acc = x.numel(), int(acc.sum())
    bound = float(list_bound_iid(np.array(delta), K))
    if bound >= 1.0:
        stat.append(TestResult(cell, "acceptance<=list-bound", n_acc / n - 1.0, math.inf, 1.0, math.inf, n,
                               kind="n/a", note="n/a: the list bound is 1 here, so no count can exceed it"))
    else:
        stat.append(binom_test(n_acc, n, bound, alpha_t, cell=cell, test="acceptance<=list-bound",
                               one_sided_upper=True, power=st.power))
    if has_acc:
        declared = raw.get("declared")
        if isinstance(declared, str):
            stat.append(TestResult(cell, "acceptance=declared", math.nan, math.nan, 0.0, math.nan, n,
                                   passed=False, note=declared))
        elif isinstance(declared, (int, float)) and 0.0 <= float(declared) <= 1.0:
            stat.append(binom_test(n_acc, n, float(declared), alpha_t, cell=cell, test="acceptance=declared",
                                   power=st.power))
        else:
            raise ValueError(f"grid cell {cell!r}: declared acceptance {declared!r} is not a probability")
    for r in stat:
        r.layer = "L2" if r.test.startswith("acceptance") else "L1"
        r.extra.update(where)
    return stat


def _grid_cell_of(plan: _Plan, label: str) -> tuple[float, int, int, str]:
    return next(c for c in plan.grid_cells if c[3] == label)


def _draw_grid(v: Any, plan: _Plan, st: Suite, label: str, device: torch.device,
               base: int) -> tuple[list[TestResult], dict | None]:
    """The grid cell named ``label``, seeded by its identity: ``unit_seed(base, 1, label)``."""
    delta, K, n_draws, cell = _grid_cell_of(plan, label)
    try:
        return _draw_grid_cell(v, delta, K, n_draws, cell, st, device, unit_seed(base, 1, cell), plan.has_acceptance)
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a defect, not a load error
        return [contract_result(cell, "contract:no-exception", 1, n_draws,
                                f"verify raised {type(exc).__name__}: {exc}", "L1")], None


# ------------------------------------------------------------------------------- L3
def _wrapper_fn(verifier: Any) -> Callable:
    own = getattr(verifier, "verify_states", None)
    if callable(own):
        return own
    from speccheck.verifiers import verify_states

    def wrapped(mu_p: torch.Tensor, mu_q: torch.Tensor, sigma: Any, children: torch.Tensor,
                generator: torch.Generator | None) -> tuple:
        return verify_states(verifier, mu_p, mu_q, sigma, children, generator)

    return wrapped


def _state_shape(d: int) -> tuple[int, ...]:
    # exercise a multi-axis state where it factors nicely (64 = 4 x 16)
    return (4, 16) if d == 64 else (d,)


def _draw_wrapper_cell(fn: Callable, verifier: Any, dim: int, suite: Suite, n_rows: int, device: torch.device,
                       seed: int) -> tuple[list[TestResult], dict | None]:
    """User-code half of the wrapper cell of dimension ``dim``: verify_states on random states,
    contract checks, and per row the projections the tests need (host numpy): ``ze`` (on the
    displacement direction), ``zu`` (on a random direction), ``sq`` (|z|^2) and the linear MMD
    terms ``h`` against N(0, I)."""
    spec = suite.wrapper
    cell = f"d={dim}"
    g = make_generator(seed, device)
    shape = _state_shape(dim)
    K = spec.K
    if not supports(verifier, K):
        K = 1
    deltas = torch.tensor(spec.deltas, dtype=torch.float64, device=device)
    ze, zu, sq, h = [], [], [], []
    bad = {"shape": [], "index": 0, "accepted-equals-child": 0, "finite": 0}
    n_done = 0
    bw2 = 2.0 * (2.0 * dim)  # 2 * bandwidth^2, bandwidth^2 = 2 d
    while n_done < n_rows:
        b = min(spec.chunk, n_rows - n_done)
        b -= b % 2
        mu_p = 2.0 * torch.randn((b,) + shape, generator=g, dtype=torch.float64, device=device)
        sigma = 0.5 + 1.5 * torch.rand(b, generator=g, dtype=torch.float64, device=device)
        sig_arg: Any = sigma
        if dim == 2:  # exercise the float-sigma path
            sig_arg = float(sigma[0])
            sigma = torch.full_like(sigma, sig_arg)
        e = torch.randn(b, dim, generator=g, dtype=torch.float64, device=device)
        e = e / torch.linalg.vector_norm(e, dim=1, keepdim=True)
        dl = deltas[torch.randint(len(spec.deltas), (b,), generator=g, device=device)]
        mu_q = mu_p + (sigma * dl)[:, None].mul(e).reshape((b,) + shape)
        sig_b = sigma.reshape((b,) + (1,) * len(shape))
        noise = torch.randn((b, K) + shape, generator=g, dtype=torch.float64, device=device)
        children = mu_p[:, None] + sig_b[:, None] * noise
        try:
            out = fn(mu_p.clone(), mu_q.clone(), sig_arg, children.clone(), g)
        except Exception as exc:
            if isinstance(exc, DeviceError) or is_device_failure(exc):
                raise DeviceError(f"device {device} failed in verify_states ({type(exc).__name__}: {exc})") from exc
            raise
        try:
            y, acc, idx = out
        except (TypeError, ValueError):
            bad["shape"].append("verify_states must return (y, accepted, index)")
            break
        y_ok = torch.is_tensor(y) and tuple(y.shape) == (b,) + shape and y.dtype == torch.float64
        if not (y_ok and y.device == mu_p.device and torch.is_tensor(acc) and tuple(acc.shape) == (b,)
                and torch.is_tensor(idx) and tuple(idx.shape) == (b,)):
            bad["shape"].append(f"y {getattr(y, 'shape', None)} {getattr(y, 'dtype', None)}, "
                                f"expected {(b,) + shape} float64 on {device}")
            break
        acc = acc.to(torch.bool)
        idx = idx.to(torch.long)
        bad["index"] += int(((idx == K) != ~acc).sum() + ((idx < 0) | (idx > K)).sum())
        bad["finite"] += int((~torch.isfinite(y)).reshape(b, -1).any(dim=1).sum())
        rows = torch.nonzero(acc & (idx < K)).flatten()
        if rows.numel():
            child = children[rows, idx[rows]]
            tol = 1e-9 * (1.0 + mu_p[rows].abs() + sig_b[rows] * 10.0)
            off = ((y[rows] - child).abs() > tol).reshape(rows.numel(), -1)
            bad["accepted-equals-child"] += int(off.any(dim=1).sum())
        z = ((y - mu_q) / sig_b).reshape(b, dim)
        ze.append(torch.einsum("bd,bd->b", z, e).cpu().numpy())
        u = torch.randn(b, dim, generator=g, dtype=torch.float64, device=device)
        u = u / torch.linalg.vector_norm(u, dim=1, keepdim=True)
        zu.append(torch.einsum("bd,bd->b", z, u).cpu().numpy())
        sq.append((z * z).sum(dim=1).cpu().numpy())
        w = torch.randn(b, dim, generator=g, dtype=torch.float64, device=device)
        x1, x2, w1, w2 = z[0::2], z[1::2], w[0::2], w[1::2]

        def k(a, c):
            return torch.exp(-((a - c) ** 2).sum(dim=1) / bw2)

        h.append((k(x1, x2) + k(w1, w2) - k(x1, w2) - k(x2, w1)).cpu().numpy())
        n_done += b
    res = [contract_result(cell, "contract:states-shape", len(bad["shape"]), n_rows, "; ".join(bad["shape"]), "L3")]
    for key in ("index", "accepted-equals-child", "finite"):
        res.append(contract_result(cell, f"contract:states-{key}", bad[key], n_rows,
                             f"{bad[key]} rows violate it" if bad[key] else "", "L3"))
    for r in res:
        r.layer = "L3"
    if not ze:
        return res, None
    return res, {"ze": np.concatenate(ze), "zu": np.concatenate(zu), "sq": np.concatenate(sq), "h": np.concatenate(h)}


def _judge_wrapper_cell(raw: dict, dim: int, n_rows: int, suite: Suite, alpha_t: float) -> list[TestResult]:
    """Statistics half of a wrapper cell, from the per-row projections alone: KS of the two
    projections against N(0, 1), of |z|^2 against chi2(d), and the linear-time MMD."""
    cell = f"d={dim}"
    ze, zu, sq, h = (np.asarray(raw[k], dtype=np.float64) for k in ("ze", "zu", "sq", "h"))
    if not (ze.ndim == 1 and 0 < ze.size <= n_rows and ze.shape == zu.shape == sq.shape and 2 * h.size == ze.size):
        raise ValueError(f"wrapper cell {cell!r}: projections of {ze.size}, {zu.size}, {sq.size} rows and {h.size} "
                         f"MMD terms for {n_rows} rows")
    res = [ks_dkw_test(ze, special.ndtr, alpha_t, cell=cell, test="direction", power=suite.power),
           ks_dkw_test(zu, special.ndtr, alpha_t, cell=cell, test="random-direction", power=suite.power),
           ks_dkw_test(sq, lambda v: sstats.chi2.cdf(v, dim), alpha_t, cell=cell, test="chi2-norm", power=suite.power),
           _mmd_from_h(h, alpha_t, cell, suite.power)]
    for r in res:
        r.layer = "L3"
    return res


def _mmd_from_h(h: np.ndarray, alpha: float, cell: str, power: float) -> TestResult:
    """Studentised linear-time MMD^2 from its i.i.d. terms h (one-sided, normal reference)."""
    m = h.size
    if not np.all(np.isfinite(h)):
        return TestResult(cell, "mmd", math.inf, math.nan, 0.0, math.nan, m, passed=False, note="non-finite output")
    se = float(np.std(h, ddof=1) / math.sqrt(m))
    z_a = float(special.ndtri(1.0 - alpha))
    stat = float(np.mean(h) / se) if se > 0 else 0.0
    mdd = (z_a + float(special.ndtri(power))) * se
    return TestResult(cell, "mmd", stat, z_a, float(special.ndtr(-stat)), mdd, m,
                      passed=stat <= z_a, extra={"mmd2": float(np.mean(h))},
                      note="MDD in MMD^2 units")



def _wrapper_rows(st: Suite, scale: float) -> int:
    n_rows = continuous.scaled(st.wrapper.n, scale, 64)
    return n_rows + n_rows % 2


def _draw_wrapper(v: Any, st: Suite, dim: int, scale: float, device: torch.device,
                  base: int) -> tuple[list[TestResult], dict | None]:
    """The wrapper cell of dimension ``dim``, seeded by its identity: ``unit_seed(base, 3, dim)``."""
    n_rows = _wrapper_rows(st, scale)
    try:
        return _draw_wrapper_cell(_wrapper_fn(v), v, dim, st, n_rows, device, unit_seed(base, 3, dim))
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001
        return [contract_result(f"d={dim}", "contract:no-exception", 1, n_rows,
                                f"verify_states raised {type(exc).__name__}: {exc}", "L3")], None


# ------------------------------------------------------------------------------- L4
TRAJECTORY_ALPHA = 1e-3  # the layer's own Bonferroni level; its p-values then enter Holm


def _draw_trajectory(v: Any, opts: dict, scale: float, seed: int,
                     device: torch.device) -> tuple[list[TestResult], dict | None]:
    """The sampler runs of the trajectory layer (innovations by commit depth; Gaussian data vs the
    exact chain law), raw states only."""
    kw = {k: opts[k] for k in ("n_traj", "K", "L", "d") if k in opts}
    if "n_traj" in kw:
        kw["n_traj"] = continuous.scaled(int(kw["n_traj"]), scale, 20)
    factory = getattr(v, "sampler_factory", None)
    if factory is not None:
        kw["sampler_factory"] = factory
    base = getattr(v, "base", v) if factory is not None else v
    try:
        return [], draw_trajectories(base, seed=seed % (2 ** 31), device=device, **kw)
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a defect, not a load error
        return [contract_result("trajectory", "contract:no-exception", 1, 0,
                                f"trajectory checks raised {type(exc).__name__}: {exc}", "L4")], None


def _judge_trajectory(raw: dict) -> list[TestResult]:
    checks = judge_trajectories(raw, alpha=TRAJECTORY_ALPHA)
    for r in checks:
        r.layer = "L4"
        r.note = r.note or "p-value test (threshold = the Holm level on p)"
    return checks


# ------------------------------------------------------------------------- one cell
STAT_LAYERS = ("L1", "L3", "L4", "L5", "L6", "L7")  # the layers whose cells send raw outputs to be judged


def draw_cell(verifier: Any, suite: Suite, cell: tuple, *, plan: dict | None, base: int, device: torch.device,
              scale: float) -> tuple[list[TestResult], dict | None]:
    """The user-code half of one cell of a battery run: ``(contract results, raw outputs)``. The
    raw outputs (numpy arrays and plain values; None when the contract stopped the cell, or for
    the contract cell L0) are all :func:`judge_cell` needs. The cell's seed comes from its
    identity (``unit_seed(base, layer number, label)``), and the global generators start from a
    seed of that identity too (:func:`speccheck.seeding.pinned_global_rngs`), so a cell gives the
    same outputs wherever and in whatever order it runs. The L0 and L4 cells need no plan."""
    with pinned_global_rngs(unit_seed(base, "global-rngs", repr(tuple(cell))), device):
        return _draw_cell(verifier, suite, cell, plan=plan, base=base, device=device, scale=scale)


def _draw_cell(verifier: Any, suite: Suite, cell: tuple, *, plan: dict | None, base: int, device: torch.device,
               scale: float) -> tuple[list[TestResult], dict | None]:
    layer = cell[0]
    if layer == "L0":
        return contract_checks(verifier, device=str(device), seed=unit_seed(base, 0), n=suite.contract_n), None
    if layer == "L4":
        return _draw_trajectory(verifier, suite.trajectory, scale, unit_seed(base, 4), device)
    if plan is None:
        raise InputError(f"battery cell {cell!r} needs the run's plan")
    if layer == "L1":
        return _draw_grid(verifier, _plan_of(plan), suite, str(cell[1]), device, base)
    if layer == "L3":
        return _draw_wrapper(verifier, suite, int(cell[1]), scale, device, base)
    if layer == "L6":
        contract, raw = sequence.draw_layer(verifier, sequence.scaled_spec(suite.sequence, scale),
                                            Ks=list(plan["sequence_Ks"]), device=device, base=base,
                                            has_acceptance=bool(plan["has_acceptance"]))
        if raw is None and not contract:
            contract = [_unsupported(sequence.CELL, plan["sequence_Ks"], "L6")]
        return contract, raw
    if layer == "L7":
        return draw_law_cell(verifier, plan, base=base, device=device)
    if layer == "L5":
        K = int(cell[1])
        if not supports(verifier, K):
            return [_unsupported(f"K={K} (all strata)", [K], "L5")], None
        spec = suite.continuous
        n, n_shared = _continuous_sizes(spec, scale, bool(plan["has_acceptance"]))
        return continuous.draw_k(verifier, spec, K, n, n_shared, device, unit_seed(base, 5, K),
                                 bool(plan["has_acceptance"]))
    raise InputError(f"unknown battery cell {cell!r}; cells are ('L0',), ('L4',), ('L1', label), ('L5', K), ('L6',), "
                     "('L3', dim), ('L7',)")


def draw_law_cell(verifier: Any, plan: dict, *, base: int, device: torch.device) -> tuple[list, dict]:
    """The law layer's cell: ``([], raw)`` from :func:`speccheck.sampler.calls.draw_law`, the
    contract counts inside ``raw`` (:func:`judge_cell` turns them into results). The isolated path
    draws it in a process that imports nothing of ``speccheck.validation``
    (:func:`speccheck.scale.units.battery_law`), with the same outputs."""
    from speccheck.sampler.calls import draw_law

    return [], draw_law(verifier, plan["law"], seed=unit_seed(base, 7), device=device,
                        has_acceptance=bool(plan["has_acceptance"]))


def _unsupported(cell: str, Ks: list, layer: str) -> TestResult:
    """supports_K said yes to ``Ks`` when the run was planned and no when the cell ran."""
    return contract_result(cell, "contract:supports-K", 1, len(Ks), f"supports_K changed its answer for K in "
                           f"{list(Ks)} between the plan and this cell (it must be a function of K)", layer)


def _continuous_sizes(spec: Any, scale: float, has_acceptance: bool) -> tuple[int, int]:
    return continuous.scaled(spec.n, scale, minimum=16), (spec.declared_deltas if has_acceptance else 0)


def judge_cell(suite: Suite, cell: tuple, contract: list[TestResult], raw: dict | None, *, plan: dict | None,
               base: int, alpha_t: float, scale: float) -> list[TestResult]:
    """The statistics half of one cell: its contract results followed by the statistical tests
    computed HERE from ``raw`` alone (the verifier is never called; whatever the process that drew
    the outputs computed of them plays no part). A statistical cell without raw outputs must
    carry the contract failure that stopped it; malformed raw outputs raise FileFormatError (no
    verdict from corrupt evidence)."""
    from speccheck.errors import FileFormatError

    layer = cell[0]
    if layer == "L7" and raw is not None:  # the law's contract counts travel with its raw outputs
        try:
            checks, raw = law.outcome(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise FileFormatError(f"battery cell {cell!r}: malformed contract counts ({exc}); no verdict") from None
        contract = list(contract) + checks
    if raw is None:
        if layer in STAT_LAYERS and all(r.passed for r in contract):
            raise FileFormatError(f"battery cell {cell!r}: no raw outputs and no contract failure to say why; "
                                  "no verdict")
        return list(contract)
    try:
        with one_thread():  # the same bits in every judging process (a parent, a Dask worker)
            return list(contract) + _judge(suite, cell, raw, plan=plan, base=base, alpha_t=alpha_t, scale=scale)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise FileFormatError(f"battery cell {cell!r}: malformed raw outputs ({type(exc).__name__}: {exc}); "
                              "no verdict") from None


def _judge(suite: Suite, cell: tuple, raw: dict, *, plan: dict | None, base: int, alpha_t: float,
           scale: float) -> list[TestResult]:
    layer = cell[0]
    if layer == "L0":
        raise ValueError("the contract cell sends no raw outputs")
    if layer == "L4":
        return _judge_trajectory(raw)
    if plan is None:
        raise InputError(f"battery cell {cell!r} needs the run's plan")
    has_acc = bool(plan["has_acceptance"])
    if layer == "L1":
        delta, K, n_draws, label = _grid_cell_of(_plan_of(plan), str(cell[1]))
        return _judge_grid_cell(raw, delta, K, n_draws, label, suite, alpha_t, has_acc)
    if layer == "L3":
        return _judge_wrapper_cell(raw, int(cell[1]), _wrapper_rows(suite, scale), suite, alpha_t)
    if layer == "L6":
        return sequence.judge_layer(raw, sequence.scaled_spec(suite.sequence, scale), alpha=alpha_t,
                                    power=suite.power, base=base)
    if layer == "L7":
        return law.judge_layer(raw, alpha=alpha_t, power=suite.power, seed=unit_seed(base, 7, "pairs"))
    if layer == "L5":
        n, n_shared = _continuous_sizes(suite.continuous, scale, has_acc)
        return continuous.judge_k(raw, suite.continuous, int(cell[1]), n, n_shared, alpha_t, suite.power, has_acc)
    raise InputError(f"unknown battery cell {cell!r}")


def run_cell(verifier: Any, suite: Suite, cell: tuple, *, plan: dict | None, base: int, alpha_t: float,
             device: torch.device, scale: float) -> tuple[list[TestResult], dict | None]:
    """One cell in this process: :func:`draw_cell` then :func:`judge_cell`; ``(results, raw)``."""
    contract, raw = draw_cell(verifier, suite, cell, plan=plan, base=base, device=device, scale=scale)
    return judge_cell(suite, cell, contract, raw, plan=plan, base=base, alpha_t=alpha_t, scale=scale), raw
