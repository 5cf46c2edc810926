"""The verifier contract (SPEC section 4) and the input checks every kernel shares.

A verifier is any object with ``name: str`` and

    verify(delta: Tensor[B], s: Tensor[B, K], generator) -> (s_out[B], accepted[B], index[B])

with ``s_out ~ N(delta, 1)`` exactly when ``s[b, :]`` are i.i.d. N(0, 1); ``accepted[b]``
implies ``s_out[b] == s[b, index[b]]``; ``index[b] == K`` iff not accepted.
:class:`ScalarVerifier` is a convenience base class for the built-in rules: it validates the
inputs, works in float64 on the inputs' device, handles delta = 0 (accept the first child,
as P = Q there) and checks the kernel's output shapes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

Tensor = torch.Tensor
VerifyResult = tuple[Tensor, Tensor, Tensor]

# Largest displacement the built-in kernels are validated for (SPEC section 1: delta in [0, 40]).
DELTA_MAX = 40.0


@runtime_checkable
class Verifier(Protocol):
    """Structural type of a verifier (SPEC section 4)."""

    name: str

    def verify(self, delta: Tensor, s: Tensor, generator: torch.Generator | None = None) -> VerifyResult:
        ...


def _float_tensor(x, name: str, device=None) -> Tensor:
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x, dtype=np.float64), device=device)
    if not torch.is_floating_point(x):
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_verify_inputs(delta, s) -> tuple[Tensor, Tensor]:
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


def check_K(K) -> int:
    """Return K as an int >= 1 or raise ValueError."""
    if isinstance(K, bool) or int(K) != K or int(K) < 1:
        raise ValueError(f"K must be an integer >= 1, got K={K!r}")
    return int(K)


def check_verify_outputs(result, B: int, K: int, name: str) -> VerifyResult:
    """Check a kernel's output shapes and dtypes (used by verify_states and the registry tests)."""
    try:
        s_out, accepted, index = result
    except (TypeError, ValueError):
        raise ValueError(f"verifier {name!r} must return (s_out, accepted, index), got {type(result).__name__}")
    for label, t, shape in (("s_out", s_out, (B,)), ("accepted", accepted, (B,)), ("index", index, (B,))):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"verifier {name!r}: {label} must be a tensor of shape {shape}, got {got}")
    if accepted.dtype != torch.bool:
        raise ValueError(f"verifier {name!r}: accepted must be a bool tensor, got {accepted.dtype}")
    if index.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"verifier {name!r}: index must be an integer tensor, got {index.dtype}")
    return s_out, accepted, index.long()


class ScalarVerifier:
    """Base class for built-in kernels: subclasses implement ``_kernel(delta, s, generator)``.

    ``_kernel`` gets float64 ``delta[B] >= 0`` and ``s[B, K]`` and returns
    ``(s_out, accepted, index)``. Rows with delta == 0 are overridden to accept child 0.
    """

    name: str = "scalar"
    description: str = ""

    def supports_K(self, K: int) -> bool:
        return K >= 1

    def acceptance(self, delta, K: int) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _kernel(self, delta: Tensor, s: Tensor, generator: torch.Generator | None) -> VerifyResult:
        raise NotImplementedError

    def verify(self, delta, s, generator: torch.Generator | None = None) -> VerifyResult:
        """Scalar verification (SPEC section 4); see the module docstring for the contract."""
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


def uniform(shape, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """U(0, 1) float64 samples of ``shape`` on ``like``'s device, from ``generator``."""
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=like.device)


def positive_uniform(shape, like: Tensor, generator: torch.Generator | None) -> Tensor:
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


def couple_selected(sel: Tensor, index: Tensor, h: Tensor, K: int, generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Maximal coupling of a selected draft with the target: accept w.p. min(1, exp(h)),
    h = log q(sel) - log p(sel) (log space, so no overflow at large delta).

    Returns (s_out = a copy of sel, accepted, index with K where rejected, rejected rows);
    the caller fills s_out[rejected] from the residual (q - p)_+.
    """
    accepted = torch.log(positive_uniform(sel.shape, sel, generator)) <= h
    index = torch.where(accepted, index, torch.full_like(index, K))
    return sel.clone(), accepted, index, torch.nonzero(~accepted, as_tuple=True)[0]
