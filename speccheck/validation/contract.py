"""The verifier contract as deterministic checks (``docs/contract.md``).

:func:`check_batch` checks one ``verify`` call's output (the battery's scalar layers run it on
every batch); :func:`contract_checks` is the stand-alone contract layer (also behind
``speccheck verifiers --check``): shapes, dtypes and device by the one output rule
(:func:`speccheck.verifiers.base.output_problems`), numpy outputs, non-finite outputs,
index == K iff rejected, accepted => s_out == s[index], delta = 0 rows, the same generator
seed gives the same output, another seed changes it, ``generator=None`` works, inputs are
not modified. Every check has false-failure rate 0: its ``kind`` is "contract".
"""

from __future__ import annotations

from typing import Any

import torch

from speccheck.errors import DeviceError
from speccheck.seeding import generator as make_generator
from speccheck.seeding import unit_seed
from speccheck.validation.results import TestResult
from speccheck.verifiers.base import normalize_verify_outputs, output_problems

#: (delta, K) cells of the stand-alone contract checks
CONTRACT_CELLS = ((0.0, 1), (0.5, 1), (2.0, 1), (0.0, 3), (1.0, 3), (3.0, 3), (1.0, 8))


def contract_result(cell: str, test: str, bad: int, n: int, note: str = "", layer: str = "L0") -> TestResult:
    """A deterministic check: ``bad`` violating rows (or messages) out of ``n``."""
    return TestResult(cell, test, float(bad), 0.0, 0.0 if bad else 1.0, 0.0, n, kind="contract",
                      passed=bad == 0, note=note, layer=layer)


#: how torch and the host say they ran out of memory (CUDA, and the CPU allocator's RuntimeError)
OOM_MARKS = ("out of memory", "not enough memory", "DefaultCPUAllocator", "can't allocate memory",
             "Cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """Host ``MemoryError``, CUDA's OutOfMemoryError, or torch's CPU allocator failing (a
    ``RuntimeError`` saying "not enough memory"): a resource, never a verdict on the rule."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(mark in str(exc) for mark in OOM_MARKS)


def is_device_failure(exc: BaseException) -> bool:
    """Out of memory or an unusable device: the run cannot go on (not a defect of the rule)."""
    if is_out_of_memory(exc):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("invalid device ordinal" in text or "CUDA error: no kernel image" in text)


def call_verify(verifier: Any, delta: torch.Tensor, s: torch.Tensor, generator: torch.Generator | None) -> Any:
    """``verifier.verify`` with device failures turned into :class:`DeviceError` (its message
    says "out of memory" when it was memory)."""
    try:
        return verifier.verify(delta, s, generator)
    except Exception as exc:
        if is_device_failure(exc):
            what = "ran out of memory" if is_out_of_memory(exc) else "failed"
            raise DeviceError(f"device {s.device} {what} while verifying ({type(exc).__name__}: {exc}); no verdict: "
                              "use a smaller --scale or another --device") from exc
        raise


def lazy_output_problem(out: Any) -> str:
    """A problem when ``verify`` returned a lazy iterator (a generator function's result) instead
    of its outputs; '' otherwise. Never iterates it (that would run the verifier's code again)."""
    if isinstance(out, (tuple, list)) or not hasattr(out, "__next__"):
        return ""
    return (f"verify returned a lazy {type(out).__name__} (is verify a generator function?), not the tuple "
            "(s_out, accepted, index)")


def check_batch(cell: str, delta: torch.Tensor, s: torch.Tensor, out: Any,
                layer: str = "L1") -> tuple[list[TestResult], tuple | None]:
    """Contract checks of one ``verify(delta, s)`` output; returns (results, normalised output
    or None when its structure is unusable). Non-finite s_out is a defect of the verifier."""
    B, K = s.shape
    lazy = lazy_output_problem(out)
    if lazy:
        return [contract_result(cell, "contract:shape", 1, B, lazy, layer)], None
    problems = output_problems(out, B, K, s.dtype, s.device)
    structural = [p for p in problems if "dtype" not in p]
    if structural:
        return [contract_result(cell, "contract:shape", len(structural), B, "; ".join(structural), layer)], None
    res = [contract_result(cell, "contract:dtype", len(problems), B, "; ".join(problems), layer)]
    if problems:  # a dtype that cannot be normalised safely: stop here
        return res, None
    s_out, accepted, index = normalize_verify_outputs(out, s.dtype)
    bad_range = int(((index < 0) | (index > K)).sum())
    bad_iff = int(((index == K) != ~accepted).sum())
    picked = torch.gather(s, 1, index.clamp(0, K - 1)[:, None])[:, 0]
    bad_eq = int((accepted & (s_out != picked)).sum())
    bad_fin = int((~torch.isfinite(s_out)).sum())
    res.append(contract_result(cell, "contract:index", bad_range + bad_iff, B,
                               f"{bad_range} index out of [0, K], {bad_iff} rows where (index == K) != rejected"
                               if bad_range + bad_iff else "", layer))
    res.append(contract_result(cell, "contract:accepted-equals-child", bad_eq, B,
                               f"{bad_eq} accepted rows with s_out != s[index]" if bad_eq else "", layer))
    res.append(contract_result(cell, "contract:finite", bad_fin, B,
                               f"verifier returned non-finite s_out in {bad_fin} rows" if bad_fin else "", layer))
    return res, (s_out, accepted, index)


def _same(a: Any, b: Any) -> bool:
    return all(torch.is_tensor(x) and torch.is_tensor(y) and x.shape == y.shape and torch.equal(x, y)
               for x, y in zip(a, b))


def _cell_checks(verifier: Any, delta_value: float, K: int, n: int, device: torch.device,
                 seed: int) -> list[TestResult]:
    cell = f"delta={delta_value:g},K={K}"
    g = make_generator(seed, device)
    s = torch.randn(n, K, generator=g, dtype=torch.float64, device=device)
    delta = torch.full((n,), delta_value, dtype=torch.float64, device=device)
    s_before, delta_before = s.clone(), delta.clone()
    try:
        out = call_verify(verifier, delta, s, make_generator(seed + 1, device))
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a defect of the verifier, reported
        return [contract_result(cell, "contract:no-exception", 1, n, f"verify raised {type(exc).__name__}: {exc}")]
    res = [contract_result(cell, "contract:no-exception", 0, n)]
    checked, parsed = check_batch(cell, delta, s, out, "L0")
    res += checked
    mutated = not (torch.equal(s, s_before) and torch.equal(delta, delta_before))
    res.append(contract_result(cell, "contract:inputs-unchanged", int(mutated), n,
                               "verify modified its inputs (delta or s) in place" if mutated else ""))
    if parsed is None:
        return res
    try:
        return res + _repeat_checks(verifier, cell, delta, s, out, parsed, delta_value, K, n, device, seed)
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a later call that raises is a defect of the verifier too
        return res + [contract_result(cell, "contract:no-exception", 1, n,
                                      f"verify raised {type(exc).__name__} on a repeated call: {exc}")]


def _repeat_checks(verifier: Any, cell: str, delta: torch.Tensor, s: torch.Tensor, out: Any, parsed: tuple,
                   delta_value: float, K: int, n: int, device: torch.device, seed: int) -> list[TestResult]:
    """The checks that call ``verify`` again on the same inputs (same seed, another seed, None)."""
    res: list[TestResult] = []
    again = call_verify(verifier, delta.clone(), s.clone(), make_generator(seed + 1, device))
    same = _same(out, again)
    res.append(contract_result(cell, "contract:same-seed", 0 if same else 1, n,
                               "" if same else "two calls with the same generator seed gave different outputs"))
    acc_frac = float(parsed[1].double().mean())
    if delta_value > 0 and 0.05 <= acc_frac <= 0.95:  # the decision is random here: the seed must matter
        other = call_verify(verifier, delta.clone(), s.clone(), make_generator(seed + 2, device))
        differ = not _same(out, other)
        res.append(contract_result(cell, "contract:seed-used", 0 if differ else 1, n, "" if differ else
                                   "different generator seeds gave identical outputs (generator ignored?)"))
    try:
        none_out = call_verify(verifier, delta.clone(), s.clone(), None)
        problems = [p for p in [lazy_output_problem(none_out)] if p] or output_problems(none_out, n, K, s.dtype,
                                                                                         s.device)
        res.append(contract_result(cell, "contract:generator-none", len(problems), n,
                                   "; ".join(f"with generator=None: {p}" for p in problems)))
    except DeviceError:
        raise
    except Exception as exc:  # noqa: BLE001
        res.append(contract_result(cell, "contract:generator-none", 1, n, f"generator=None raised {exc!r}"))
    return res


def supports(verifier: Any, K: int) -> bool:
    """``verifier.supports_K(K)`` (True when absent or broken: a broken hook skips nothing)."""
    f = getattr(verifier, "supports_K", None)
    if f is None:
        return True
    try:
        return bool(f(K))
    except Exception:  # noqa: BLE001
        return True


def contract_checks(verifier: Any, *, device: str = "cpu", seed: int = 0, n: int = 256) -> list[TestResult]:
    """The deterministic contract checks on a few (delta, K) cells (layer L0 of the battery).

    ``verifier``: an object with ``verify`` (load specs with ``speccheck.verifiers.get``).
    Raises :class:`speccheck.errors.DeviceError` when the device fails (out of memory, bad
    index); anything else the verifier raises is a failed check.
    """
    dev = torch.device(device)
    out: list[TestResult] = []
    for delta_value, K in CONTRACT_CELLS:
        if supports(verifier, K):
            out += _cell_checks(verifier, delta_value, K, n, dev, unit_seed(seed, "contract", K, str(delta_value)))
    return out
