"""The plain (non-speculative) churn sampler: the target chain of SPEC section 3, one call per step.

    from speccheck import sample
    res = sample(target, schedule, 1000, generator=0)     # res.samples [1000, d], res.nfe

Step n: Y_{n+1} = m^q_n(Y_n) + sigma_n xi_n, m^q_n(y) = a_n y + c_n v_{t_n}(y), xi_n ~ N(0, I)
(a stochastic step, one target call counted in ``nfe``), or the Euler step Y_{n+1} = Y_n -
gamma_n v_{t_n}(Y_n) where sigma_n = 0 (one call counted in ``det_calls``) -- the NFE accounting
of :class:`~speccheck.sampler.core.SpeculativeSampler`, whose speed-up is ``n_stochastic / nfe``
(1 here). Y_0 ~ N(0, I) is drawn from the generator first (unless ``x0`` is given), then one
normal draw per stochastic step, all on the generator's device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from speccheck.errors import InputError
from speccheck.seeding import torch_threads
from speccheck.targets.schedules import Schedule

__all__ = ["PlainResult", "sample"]


@dataclass
class PlainResult:
    """Output of :func:`sample`: ``samples`` [n, *state_shape] final states Y_N;
    ``trajectories`` [n, N + 1, *state_shape] (Y_0..Y_N) if asked for, else None; ``nfe``
    target calls per trajectory on the stochastic part (= ``n_stochastic``); ``det_calls``
    Euler-step calls per trajectory; ``batch_calls`` calls the whole batch made; ``protocol``
    the schedule's description."""

    samples: torch.Tensor
    nfe: int
    det_calls: int
    n_stochastic: int
    batch_calls: int
    protocol: dict
    trajectories: Optional[torch.Tensor] = None

    @property
    def speedup(self) -> float:
        """Stochastic steps / stochastic-part target calls (1 for the plain sampler)."""
        return self.n_stochastic / self.nfe if self.nfe else 1.0


def _generator(generator: Union[torch.Generator, int], device: Optional[Union[str, torch.device]]
               ) -> torch.Generator:
    """``generator`` itself, or a fresh one seeded with the integer ``generator`` on ``device``."""
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, int) or not 0 <= generator < 2**63:
        raise InputError(f"generator must be a torch.Generator or an integer seed in [0, 2^63), got {generator!r}")
    from speccheck.seeding import generator as make_generator

    return make_generator(generator, "cpu" if device is None else device)


def _initial_states(target: object, n: int, gen: torch.Generator, device: torch.device,
                    x0: Optional[torch.Tensor]) -> torch.Tensor:
    shape = tuple(getattr(target, "state_shape", ()))
    if x0 is None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"n must be an integer >= 1, got n={n!r}")
        if not shape:
            raise InputError("target must have a state_shape (or pass x0)")
        dtype = getattr(target, "dtype", torch.float64)
        return torch.randn(n, *shape, generator=gen, dtype=dtype, device=device)
    if not isinstance(x0, torch.Tensor) or not x0.is_floating_point() or x0.dim() < 2 or x0.shape[0] != n:
        raise InputError(f"x0 must be None or a floating-point tensor [n={n}, *state_shape], got "
                         f"{getattr(x0, 'shape', type(x0).__name__)}")
    if shape and tuple(x0.shape[1:]) != shape:
        raise InputError(f"x0 must have shape [{n}, {', '.join(map(str, shape))}], got {tuple(x0.shape)}")
    return x0.to(device).clone()


def sample(target: object, schedule: Schedule, n: int, *, generator: Union[torch.Generator, int],
           return_trajectories: bool = False, device: Optional[Union[str, torch.device]] = None,
           x0: Optional[torch.Tensor] = None, cond: Optional[torch.Tensor] = None,
           threads: Optional[int] = 1) -> PlainResult:
    """Draw ``n`` samples with the plain churn sampler (no speculation; module docstring).

    ``target``: a VelocityModel (``velocity(x, t, cond)``, ``state_shape``); ``schedule``: a
    :class:`~speccheck.targets.schedules.Schedule`; ``generator``: a torch.Generator (its device
    is the run's device) or an integer seed (a generator on ``device``, default CPU);
    ``return_trajectories``: also keep every state (memory n x (N + 1) x state size); ``x0``:
    starting states instead of drawing them; ``cond``: [n] conditioning passed to the target;
    ``threads``: torch (and BLAS) CPU threads during the call, the caller's restored after (None:
    leave them as they are).
    Bad input raises :class:`~speccheck.errors.InputError` (or DeviceError for a generator on
    another device than ``device``)."""
    from speccheck.sampler.core import _check_generator

    if not isinstance(schedule, Schedule):
        raise InputError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    if not callable(getattr(target, "velocity", None)):
        raise InputError(f"target must have a velocity(x, t, cond) method, got {type(target).__name__}")
    if not isinstance(return_trajectories, bool):
        raise InputError(f"return_trajectories must be True or False, got {return_trajectories!r}")
    gen = _generator(generator, device)
    run_device = torch.device(gen.device) if device is None else torch.device(device)
    _check_generator(gen, run_device)
    if cond is not None and (not isinstance(cond, torch.Tensor) or cond.shape[:1] != (n,)):
        raise InputError(f"cond must be None or a tensor of n={n} rows, got {getattr(cond, 'shape', cond)!r}")
    with torch_threads(threads):
        x = _initial_states(target, n, gen, run_device, x0)
        return _run_plain(target, schedule, x, gen, run_device, cond, return_trajectories)


def _run_plain(target: object, schedule: Schedule, x: torch.Tensor, gen: torch.Generator, run_device: torch.device,
               cond: Optional[torch.Tensor], return_trajectories: bool) -> PlainResult:
    trajectories = None
    if return_trajectories:
        trajectories = x.new_empty(x.shape[0], schedule.N + 1, *x.shape[1:])
        trajectories[:, 0] = x
    time = torch.tensor(schedule.t, dtype=x.dtype, device=run_device)
    for step in range(schedule.N):
        velocity = target.velocity(x, time[step].expand(x.shape[0]), cond)
        if schedule.stochastic[step]:
            noise = torch.randn(x.shape, generator=gen, dtype=x.dtype, device=run_device)
            x = float(schedule.a[step]) * x + float(schedule.c[step]) * velocity + float(schedule.sigma[step]) * noise
        else:
            x = x - float(schedule.gamma[step]) * velocity
        if trajectories is not None:
            trajectories[:, step + 1] = x
    n_sto = schedule.n_stochastic
    return PlainResult(samples=x, nfe=n_sto, det_calls=schedule.N - n_sto, n_stochastic=n_sto,
                       batch_calls=schedule.N, protocol={"sampler": "plain", "schedule": schedule.describe()},
                       trajectories=trajectories)
