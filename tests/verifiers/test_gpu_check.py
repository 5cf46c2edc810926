"""benchmarks/gpu_check.py: stages write their JSON as they finish; a missing device is exit 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_stages_write_json(tmp_path):
    gc = _gpu_check()
    rc = gc.main(["--quick", "--out", str(tmp_path), "--only", "same_seed", "big_cell"])
    assert rc == 0
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert names == ["01_environment.json", "04_same_seed.json", "08_big_cell.json", "99_summary.json"]
    same = json.loads((tmp_path / "04_same_seed.json").read_text())
    assert same["passed"] and all(same["bitwise_equal"].values()) and same["device"] == "cpu"
    cells = json.loads((tmp_path / "08_big_cell.json").read_text())["cells"]
    assert set(cells) == set(gc.RULES) and all(c["ks_ok"] and c["acceptance_ok"] for c in cells.values())


def test_missing_cuda_or_bad_option_is_exit_2(tmp_path, capsys):
    gc = _gpu_check()
    if not torch.cuda.is_available():
        assert gc.main(["--device", "cuda", "--out", str(tmp_path)]) == 2
        assert "CUDA is not available" in capsys.readouterr().err
    assert gc.main(["--quick", "--out", str(tmp_path), "--only", "no-such-stage"]) == 2
