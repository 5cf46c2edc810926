"""The trajectory layer of the battery: exact samplers pass, the 4 sampler mutants are killed.

run_trajectory_checks runs at total false-failure rate alpha = 1e-3 (Bonferroni inside), so each
"passes" assertion fails spuriously with probability <= 1e-3; kills are asserted with fixed seeds."""

import pytest

from speccheck.validation.sampler_mutants import SAMPLER_MUTANTS
from speccheck.validation.trajectory import failed, run_trajectory_checks


@pytest.mark.parametrize("rule", ["rmc", "dgrs", "rass"])
def test_exact_samplers_pass(rule):
    res = run_trajectory_checks(rule, n_traj=300, seed=2, alpha=1e-3)
    names = {r.name.split(" ")[0].split("(")[0] for r in res}
    assert {"innovation", "chain-law"} <= names and len(res) > 40
    assert not failed(res), [(r.name, r.p_value) for r in failed(res)]


@pytest.mark.parametrize("mutant", sorted(SAMPLER_MUTANTS))
@pytest.mark.parametrize("rule", ["rmc", "dgrs"])
def test_mutants_killed(mutant, rule):
    res = run_trajectory_checks(rule, n_traj=300, seed=2, alpha=1e-3, sampler_factory=SAMPLER_MUTANTS[mutant])
    assert failed(res), f"mutant {mutant} survived with {rule}"


def test_eager_mode_checks_pass_and_kill():
    assert not failed(run_trajectory_checks("dgrs", n_traj=200, seed=4, alpha=1e-3, lazy=False))
    assert failed(run_trajectory_checks("dgrs", n_traj=200, seed=4, alpha=1e-3, lazy=False,
                                        sampler_factory=SAMPLER_MUTANTS["wrong-draft-parent"]))


def test_bad_arguments():
    with pytest.raises(ValueError):
        run_trajectory_checks("dgrs", n_traj=5)
    with pytest.raises(ValueError):
        run_trajectory_checks("dgrs", alpha=0.0)


def test_innovation_tests_refuse_malformed_innovations():
    """innovation_tests judges arrays sent from another process: empty, misshapen, non-finite or
    out-of-range inputs are ValueError, never a division by zero or a silent pass."""
    import numpy as np

    from speccheck.validation.trajectory import innovation_tests

    rng = np.random.default_rng(0)
    good = {"xi": rng.standard_normal((30, 4, 3)), "depth": np.ones((30, 4), dtype=np.int64),
            "proj_state": rng.standard_normal((30, 4)), "proj_velocity": rng.standard_normal((30, 4))}
    assert innovation_tests(good, alpha=1e-3, shape=(30, 4), max_depth=2)
    for bad, pattern in [({"xi": good["xi"][:, :, :0]}, "expected"), ({"xi": np.zeros((0, 0, 0))}, "expected"),
                         ({"depth": good["depth"] + 5}, "commit depths outside"),
                         ({"depth": good["depth"][:, :2]}, "expected xi")]:
        with pytest.raises(ValueError, match=pattern):
            innovation_tests({**good, **bad}, alpha=1e-3, shape=(30, 4), max_depth=2)
    with pytest.raises(ValueError, match="expected .30, 5, d."):
        innovation_tests(good, alpha=1e-3, shape=(30, 5))


def test_non_finite_innovations_are_the_runs_defect():
    """A trajectory that left the reals (a verifier that diverges) is a failed test of the run, not
    malformed evidence: "finite values" fails with the number of such trajectories, the other
    tests judge the rest."""
    import numpy as np

    from speccheck.validation.trajectory import innovation_tests

    rng = np.random.default_rng(0)
    good = {"xi": rng.standard_normal((30, 4, 3)), "depth": np.ones((30, 4), dtype=np.int64),
            "proj_state": rng.standard_normal((30, 4)), "proj_velocity": rng.standard_normal((30, 4))}
    xi = good["xi"].copy()
    xi[3, 1, 0], xi[7, 2, 2] = np.inf, np.nan
    proj_state = good["proj_state"].copy()
    proj_state[9, 0] = np.nan
    results = innovation_tests({**good, "xi": xi, "proj_state": proj_state}, alpha=1e-3, shape=(30, 4))
    finite = [r for r in results if r.test == "innovation finite values"]
    assert len(finite) == 1 and not finite[0].passed and finite[0].statistic == 3
    others = [r for r in results if r.test != "innovation finite values"]
    assert others and all(r.passed and r.n == 27 * 4 for r in others if r.cell.endswith("[all]"))
    every = innovation_tests({**good, "xi": np.full_like(xi, np.nan)}, alpha=1e-3)
    assert [r.test for r in every] == ["innovation finite values"] and every[0].statistic == 30
