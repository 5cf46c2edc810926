"""`speccheck speedup` and `speccheck sweep` (small, lazy runs on the mixture presets)."""

import csv
import json
import os

from speccheck.cli import main


def test_speedup_json(capsys):
    rc = main(["speedup", "--target", "gmm-d512", "--verifier", "dgrs", "--K", "2", "--L", "2",
               "--trajectories", "6", "--lazy", "--steps", "8", "--json"])
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


def test_sweep_resumes(tmp_path, capsys):
    args = ["sweep", "--target", "gmm-paper", "--verifiers", "rmc", "dgrs", "--cells", "2x2", "1x3",
            "--trajectories", "3", "--steps", "6", "--out", str(tmp_path), "--name", "s"]
    assert main(args) == 0
    path = os.path.join(tmp_path, "s", "trajectories.csv")
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 2 * 2 * 3
    assert {(r["rule"], r["K"], r["L"]) for r in rows} == {("rmc", "2", "2"), ("rmc", "1", "3"),
                                                            ("dgrs", "2", "2"), ("dgrs", "1", "3")}
    assert {r["tree"] for r in rows if r["rule"] == "rmc" and r["K"] == "2"} == {"chain(L=6)"}  # budget-matched
    # an interrupted sweep: drop one cell's rows, rerun -> only that cell is recomputed
    keep = [r for r in rows if not (r["rule"] == "dgrs" and r["K"] == "2")]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    capsys.readouterr()
    assert main(args) == 0
    log = capsys.readouterr().out
    assert "dgrs K=2 L=2" in log and "rmc K=2" not in log
    assert len(list(csv.DictReader(open(path)))) == 12
    summ = list(csv.DictReader(open(os.path.join(tmp_path, "s", "summary.csv"))))
    assert len(summ) == 4 and all(float(s["speedup"]) > 0 for s in summ)
    assert os.path.exists(os.path.join(tmp_path, "s", "summary.md"))


def test_bad_options(capsys):
    assert main(["sweep", "--K", "0..3", "--trajectories", "3"]) == 2
    assert main(["sweep", "--cells", "6by6", "--trajectories", "3"]) == 2
    assert main(["speedup", "--verifier", "nope", "--trajectories", "3"]) == 2


def test_sweep_refuses_mixed_protocols(tmp_path):
    base = ["sweep", "--target", "gmm-paper", "--verifiers", "rmc", "--cells", "1x2", "--trajectories", "2",
            "--steps", "4", "--out", str(tmp_path), "--name", "s"]
    assert main(base) == 0
    assert main(base + ["--freeze", "drift"]) == 2
