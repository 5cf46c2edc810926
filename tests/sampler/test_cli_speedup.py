"""`speccheck speedup` (small, lazy runs on the mixture presets)."""

import json

from speccheck.cli import main


def test_speedup_json(capsys):
    rc = main(["speedup", "--target", "gmm-d512", "--verifier", "dgrs", "--K", "2", "--L", "2",
               "--trajectories", "6", "--lazy", "--steps", "8", "--json", "-"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("speedup", "speedup_se", "nfe_mean", "acceptance", "calibration_z", "predicted_nfe", "protocol",
                "speedup_definition"):
        assert key in out
    p = out["protocol"]
    assert (p["freeze"], p["prefetch"], p["leaves"], p["grid"], p["eps"], p["lazy"]) == \
        ("velocity", "nearest", False, "flow", 0.06, True)
    assert out["mixture_seed"] == 20260714 and out["det_calls_mean"] == 2 and out["stochastic_steps"] == 6
    assert 1.0 <= out["speedup"] * 1.0 and out["nfe_mean"] >= 2


def test_bad_options(capsys):
    assert main(["speedup", "--verifier", "nope", "--trajectories", "3"]) == 2


# the `speccheck sweep` tests moved to tests/scale/test_commands.py with the command
