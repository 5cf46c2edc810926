"""speccheck.sampler.experiments: arrays out of run_cells / speedup_run on request (final samples,
trajectories, per-step acceptance), the counters unchanged by asking, and SpeculativeSampler's
defaults equal to the documented preset."""

import inspect

import numpy as np
import pytest

from speccheck.errors import InputError
from speccheck.sampler.core import SpeculativeSampler
from speccheck.sampler.experiments import PRESETS, preset, run_cells, speedup_run


def _plain(summary: dict) -> dict:
    """The summary without its arrays, NaN as a string (so that equal summaries compare equal)."""
    return {k: "nan" if isinstance(v, float) and np.isnan(v) else v for k, v in summary.items()
            if not isinstance(v, np.ndarray)}


@pytest.mark.parametrize("lazy", [True, False])
def test_run_cells_returns_samples_trajectories_and_per_step_acceptance(lazy):
    proto = preset("gmm-paper", steps=6, lazy=lazy)
    args = (proto, "dgrs", 2, [1, 2], 6, 3)
    rows, summaries = run_cells(*args, max_nodes=20)        # eager: several chunks
    rows_out, out = run_cells(*args, max_nodes=20, outputs=("samples", "trajectories", "acceptance"))
    assert rows_out == rows
    for plain, cell in zip(summaries, out):
        assert _plain(cell) == _plain(plain)                         # asking for arrays moves no number
        assert cell["samples"].shape == (6, 500) and cell["states"].shape == (6, 7, 500)
        np.testing.assert_array_equal(cell["states"][:, -1], cell["samples"])
        accepted, verified = cell["accepted_per_step"], cell["verified_per_step"]
        assert accepted.shape == verified.shape == (6,) and np.all(verified == 6) and np.all(accepted <= verified)
        assert accepted.sum() == plain["observed_accepts"] and verified.sum() == plain["n_events"]
    assert not np.array_equal(out[0]["samples"], out[1]["samples"])


def test_speedup_run_passes_outputs_and_rejects_unknown_ones():
    record = speedup_run(preset("gmm-d512", steps=5), "dgrs", 2, 2, 4, 0, outputs=["samples"])
    assert record["samples"].shape == (4, 512) and "states" not in record
    for bad in ("samples", ["states"], [3]):
        with pytest.raises(InputError, match="outputs"):
            run_cells(preset("gmm-paper", steps=3), "dgrs", 2, [1], 2, 0, outputs=bad)


def test_speculative_sampler_defaults_are_the_documented_preset():
    defaults = {name: p.default for name, p in inspect.signature(SpeculativeSampler).parameters.items()
                if p.default is not inspect.Parameter.empty}
    paper = PRESETS["gmm-paper"]
    assert defaults == {"freeze": paper.freeze, "prefetch": paper.prefetch, "leaves": paper.leaves,
                        "lazy": paper.lazy}
