"""End-to-end harness: the paired energy-distance test, a small run on the shipped digits EDM model
(calibration, predicted NFE, exactness) and a broken sampler caught on it.

False-failure rates are stated per test; all seeds are fixed."""

from __future__ import annotations

import math
import os

import pytest
import torch

pytest.importorskip("sklearn")

from speccheck.cli import main  # noqa: E402
from speccheck.errors import InputError  # noqa: E402
from speccheck.validation import e2e  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")



def test_energy_distance_test_level_and_power():
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(150, 4, generator=g)
    # H0: X_i, Y_i i.i.d. given a shared x0 -> pairs exchangeable; a valid permutation test has
    # P(p < 1e-3) <= 1e-3 (false-failure rate 1e-3).
    X = x0 + torch.randn(150, 4, generator=g)
    Y = x0 + torch.randn(150, 4, generator=g)
    h0 = e2e.energy_distance_test(X, Y, 999, torch.Generator().manual_seed(1))
    assert h0["p_value"] >= 1e-3, h0
    unpaired = e2e.energy_distance_test(X, Y, 999, torch.Generator().manual_seed(1), paired=False)
    assert unpaired["energy_distance"] == pytest.approx(h0["energy_distance"]) and unpaired["p_value"] >= 1e-3
    # H1: a mean shift of 1 in every coordinate (energy distance ~ 0.8): the observed statistic
    # exceeds every permutation, p = 1/(n_perm + 1).
    h1 = e2e.energy_distance_test(X + 1.0, Y, 199, torch.Generator().manual_seed(2))
    assert h1["p_value"] == pytest.approx(1 / 200)
    with pytest.raises(ValueError, match="same shape"):
        e2e.energy_distance_test(X, Y[:10], 10, g)


def test_grid_png(tmp_path):
    p = tmp_path / "g.png"
    e2e.save_grid_png(torch.rand(12, 1, 8, 8) * 2 - 1, str(p), nrow=4)
    assert p.stat().st_size > 100


@pytest.fixture(scope="module")
def digits_edm():
    return e2e.load_model(e2e.E2EConfig(model="digits-edm", max_rows=None))


def _cfg(**kw):
    # n_perm 3000: the smallest permutation p-value 1/3001 is below the two-sample level 1e-3 / 3
    base = dict(model="digits-edm", verifier="dgrs", K=2, L=3, eps=0.3, samples=200, steps=16, n_perm=3000, alpha=1e-3)
    return e2e.E2EConfig(**{**base, **kw})


def test_e2e_digits_edm_exact_and_calibrated(digits_edm, tmp_path):
    """dgrs (2, 3) on the shipped model, 200 trajectories, 16 steps.
    Calibration: |z| < 4.5 (two-sided normal tail 7e-6); NFE within 4.5 s.e. of the DP prediction
    (the DP uses the measured acceptances, so this is a consistency check, same tail); exactness
    verdict at alpha = 1e-3 (innovation + two-sample families, Bonferroni)."""
    r = e2e.run_e2e(_cfg(figures=str(tmp_path)), digits_edm)
    s = r["summary"]
    assert abs(s["calibration_z"]) < 4.5, s
    assert abs(s["nfe_z"]) < 4.5 or abs(s["nfe_mean"] - s["predicted_nfe"]) < 0.02 * s["nfe_mean"], s
    assert 1.0 < s["speedup"] <= s["stochastic_steps"]
    assert r["exact"] is True, r["exactness"]
    cal = r["exactness"]["calibration"]
    assert cal["ran"] and cal["passed"] and cal["level"] == pytest.approx(1e-3 / 3)
    assert r["digit_label_agreement"]["speculative"] > 0.7
    assert all(os.path.isfile(p) for p in r["figures"].values())
    assert "varsigma" not in r  # report is JSON-friendly
    e2e.write_json(r, str(tmp_path / "r.json"))


def test_mutant_sampler_is_caught(digits_edm):
    """'wrong-noise-index' (sigma_{n+l} instead of sigma_{n+l-1} at depth >= 2) must fail the
    exactness verdict on the digits model. Run at alpha = 1e-3 with 200 trajectories: the
    deviation is a variance error at every deep commit; the smallest innovation p-value
    underflows to 0 on this seed (measured 2026-11-29)."""
    r = e2e.run_e2e(_cfg(sampler_mutant="wrong-noise-index", two_sample=False), digits_edm)
    assert r["exact"] is False
    assert not r["exactness"]["innovation"]["passed"]


def test_no_verdict_from_no_evidence(digits_edm):
    """Options under which no test can fail are refused before any sampling (issue 15.3)."""
    with pytest.raises(InputError, match="no exactness test"):
        e2e.run_e2e(_cfg(innovation=False, two_sample=False), digits_edm)
    for n_perm in (0, 1, 2999):  # p >= 1/(1 + n_perm) could never fall below 1e-3 / 3
        with pytest.raises(InputError, match="n_perm must be in \\[3000, 100000\\]"):
            e2e.run_e2e(_cfg(n_perm=n_perm), digits_edm)
    with pytest.raises(InputError, match="samples"):
        e2e.run_e2e(_cfg(samples=1), digits_edm)
    assert main(["e2e", "--model", "digits-edm", "--n-perm", "0"]) == 2
    assert main(["e2e", "--model", "digits-edm", "--no-innovation", "--no-two-sample"]) == 2


def test_verdict_only_from_tests_that_ran():
    level = 0.01 / 3
    far = e2e.calibration_check({"calibration_z": 22.0, "n_events": 500}, level)
    assert far["ran"] and not far["passed"] and far["threshold"] == pytest.approx(2.9352, abs=1e-3)
    near = e2e.calibration_check({"calibration_z": -1.0, "n_events": 500}, level)
    assert near["passed"]
    none = e2e.calibration_check({"calibration_z": float("nan"), "n_events": 0}, level)
    assert not none["ran"]
    passing = {"ran": True, "passed": True}
    assert e2e.verdict({"two_sample": passing, "calibration": far}) is False  # calibration z 22: a failure
    assert e2e.verdict({"two_sample": passing, "calibration": near}) is True
    assert e2e.verdict({"two_sample": passing, "calibration": none}) is True
    assert e2e.verdict({"calibration": near}) is None  # calibration alone is no exactness evidence
    assert e2e.verdict({"innovation": {"ran": False, "passed": True, "n_tests": 0}, "calibration": near}) is None
    assert e2e.grid_exit_code([{"exact": True}, {"exact": True}]) == 0
    assert e2e.grid_exit_code([{"exact": True}, {"exact": False}]) == 1
    assert e2e.grid_exit_code([{"exact": False}, {"exact": None}]) == 2
    assert e2e.grid_exit_code([{"exact": True, "error": "x", "error_kind": "cannot-run"}]) == 2
    assert e2e.grid_exit_code([]) == 2


def test_grid_cells_that_break(digits_edm, monkeypatch):
    """A verifier that cannot be loaded: cannot-run (exit 2); one that returns garbage: a defect."""
    monkeypatch.setattr(e2e, "load_model", lambda cfg: digits_edm)
    base = _cfg(samples=20, steps=8, n_perm=3000)
    reports = e2e.run_e2e_grid(base, ["no_such_module_xyz:R", "tests.cli.hostile:ReturnsNone"], [2], [2], [0.3])
    kinds = [r.get("error_kind") for r in reports]
    assert kinds == ["cannot-run", "defect"], reports
    assert e2e.grid_exit_code(reports) == 2 and e2e.grid_exit_code(reports[1:]) == 1


def test_out_of_memory_stops_the_grid_as_exit_2(digits_edm, monkeypatch):
    """An allocation failure is no verdict on the verifier (DeviceError, exit 2), not a defect."""
    from speccheck.errors import DeviceError

    assert e2e.out_of_memory(MemoryError()) and e2e.out_of_memory(RuntimeError("CUDA out of memory. Tried"))
    assert e2e.out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 TB"))
    assert not e2e.out_of_memory(RuntimeError("shape mismatch")) and not e2e.out_of_memory(ValueError("memory"))
    monkeypatch.setattr(e2e, "load_model", lambda cfg: digits_edm)

    def oom(cfg, model, log=None):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 TB")

    monkeypatch.setattr(e2e, "draw_e2e", oom)
    with pytest.raises(DeviceError, match="out of memory on cpu in cell digits-edm dgrs K=2 L=3"):
        e2e.run_e2e_grid(_cfg(), ["dgrs"], [2], [3], [0.3])


def test_cli_e2e_verifier_that_exits_is_exit_2(capsys):
    code = main(["e2e", "--model", "digits-edm", "--verifier", "tests.cli.hostile:SysExitZero", "--samples", "20",
                 "--steps", "8", "--n-perm", "400", "--no-innovation"])
    err = capsys.readouterr().err
    assert code == 2 and "sys.exit(0)" in err and "no verdict" in err, err


def test_bad_options(digits_edm):
    with pytest.raises(ValueError, match="eps"):
        e2e.run_e2e(_cfg(eps=0.0), digits_edm)
    with pytest.raises(ValueError, match="sampler_mutant"):
        e2e.run_e2e(_cfg(sampler_mutant="nope"), digits_edm)
    with pytest.raises(ValueError, match="unknown model"):
        e2e.load_model(e2e.E2EConfig(model="imagen"))
    assert main(["e2e", "--model", "edm-cifar10"]) == 2
    assert main(["e2e", "--model", "sd35-medium"]) == 2
    assert math.isfinite(e2e.make_schedule(50, 0.8, 3.0, True).t[1])


def test_sd35_path_on_a_tiny_local_directory(tmp_path):
    """The sd35-medium preset end to end on a tiny random transformer saved like a pipeline
    directory (16 x 64 x 64 latents) with precomputed embeddings: guidance 7, shift-3 diffusers
    grid. Smoke check of the plumbing (4 trajectories, 6 steps); exactness is not tested here."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.SD3Transformer2DModel(
        sample_size=64, patch_size=8, in_channels=16, out_channels=16, num_layers=1, attention_head_dim=8,
        num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16, pooled_projection_dim=8,
        pos_embed_max_size=8)
    model.save_pretrained(str(tmp_path / "transformer"))
    g = torch.Generator().manual_seed(1)
    torch.save({"prompt_embeds": torch.randn(3, 4, 16, generator=g),
                "pooled_prompt_embeds": torch.randn(3, 8, generator=g),
                "negative_prompt_embeds": torch.randn(4, 16, generator=g),
                "negative_pooled_prompt_embeds": torch.randn(8, generator=g)}, tmp_path / "emb.pt")
    cfg = e2e.E2EConfig(model="sd35-medium", weights=str(tmp_path), embeddings=str(tmp_path / "emb.pt"),
                        verifier="dgrs", K=2, L=2, eps=0.8, samples=4, steps=6, n_perm=400, innovation=False)
    r = e2e.run_e2e(cfg)
    assert r["model"]["guidance_scale"] == 7.0 and r["state_shape"] == [16, 64, 64]
    assert r["protocol"]["schedule"]["grid"] == "diffusers-flow(shift=3.0)"
    assert r["summary"]["stochastic_steps"] == 4 and r["summary"]["nfe_mean"] >= 2


def test_a_cell_is_judged_from_its_raw_outputs_and_refused_when_malformed(digits_edm):
    """draw_e2e (where the model and verifier run) sends descriptions and raw outputs; judge_e2e
    computes every statistic from the raw outputs alone, ignores any verdict the drawing side
    claims, and refuses malformed raw outputs (no verdict) instead of judging them."""
    import numpy as np

    cfg = _cfg(samples=100)
    report, raw = e2e.draw_e2e(cfg, digits_edm)
    judged = e2e.judge_e2e(cfg, report, raw)
    assert judged["exact"] is True and judged["summary"]["trajectories"] == 100
    claimed = e2e.judge_e2e(cfg, {**report, "exact": True, "exactness": {}, "summary": {}}, raw)
    assert claimed == judged  # a report's own verdict or statistics are never read
    shifted = {**raw, "innovation": {**raw["innovation"], "xi": raw["innovation"]["xi"] + 0.5}}
    assert e2e.judge_e2e(cfg, report, shifted)["exact"] is False
    diverged = {**raw, "innovation": {**raw["innovation"], "xi": np.full_like(raw["innovation"]["xi"], np.nan)}}
    assert e2e.judge_e2e(cfg, report, diverged)["exact"] is False  # a run that left the reals is a defect

    def bad(**changes):
        return {**raw, **changes}
    run = raw["run"]
    cases = [
        (bad(x_std=raw["x_std"][:-1]), "x and x_std must be finite float64"),
        (bad(innovation={**raw["innovation"], "depth": raw["innovation"]["depth"][:, :-1]}), "not the run's"),
        (bad(run={**run, "counters": {**run["counters"], "n_accepted": run["counters"]["n_accepted"] + 1}}),
         "n_accepted disagrees"),
        (bad(stochastic=np.ones(3, dtype=bool)), "not those of the cell's schedule"),
        (bad(stochastic=np.ones(16, dtype=bool)), "not those of the cell's schedule"),
        (bad(tree_L=0), "of depth 0 is not the cell's uniform"),
        (bad(tree_L=10**13), "of depth 10000000000000 is not"),
        (bad(innovation={**raw["innovation"], "depth": np.zeros_like(raw["innovation"]["depth"])}),
         "commit depths are not the run's"),
        (bad(x_std=raw["x"]), "come from two runs"),
        (bad(x=raw["x"][:, :5], x_std=raw["x_std"][:, :5]), "come from two runs"),
        (bad(run={**run, "prefetch": "none"}), "prefetch 'none', the cell asked for"),
        (bad(innovation={**raw["innovation"], "xi": raw["innovation"]["xi"][:, :, :0]}), "expected [100, 14, d]"),
        (bad(innovation={**raw["innovation"], "depth": raw["innovation"]["depth"] + 5}), "not the run's"),

        ("not a table", "expected a table"),
    ]
    for tampered, pattern in cases:
        out = e2e.judge_e2e_cell(cfg, {"cell": 0, "report": report, "raw": tampered})
        assert out["error_kind"] == "cannot-run" and out["exact"] is None and pattern in out["error"], out
    tree = {**report["protocol"]["tree"], "tree": "chain(L=3)"}  # the child naming another tree than it ran
    renamed = {**report, "protocol": {**report["protocol"], "tree": tree}}
    out = e2e.judge_e2e_cell(cfg, {"cell": 0, "report": renamed, "raw": raw})
    assert out["exact"] is None and "is not the cell's uniform" in out["error"], out
    for described in ({**report, "protocol": None}, {**report, "wall_s_standard": "soon"}):
        out = e2e.judge_e2e_cell(cfg, {"cell": 0, "report": described, "raw": raw})
        assert out["error_kind"] == "cannot-run" and "e2e report:" in out["error"], out
    assert e2e.grid_exit_code([out]) == 2
    inflated = bad(run={**run, "counters": {**run["counters"], "nfe": 0 * run["counters"]["nfe"]}})
    out = e2e.judge_e2e_cell(cfg, {"cell": 0, "report": report, "raw": inflated})  # breaks Algorithm 1: a defect
    assert out["error_kind"] == "defect" and out["exact"] is False and "target calls) are not" in out["error"], out
    defect = e2e.judge_e2e_cell(cfg, {"cell": 0, "report": {"error": "RuntimeError: x", "error_kind": "defect"}})
    assert defect["exact"] is False and e2e.grid_exit_code([defect]) == 1


@pytest.mark.parametrize("match, length", [("budget", 14), ("rows", 14), ("none", 3)])
def test_a_k1_only_rule_runs_its_matched_chain_and_is_judged(digits_edm, match, length):
    """rmc at K = 2, L = 3 runs a chain (B(2, 3) = 14 drafts; with leaves the rows match it too; or L); the
    judge knows that chain from the config alone and accepts its depth."""
    cfg = _cfg(verifier="rmc", samples=60, two_sample=False, match=match)
    report = e2e.run_e2e(cfg, digits_edm)
    assert report["protocol"]["tree"]["tree"] == f"chain(L={length})" and report["exact"] is not None
    assert e2e.judged_tree(cfg, chained=True).L == length


def test_every_sampler_mutant_is_not_exact_end_to_end(digits_edm):
    """Each sampler mutant is a defect end to end, whether a test rejects its samples or the judge
    sees its run break Algorithm 1 (extra-commit commits a step it never verified)."""
    from speccheck.validation.sampler_mutants import SAMPLER_MUTANTS

    errors = {}
    for name in sorted(SAMPLER_MUTANTS):
        cfg = _cfg(sampler_mutant=name, samples=100, two_sample=False)
        report, raw = e2e.draw_e2e(cfg, digits_edm)
        out = e2e.judge_e2e_cell(cfg, {"cell": 0, "report": report, "raw": raw})
        assert out["exact"] is False, (name, out.get("error"), out.get("exactness"))
        errors[name] = out.get("error", "")
    assert "breaks Algorithm 1" in errors["extra-commit"]


def test_the_judge_knows_the_schedule_without_the_weights(digits_edm):
    """model_schedule (the judging process's, from the preset) is the schedule the loaded model
    runs; a model of your own with other defaults is judged on its own schedule in run_e2e."""
    from dataclasses import replace

    for model in ("digits-edm", "digits-flow"):
        cfg = _cfg(model=model, steps=None)
        want = e2e.cell_schedule(cfg, e2e.load_model(cfg)).stochastic
        assert (e2e.model_schedule(cfg).stochastic == want).all()
    mine = replace(digits_edm, steps=12)  # a model whose default grid is not the preset's
    report = e2e.run_e2e(_cfg(steps=None, samples=60, two_sample=False), mine)
    assert report["exact"] is not None and report["standard_nfe"]["total"] == 12
