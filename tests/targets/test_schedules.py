"""Time grids and the churn kernel coefficients (SPEC section 3). Deterministic checks."""

import numpy as np
import pytest

from speccheck.targets.schedules import Schedule, edm, flow_matching, make_schedule, shift_times, shifted, uniform


def test_flow_grid_matches_diffusers_defaults():
    diffusers = pytest.importorskip("diffusers")
    for T in (10, 30, 50):
        sch = diffusers.FlowMatchEulerDiscreteScheduler()
        sch.set_timesteps(T)
        ours = flow_matching(T, 0.06)
        assert ours.N == T
        np.testing.assert_allclose(ours.t, sch.sigmas.double().numpy(), atol=1e-6)  # diffusers is float32
    s3 = diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0)
    s3.set_timesteps(50)
    np.testing.assert_allclose(flow_matching(50, 0.8, shift=3.0).t, s3.sigmas.double().numpy(), atol=1e-6)


def test_flow_grid_deterministic_ends():
    s = flow_matching(30, 0.06)
    assert s.t[0] == 1.0 and s.t[-1] == 0.0
    assert not s.stochastic[0] and not s.stochastic[-1]
    assert s.n_stochastic == 28
    assert s.sigma[0] == 0 and s.sigma[-1] == 0
    np.testing.assert_allclose(s.c[0], -s.gamma[0])  # plain Euler
    assert s.block_end()[1] == 29


def test_kernel_coefficients():
    eps = 0.3
    s = uniform(12, eps, 0.95, 0.05)
    t, g = s.t[:-1], s.gamma
    np.testing.assert_allclose(g, 0.9 / 12)
    np.testing.assert_allclose(s.sigma, eps * np.sqrt(2 * g * t / (1 - t)))
    np.testing.assert_allclose(s.a, 1 - g * eps**2 / (1 - t))
    np.testing.assert_allclose(s.c, -g * (1 + eps**2))
    assert s.stochastic.all() and s.block_end()[0] == 12
    z = s.with_eps(0.0)
    assert not z.stochastic.any() and np.all(z.sigma == 0)


def test_shift_and_edm():
    t = np.linspace(0.01, 0.99, 7)
    np.testing.assert_allclose(shift_times(t, 3.0), 3 * t / (1 + 2 * t))
    np.testing.assert_allclose(shift_times(t, 1.0), t)
    sh = shifted(20, 0.1, 3.0)
    assert np.all(np.diff(sh.t) < 0) and not np.allclose(np.diff(sh.t), np.diff(sh.t)[0])
    e = edm(18, 0.1)
    vs = e.t[:-1] / (1 - e.t[:-1])
    np.testing.assert_allclose([vs[0], vs[-1]], [80.0, 0.002], rtol=1e-10)
    assert e.t[-1] == 0 and e.stochastic[:-1].all() and not e.stochastic[-1]
    assert make_schedule("flow", 5, 0.1).name.startswith("flow")


@pytest.mark.parametrize("bad", [
    lambda: Schedule(np.array([0.5, 0.6]), 0.1),
    lambda: Schedule(np.array([1.2, 0.5]), 0.1),
    lambda: Schedule(np.array([0.9, 0.5]), -0.1),
    lambda: Schedule(np.array([0.9, 0.5]), float("nan")),
    lambda: uniform(0, 0.1),
    lambda: shift_times([0.5], 0.0),
    lambda: make_schedule("cosine", 10, 0.1),
])
def test_bad_input(bad):
    with pytest.raises(ValueError):
        bad()
