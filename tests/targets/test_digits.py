"""The digits models: data, networks, a few training steps, checkpoints and the shipped models'
held-out check (a real-digit classifier recognises the conditional samples' labels)."""

from __future__ import annotations

import os

import pytest
import torch
from scipy import stats

pytest.importorskip("sklearn")
pytest.importorskip("diffusers")

from speccheck.targets import digits as D  # noqa: E402
from speccheck.targets.edm import EDMTarget, load_edm_denoiser  # noqa: E402
from speccheck.targets.sd3 import SD3Target  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")



def test_data_and_split():
    x, y = D.load_digits_data()
    assert x.shape == (1797, 1, 8, 8) and y.shape == (1797,)
    assert float(x.min()) == -1.0 and float(x.max()) == 1.0
    xtr, ytr, xte, yte = D.digits_split()
    assert xtr.shape[0] + xte.shape[0] == 1797 and xte.shape[0] == 359
    assert set(ytr.tolist()) == set(range(10))


def test_few_training_steps_and_checkpoint_round_trip(tmp_path):
    den, meta = D.train_digits_edm(steps=3, batch=16)
    assert meta["steps"] == 3 and torch.isfinite(torch.tensor(meta["final_loss"]))
    p = tmp_path / "edm.pt"
    D.save_checkpoint(den, "digits-mlp", str(p), meta)
    loaded = load_edm_denoiser(str(p))
    y, s = torch.randn(4, 1, 8, 8), torch.tensor([0.01, 0.5, 5.0, 80.0])
    lab = torch.nn.functional.one_hot(torch.tensor([0, 3, 6, 9]), 10).float()
    torch.testing.assert_close(loaded(y, s, lab), den(y, s, lab))

    flow, meta = D.train_digits_flow(steps=2, batch=8)
    q = tmp_path / "flow.pt"
    D.save_checkpoint(flow, "digits-flow", str(q), meta)
    target = D.digits_target("digits-flow", str(q), guidance_scale=2.0)
    assert isinstance(target, SD3Target) and target.n_prompts == 10
    x, t, c = torch.randn(3, 1, 8, 8), torch.tensor([1.0, 0.5, 0.1]), torch.tensor([0, 4, 9])
    with torch.no_grad():
        vc = flow(x, t, c)
        vu = flow(x, t, torch.full_like(c, 10))
    torch.testing.assert_close(target.velocity(x, t, c), vu + 2.0 * (vc - vu), rtol=1e-4, atol=1e-4)


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown digits model"):
        D.digits_target("digits-vae")
    with pytest.raises(ValueError, match="weights file not found"):
        D.digits_target("digits-edm", str(tmp_path / "missing.pt"))
    with pytest.raises(ValueError, match="weights file not found"):
        D.digits_target("digits-flow", str(tmp_path / "missing.pt"))


@pytest.mark.parametrize("kind", ["digits-edm", "digits-flow"])
def test_shipped_checkpoints_learned_digits(kind, monkeypatch):
    """Classifier agreement of 100 conditional samples (10 per digit, 20-step chain).
    H0 'the model learned' is taken as agreement >= 0.75 (the shipped models measure 0.998 and 0.842
    with n = 500, see speccheck/data/README.md); the threshold is the 1e-4 lower quantile of
    Binomial(100, 0.75), so the false-failure rate is <= 1e-4. Chance is 0.1."""
    path = D.EDM_CHECKPOINT if kind == "digits-edm" else D.FLOW_CHECKPOINT
    assert os.path.getsize(path) < 3_000_000
    meta = torch.load(path, weights_only=True)["meta"]
    assert "seed" in meta and "steps" in meta
    monkeypatch.setenv("SPECCHECK_CACHE_DIR", "")  # the shipped checkpoint, not a user-trained one
    target = D.digits_target(kind)
    assert isinstance(target, EDMTarget if kind == "digits-edm" else SD3Target)
    out = D.heldout_check(target, n_per_class=10, steps=20, eps=0.3, seed=5)
    k_min = stats.binom.ppf(1e-4, 100, 0.75)
    assert out["label_agreement"] * 100 >= k_min, out
    assert out["classifier_heldout_accuracy"] > 0.9


def test_training_writes_to_the_user_cache_never_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHECK_CACHE_DIR", str(tmp_path / "cache"))
    assert D.user_checkpoint_dir() == str(tmp_path / "cache" / "digits")
    assert D.default_checkpoint("digits-edm") == D.EDM_CHECKPOINT  # nothing trained yet: the shipped one
    shipped = os.path.getmtime(D.EDM_CHECKPOINT)
    report = D.train_and_save(which="edm", steps_edm=2, batch=8, check_per_class=0)
    path = report["digits-edm"]["path"]
    assert path == str(tmp_path / "cache" / "digits" / "digits_edm.pt") and os.path.isfile(path)
    assert D.default_checkpoint("digits-edm") == path  # the user's checkpoint is preferred once it exists
    assert os.path.getmtime(D.EDM_CHECKPOINT) == shipped
    monkeypatch.setenv("SPECCHECK_CACHE_DIR", "")
    with pytest.raises(D.InputError, match="--out"):
        D.user_checkpoint_dir()
    assert D.default_checkpoint("digits-flow") == D.FLOW_CHECKPOINT


def test_non_finite_loss_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(D, "_edm_loss", lambda model, x0, labels, g: torch.tensor(float("nan"), requires_grad=True))
    with pytest.raises(D.TrainingDivergedError, match="loss is nan at step 0"):
        D.train_and_save(which="edm", out_dir=str(tmp_path), steps_edm=3, batch=8, check_per_class=0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kw, match", [({"steps": 0}, "steps"), ({"batch": 0}, "batch"), ({"batch": -4}, "batch"),
                                       ({"seed": -1}, "seed")])
def test_training_options_are_checked(kw, match):
    with pytest.raises(D.InputError, match=match):
        D.train_digits_edm(**{"steps": 2, "batch": 8, **kw})


def test_cli_train_digits(tmp_path, capsys):
    from speccheck.cli import main

    assert main(["train-digits", "--which", "edm", "--steps-edm", "1", "--batch", "8", "--check-per-class", "0",
                 "--out", str(tmp_path)]) == 0
    assert (tmp_path / "digits_edm.pt").is_file()
    assert main(["train-digits", "--batch", "0", "--out", str(tmp_path / "x")]) == 2
    assert "--batch" in capsys.readouterr().err and not (tmp_path / "x").exists()
