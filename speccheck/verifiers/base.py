"""The verifier contract (``docs/contract.md``) and the input and output checks every kernel shares.

A verifier is any object with ``name: str`` and

    verify(delta: Tensor[B], s: Tensor[B, K], generator) -> (s_out[B], accepted[B], index[B])

with ``s_out ~ N(delta, 1)`` exactly when ``s[b, :]`` are i.i.d. N(0, 1); ``accepted[b]``
implies ``s_out[b] == s[b, index[b]]``; ``index[b] == K`` iff not accepted.
:class:`ScalarVerifier` is a convenience base class for the built-in rules: it validates the
inputs, works in float64 on the inputs' device, handles delta = 0 (accept the first child,
as P = Q there) and checks the kernel's output shapes.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

Tensor = torch.Tensor
VerifyResult = tuple[Tensor, Tensor, Tensor]

@runtime_checkable
class Verifier(Protocol):
    """Structural type of a verifier (``docs/contract.md``)."""

    name: str

    def verify(self, delta: Tensor, s: Tensor, generator: torch.Generator | None = None) -> VerifyResult:
        ...


def _float_tensor(x, name: str, device=None) -> Tensor:
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x, dtype=np.float64), device=device)
    if not torch.is_floating_point(x):
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_verify_inputs(delta: Any, s: Any) -> tuple[Tensor, Tensor]:
    """Validate ``(delta, s)`` for a scalar kernel; return them as float64 tensors on s's device.

    ``s``: floating tensor [B, K] with K >= 1, finite.  ``delta``: [B] (or a scalar, broadcast),
    finite and >= 0, floating.  Raises ValueError naming the argument and value.
    """
    s = _float_tensor(s, "s")
    if s.dim() != 2:
        raise ValueError(f"s must have shape [B, K], got shape {tuple(s.shape)}")
    B, K = s.shape
    if K < 1:
        raise ValueError(f"K must be >= 1 (s has shape {tuple(s.shape)})")
    delta = _float_tensor(delta, "delta", device=s.device)
    if delta.dim() == 0:
        delta = delta.expand(B)
    if delta.shape != (B,):
        raise ValueError(f"delta must have shape [B] = [{B}] to match s {tuple(s.shape)}, got {tuple(delta.shape)}")
    if delta.device != s.device:
        raise ValueError(f"delta is on {delta.device} but s is on {s.device}")
    delta = delta.to(torch.float64)
    s64 = s.to(torch.float64)
    if B:
        if not bool(delta.min() >= 0) or not bool(torch.isfinite(delta.max())):
            bad = ~torch.isfinite(delta) | (delta < 0)
            value = float(delta[bad][0])
            raise ValueError(f"delta must be finite and >= 0, got delta={value!r}")
        # one reduction: a NaN or inf entry makes the sum non-finite (overflow is re-checked)
        if not bool(torch.isfinite(s64.sum())) and not bool(torch.isfinite(s64).all()):
            raise ValueError("s must be finite (found NaN or inf)")
    return delta, s64


#: index dtypes a verifier may return (normalised to int64 by :func:`normalize_verify_outputs`)
INDEX_DTYPES = (torch.int64, torch.int32)


def output_problems(result: Any, B: int, K: int, input_dtype: torch.dtype = torch.float64,
                    device: torch.device | None = None) -> list[str]:
    """The ONE output rule (used by :func:`check_verify_outputs` and the battery's contract layer).

    ``verify`` returns a tuple ``(s_out, accepted, index)`` of tensors of shape [B] on the
    inputs' device with: ``s_out`` floating-point, at least as precise as the input ``s``
    (``input_dtype``; it is compared with ``s`` after a cast to that dtype); ``accepted``
    torch.bool; ``index`` torch.int64 or torch.int32. Returns the violations (empty: OK).
    Values (index range, accepted => s_out == s[index], finiteness) are checked elsewhere.
    """
    try:
        s_out, accepted, index = result
    except (TypeError, ValueError):
        return [f"verify must return a tuple (s_out, accepted, index), got {type(result).__name__}"]
    problems = []
    for label, t in (("s_out", s_out), ("accepted", accepted), ("index", index)):
        if not isinstance(t, torch.Tensor):
            problems.append(f"{label} is {type(t).__name__}, not a torch.Tensor")
        elif tuple(t.shape) != (B,):
            problems.append(f"{label} has shape {tuple(t.shape)}, expected ({B},)")
        elif device is not None and t.device != torch.device(device):
            problems.append(f"{label} is on {t.device}, the inputs on {device}")
    if problems:
        return problems
    if not torch.is_floating_point(s_out):
        problems.append(f"s_out dtype {s_out.dtype} is not floating-point")
    elif torch.finfo(s_out.dtype).bits < torch.finfo(input_dtype).bits:
        problems.append(f"s_out dtype {s_out.dtype} is less precise than the input s ({input_dtype})")
    if accepted.dtype != torch.bool:
        problems.append(f"accepted dtype {accepted.dtype} (expected torch.bool)")
    if index.dtype not in INDEX_DTYPES:
        problems.append(f"index dtype {index.dtype} (expected torch.int64 or torch.int32)")
    return problems


def normalize_verify_outputs(result: Any, input_dtype: torch.dtype) -> VerifyResult:
    """(s_out in ``input_dtype``, accepted, index as int64) of an output that passed :func:`output_problems`."""
    s_out, accepted, index = result
    return s_out.to(input_dtype), accepted, index.to(torch.long)


def check_verify_outputs(result: Any, B: int, K: int, name: str,
                         input_dtype: torch.dtype = torch.float64) -> VerifyResult:
    """Check a kernel's output by :func:`output_problems` (ValueError naming the verifier) and
    return it normalised (s_out in ``input_dtype``, index int64)."""
    problems = output_problems(result, B, K, input_dtype)
    if problems:
        raise ValueError(f"verifier {name!r}: " + "; ".join(problems))
    return normalize_verify_outputs(result, input_dtype)


class ScalarVerifier:
    """Base class for built-in kernels: subclasses implement ``_kernel(delta, s, generator)``.

    ``_kernel`` gets float64 ``delta[B] >= 0`` and ``s[B, K]`` and returns
    ``(s_out, accepted, index)``. Rows with delta == 0 are overridden to accept child 0.
    """

    name: str = "scalar"
    description: str = ""

    def supports_K(self, K: int) -> bool:
        return K >= 1

    def acceptance(self, delta: Any, K: int) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _kernel(self, delta: Tensor, s: Tensor, generator: torch.Generator | None) -> VerifyResult:
        raise NotImplementedError

    def verify(self, delta: Any, s: Any, generator: torch.Generator | None = None) -> VerifyResult:
        """Scalar verification; see the module docstring and ``docs/contract.md`` for the contract."""
        in_dtype = s.dtype if isinstance(s, torch.Tensor) and torch.is_floating_point(s) else torch.float64
        delta, s64 = check_verify_inputs(delta, s)
        B, K = s64.shape
        if not self.supports_K(K):
            raise ValueError(f"verifier {self.name!r} does not support K={K}")
        if B == 0:
            return (s64.new_empty(0).to(in_dtype), torch.zeros(0, dtype=torch.bool, device=s64.device),
                    torch.zeros(0, dtype=torch.long, device=s64.device))
        s_out, accepted, index = self._kernel(delta, s64, generator)
        zero = delta == 0
        if bool(zero.any()):
            s_out = torch.where(zero, s64[:, 0], s_out)
            accepted = accepted | zero
            index = torch.where(zero, torch.zeros_like(index), index)
        return s_out.to(in_dtype), accepted, index

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def uniform(shape: Any, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """U(0, 1) float64 samples of ``shape`` on ``like``'s device, from ``generator``."""
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=like.device)


def positive_uniform(shape: Any, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """U(0, 1] samples (1 - rand): never 0, so their logarithm is finite."""
    return 1.0 - uniform(shape, like, generator)


def first_true(mask: Tensor) -> tuple[Tensor, Tensor]:
    """For a bool [B, K] mask: (any[B], index of the first True, K where none)."""
    K = mask.shape[1]
    anyv = mask.any(dim=1)
    idx = torch.argmax(mask.to(torch.uint8), dim=1)
    return anyv, torch.where(anyv, idx, torch.full_like(idx, K))


def group_deltas(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(distinct deltas [U], group of each row [B]); a constant batch costs no sort."""
    if bool((delta == delta[0]).all()):
        return delta[:1], torch.zeros(delta.shape[0], dtype=torch.long, device=delta.device)
    u, inv = torch.unique(delta, return_inverse=True)
    return u, inv


def couple_selected(sel: Tensor, index: Tensor, h: Tensor, K: int,
                    generator: torch.Generator | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Maximal coupling of a selected draft with the target: accept w.p. min(1, exp(h)),
    h = log q(sel) - log p(sel) (log space, so no overflow at large delta).

    Returns (s_out = a copy of sel, accepted, index with K where rejected, rejected rows);
    the caller fills s_out[rejected] from the residual (q - p)_+.
    """
    accepted = torch.log(positive_uniform(sel.shape, sel, generator)) <= h
    index = torch.where(accepted, index, torch.full_like(index, K))
    return sel.clone(), accepted, index, torch.nonzero(~accepted, as_tuple=True)[0]
