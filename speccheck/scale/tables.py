"""The columns of a stored sweep's tables, torch-free: reading the results store
(``speccheck results export``) needs these and nothing that runs a verifier, so it starts in a
fraction of a second (importing :mod:`speccheck.scale.jobs` would import torch)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SUMMARY_FIELDS", "TRAJECTORY_FIELDS", "summary_row"]

SUMMARY_FIELDS = ["rule", "K", "L", "tree", "B", "trajectories", "speedup", "speedup_se", "nfe_mean",
                  "predicted_nfe", "predicted_speedup", "speedup_no_warmup", "acceptance", "calibration_z",
                  "nfe_z", "nfe_gap_se"]

TRAJECTORY_FIELDS = ["rule", "K", "L", "tree", "B", "seed", "traj", "nfe", "root_calls", "det_calls", "rounds",
                     "accepted", "verified", "stochastic_steps", "speedup"]


def summary_row(result: dict) -> dict:
    """A sweep cell's summary row (SUMMARY_FIELDS) from its stored result."""
    summary = result["summary"]
    speedups = np.asarray(result["trajectories"]["speedup"], dtype=float)
    nfe = np.asarray(result["trajectories"]["nfe"], dtype=float)
    return {"rule": summary["rule"], "K": int(summary["K"]), "L": int(summary["L"]), "tree": summary["tree"],
            "B": int(summary["B"]), "trajectories": int(speedups.size), "speedup": float(speedups.mean()),
            "speedup_se": float(speedups.std(ddof=1) / math.sqrt(speedups.size)) if speedups.size > 1 else math.nan,
            "nfe_mean": float(nfe.mean()),
            **{k: float(summary.get(k, math.nan)) for k in SUMMARY_FIELDS[9:]}}
