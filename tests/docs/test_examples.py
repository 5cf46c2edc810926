"""docs/examples/new_verifier.py runs end to end (battery -> acceptance table -> plot -> sampler
speed-up -> theory table) in a fresh process and writes what it says it writes."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_new_verifier_example_runs_and_writes_its_outputs(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "new_verifier.py"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["verifier"] == "halfway-reflection" and summary["verdict"] == "exact"
    assert summary["max_abs_z"] < 5                      # exact rule: P(|z| > 5 in 5 cells) < 3e-6
    assert 1.0 < summary["speedup"] and summary["two_sample_ks_p"] > 1e-4
    assert len(summary["accepted_per_step"]) == 10 and len(summary["theory"]) == 5
    assert summary["plain_nfe"] == 10
    assert (tmp_path / "acceptance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "acceptance.csv").read_text().startswith("rule,delta,K,n,accepted,acceptance,se")
