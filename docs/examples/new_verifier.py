"""Worked example: write a new verifier, check it, measure it, plot it, run the sampler with it,
and compare with theory -- every step one call of speccheck's public API.

    python docs/examples/new_verifier.py [OUT_DIR]     # default: a fresh temporary folder

Writes OUT_DIR/acceptance.csv (the measured table), OUT_DIR/acceptance.png (measured vs
declared vs the i.i.d.-list bound), OUT_DIR/summary.json (verdict, speed-ups, theory table)
and prints where they are. Exit code 0 when the battery says "exact" and the plain and
speculative samplers agree, 1 otherwise (the checks a CI job would want).
See docs/examples/new_verifier.md for the walk-through and docs/contract.md for the contract.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from scipy import special, stats

import speccheck
from speccheck.sampler import SpeculativeSampler, chain
from speccheck.sampler.experiments import preset, speedup_run
from speccheck.targets import gmm_preset
from speccheck.theory import acceptance_rmc, chain_ceiling, list_bound_iid, predicted_speedup


# ----------------------------------------------------------------------------- 1. the verifier
class HalfwayReflection:
    """Reflection maximal coupling written from scratch (docs/contract.md; SPEC section 1).

    One child (K = 1): accept S with probability min(1, rho(S)), rho(s) = exp(delta s - delta^2 / 2)
    (compared in log space, so delta up to 40 is fine); on rejection return delta - S, the
    reflection about delta / 2, which has exactly the residual law. P(accept) = 2 Phibar(delta / 2).
    """

    name = "halfway-reflection"
    description = "RMC (K = 1) written in the worked example"

    def supports_K(self, K: int) -> bool:
        return K == 1

    def acceptance(self, delta: np.ndarray, K: int) -> np.ndarray:
        return 2.0 * special.ndtr(-np.asarray(delta, dtype=np.float64) / 2.0)

    def verify(self, delta: torch.Tensor, s: torch.Tensor, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, K = s.shape
        if K != 1:
            raise ValueError(f"{self.name} needs K == 1, got K={K}")
        s1 = s[:, 0]
        u = torch.rand(B, generator=generator, dtype=s.dtype, device=s.device)
        accepted = torch.log(u) < delta * s1 - 0.5 * delta * delta
        s_out = torch.where(accepted, s1, delta - s1)
        index = torch.where(accepted, 0, K).to(torch.long)
        return s_out, accepted, index


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    rule = HalfwayReflection()

    # ------------------------------------------------------------------------- 2. the battery
    outcome = speccheck.battery(rule, suite="smoke", isolate=False)   # an object runs in this process
    print(f"battery (smoke): {outcome.verdict} -- {outcome.reason}")

    # ---------------------------------------------------------------------- 3. acceptance table
    deltas = [0.1, 0.5, 1.0, 2.0, 3.0]
    table = speccheck.measure_acceptance(rule, deltas, [1], n=20_000, seed=1)
    table.to_csv(out / "acceptance.csv", index=False)
    print(table[["delta", "K", "acceptance", "se", "declared", "z"]].to_string(index=False))

    # --------------------------------------------------------------------------- 4. the plot
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0.0, 3.5, 200)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot(grid, acceptance_rmc(grid), label="declared 2 Phibar(delta/2)")
    ax.plot(grid, list_bound_iid(grid, 1), ":", label="i.i.d.-list bound (K = 1)")
    ax.errorbar(table["delta"], table["acceptance"], yerr=2 * table["se"], fmt="o", label="measured (+/- 2 se)")
    ax.set(xlabel="delta", ylabel="P(accept)", title=rule.name)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "acceptance.png", dpi=100)
    plt.close(fig)

    # ------------------------------------------------------- 5. sampler speed-up (small GMM preset)
    proto = preset("gmm-paper", steps=10)             # d = 500 mixture, the paper's protocol, 10 steps
    L = 4
    record = speedup_run(proto, rule, 1, L, 40, 0, outputs=["samples", "acceptance"])
    target, schedule = gmm_preset(proto.target), proto.schedule()
    plain = speccheck.sample(target, schedule, 200, generator=2)
    sampler = SpeculativeSampler(target, schedule, chain(L), rule)   # defaults = the preset's protocol
    g = torch.Generator().manual_seed(3)
    spec = sampler.run(torch.randn(200, target.d, generator=g, dtype=torch.float64), g)
    ks = stats.ks_2samp((plain.samples**2).sum(1).numpy(), (spec.samples**2).sum(1).numpy())
    print(f"speed-up (chain L={L}): {record['speedup']:.3f} +/- {record['speedup_se']:.3f} "
          f"(predicted {record['predicted_speedup']:.3f}); plain vs speculative KS p = {ks.pvalue:.3g}")

    # ------------------------------------------------------------------------ 6. theory table
    a = record["acceptance"]                          # measured mean acceptance in the run
    theory = [{"delta": d, "acceptance_rmc": float(acceptance_rmc(d)), "list_bound_K1": float(list_bound_iid(d, 1)),
               "chain_ceiling": float(chain_ceiling(acceptance_rmc(d))),
               "predicted_speedup_L4": float(predicted_speedup(np.full(L, float(acceptance_rmc(d))),
                                                               schedule.n_stochastic, L))}
              for d in deltas]
    for row in theory:
        print("  ".join(f"{k}={v:.4f}" for k, v in row.items()))

    summary = {"verifier": rule.name, "verdict": outcome.verdict, "reason": outcome.reason,
               "max_abs_z": float(table["z"].abs().max()), "speedup": record["speedup"],
               "speedup_se": record["speedup_se"], "predicted_speedup": record["predicted_speedup"],
               "run_acceptance": a, "accepted_per_step": record["accepted_per_step"].tolist(),
               "plain_nfe": plain.nfe, "speculative_nfe_mean": float(spec.nfe.double().mean()),
               "two_sample_ks_p": float(ks.pvalue), "theory": theory}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"wrote {out / 'acceptance.csv'}, {out / 'acceptance.png'}, {out / 'summary.json'}")
    return 0 if outcome.verdict == "exact" and ks.pvalue > 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="speccheck-example-"))))
