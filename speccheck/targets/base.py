"""The protocol every drift provider implements (SPEC section 3).

Linear path x_t = (1 - t) x_0 + t xi, t = 0 data, t = 1 noise. A target gives the velocity
v_t(x) = E[xi - x_0 | x_t = x]; the denoised estimate is x0_hat = x - t v_t(x).
One call of :meth:`velocity` on any number of rows is ONE target evaluation (NFE): the sampler
batches every tree node of every live trajectory into a single call.
"""

from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

import torch

from speccheck.errors import InputError


@runtime_checkable
class VelocityModel(Protocol):
    """state_shape: shape of one state (e.g. (500,) or (3, 32, 32)); dtype/device of the model."""

    state_shape: tuple[int, ...]

    def velocity(
        self, x: torch.Tensor, t: torch.Tensor, cond: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """v_t(x) for rows x: [R, *state_shape], t: [R] in (0, 1], cond: [R] (class label or
        prompt index per row, or None). Returns [R, *state_shape]."""
        ...


def check_rows(x: torch.Tensor, t: torch.Tensor, state_shape: tuple[int, ...], *, t_in_unit: bool = False) -> None:
    """Inputs of one velocity call: x [R, *state_shape], t [R] (and, if ``t_in_unit``, every t in
    (0, 1]: one host sync). InputError naming x or t otherwise."""
    if tuple(x.shape[1:]) != tuple(state_shape):
        raise InputError(f"x must have shape [R, {', '.join(map(str, state_shape))}], got {tuple(x.shape)}")
    if t.shape != (x.shape[0],):
        raise InputError(f"t must have shape [{x.shape[0]}], got {tuple(t.shape)}")
    if t_in_unit and not bool(torch.all((t > 0) & (t <= 1))):
        raise InputError(f"t must lie in (0, 1], got t in [{t.min().item()}, {t.max().item()}]")


def denoised_from_velocity(x: torch.Tensor, t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """x0_hat = E[x_0 | x_t = x] = x - t v_t(x); t: [R] broadcast over the state dims."""
    return x - t.reshape(-1, *([1] * (x.dim() - 1))) * v
