"""Time grids and the churn sampler's transition kernel (SPEC section 3).

Linear path x_t = (1 - t) x_0 + t xi (t = 0 data, t = 1 noise). A grid is t_0 > t_1 > ... > t_N
(N steps, gamma_n = t_n - t_{n+1} > 0). With churn eps the target transition of step n is
N(m^q_n(x), sigma_n^2 I) with

    m^q_n(x) = a_n x + c_n v_{t_n}(x),  a_n = 1 - gamma_n eps^2 / (1 - t_n),
                                        c_n = -gamma_n (1 + eps^2),
    sigma_n  = eps sqrt(2 gamma_n t_n / (1 - t_n)).

A step is *deterministic* (plain Euler x - gamma_n v, sigma_n = 0, never speculated) when
eps = 0, when t_n = 1 (g diverges) or, if ``deterministic_terminal``, when t_{n+1} = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from speccheck.errors import InputError


@dataclass(frozen=True)
class Schedule:
    """An explicit time grid plus churn.

    t: float64 array (N + 1,), strictly decreasing, in [0, 1]. eps: churn in [0, 1].
    Derived arrays (shape (N,)): gamma, a, c, sigma, stochastic (bool).
    """

    t: np.ndarray
    eps: float
    name: str = "custom"
    deterministic_terminal: bool = True
    gamma: np.ndarray = field(init=False, repr=False)
    a: np.ndarray = field(init=False, repr=False)
    c: np.ndarray = field(init=False, repr=False)
    sigma: np.ndarray = field(init=False, repr=False)
    stochastic: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        t = np.asarray(self.t, dtype=np.float64)
        if t.ndim != 1 or t.size < 2:
            raise InputError(f"t must be a 1-d grid with at least 2 points, got shape {t.shape}")
        if not np.all(np.isfinite(t)) or t.min() < 0.0 or t.max() > 1.0:
            raise InputError(f"t must lie in [0, 1], got range [{t.min()}, {t.max()}]")
        gamma = t[:-1] - t[1:]
        if np.any(gamma <= 0):
            raise InputError("t must be strictly decreasing (gamma_n = t_n - t_{n+1} > 0)")
        eps = float(self.eps)
        if not np.isfinite(eps) or eps < 0.0 or eps > 1.0:
            raise InputError(f"eps must be in [0, 1], got {self.eps!r}")
        tn = t[:-1]
        stoch = (eps > 0) & (tn < 1.0)
        if self.deterministic_terminal:
            stoch &= t[1:] > 0.0
        one_minus = np.where(stoch, 1.0 - tn, 1.0)
        a = np.where(stoch, 1.0 - gamma * eps**2 / one_minus, 1.0)
        c = np.where(stoch, -gamma * (1.0 + eps**2), -gamma)
        sigma = np.where(stoch, eps * np.sqrt(2.0 * gamma * tn / one_minus), 0.0)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "eps", eps)
        object.__setattr__(self, "gamma", gamma)
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "c", c)
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "stochastic", stoch)

    @property
    def N(self) -> int:
        """Number of steps."""
        return int(self.t.size - 1)

    @property
    def n_stochastic(self) -> int:
        return int(self.stochastic.sum())

    def block_end(self) -> np.ndarray:
        """end[n] (shape (N,)): first index m > n with step m deterministic (or N); a round
        rooted at a stochastic step n has horizon L_n = min(L, end[n] - n)."""
        end = np.empty(self.N, dtype=np.int64)
        nxt = self.N
        for n in range(self.N - 1, -1, -1):
            end[n] = nxt
            if not self.stochastic[n]:
                nxt = n
        # for a stochastic n, end[n] is the first deterministic index after n
        return end

    def with_eps(self, eps: float) -> "Schedule":
        return Schedule(self.t, eps, self.name, self.deterministic_terminal)

    def describe(self) -> dict:
        """JSON-friendly summary (recorded with every result)."""
        return {
            "grid": self.name,
            "N": self.N,
            "eps": self.eps,
            "t_first": float(self.t[0]),
            "t_last": float(self.t[-1]),
            "n_stochastic": self.n_stochastic,
            "n_deterministic": self.N - self.n_stochastic,
            "deterministic_terminal": self.deterministic_terminal,
        }


def shift_times(t: np.ndarray, k: float) -> np.ndarray:
    """Timestep shift t -> k t / (1 + (k - 1) t) (SD3 uses k = 3); k = 1 is the identity."""
    if not np.isfinite(k) or k <= 0:
        raise InputError(f"shift k must be > 0, got {k!r}")
    t = np.asarray(t, dtype=np.float64)
    return k * t / (1.0 + (k - 1.0) * t)


def uniform(N: int, eps: float, t_start: float = 0.999, t_end: float = 0.001) -> Schedule:
    """N equal steps from t_start down to t_end (kept away from t = 1 and t = 0 by default,
    so every step is stochastic when eps > 0)."""
    _check_N(N)
    if not (0.0 <= t_end < t_start <= 1.0):
        raise InputError(f"need 0 <= t_end < t_start <= 1, got t_start={t_start}, t_end={t_end}")
    return Schedule(np.linspace(t_start, t_end, N + 1), eps, f"uniform[{t_start},{t_end}]")


def shifted(N: int, eps: float, k: float, t_start: float = 0.999, t_end: float = 0.001) -> Schedule:
    """The uniform grid passed through the timestep shift with parameter k (non-uniform steps)."""
    base = uniform(N, eps, t_start, t_end)
    return Schedule(shift_times(base.t, k), eps, f"shifted(k={k})[{t_start},{t_end}]")


def flow_matching(N: int, eps: float, shift: float = 1.0) -> Schedule:
    """diffusers' FlowMatchEulerDiscreteScheduler grid (1000 train steps, no dynamic shifting):
    at its defaults (shift = 1) t_i = linspace(1000, 1, N)[i] / 1000, plus a terminal t = 0
    (N steps). With shift k it reproduces diffusers' set_timesteps: the linspace runs from 1 to
    the *shifted* smallest training sigma k(1/1000) and is then shifted again.
    Its first step (t = 1) and last step (to t = 0) are deterministic."""
    _check_N(N)
    t_min = float(shift_times(np.array(1.0 / 1000.0), shift))
    t = np.linspace(1.0, t_min, N)
    t = shift_times(t, shift)
    return Schedule(np.append(t, 0.0), eps, f"flow(shift={shift})")


def edm(N: int, eps: float, sigma_min: float = 0.002, sigma_max: float = 80.0, rho: float = 7.0) -> Schedule:
    """EDM-style grid: varsigma_i = (smax^(1/rho) + i/(N-1) (smin^(1/rho) - smax^(1/rho)))^rho,
    i = 0..N-1, mapped to t = varsigma / (1 + varsigma), plus a terminal t = 0."""
    _check_N(N)
    if not (0 < sigma_min < sigma_max) or rho <= 0:
        raise InputError(f"need 0 < sigma_min < sigma_max and rho > 0, got {sigma_min}, {sigma_max}, {rho}")
    i = np.arange(N, dtype=np.float64) / max(N - 1, 1)
    vs = (sigma_max ** (1 / rho) + i * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
    t = vs / (1.0 + vs)
    return Schedule(np.append(t, 0.0), eps, f"edm(rho={rho})")


GRIDS = ("uniform", "shifted", "flow", "edm")


def make_schedule(kind: str, N: int, eps: float, **kw: float) -> Schedule:
    """By name: 'uniform', 'shifted' (kw k), 'flow' (kw shift), 'edm'."""
    table = {"uniform": uniform, "shifted": shifted, "flow": flow_matching, "edm": edm}
    if kind not in table:
        raise InputError(f"unknown grid {kind!r}; choose from {sorted(table)}")
    return table[kind](N, eps, **kw)


def _check_N(N: int) -> None:
    if not isinstance(N, (int, np.integer)) or N < 1:
        raise InputError(f"N must be an integer >= 1, got {N!r}")
