"""Dump a fixed set of theory outputs as hex floats, to show a refactor of speccheck/theory leaves
them bit-identical (issue 38.6):

    python -m research.theory_dump before.json     # on the old code
    python -m research.theory_dump after.json      # on the new code
    cmp before.json after.json
"""

from __future__ import annotations

import json
import sys

import numpy as np

DELTAS = [1e-300, 1e-12, 1e-6, 0.01, 0.3, 1.0, 2.5, 7.0]
KS = [2, 3, 8, 16, 17, 24]


def _hex(x) -> list:
    return [float(v).hex() for v in np.ravel(np.asarray(x, np.float64))]


def dump() -> dict:
    from speccheck import theory as T
    from speccheck.theory.mcrs import minmax
    from speccheck.verifiers.mcrs2 import MCRS2

    out: dict = {}
    for K in KS:
        for d in DELTAS:
            key = f"{K}/{d!r}"
            sol = T.rank_weight_solution(d, K)
            out[key] = {
                "rass": _hex([sol.acceptance, sol.rejection, sol.gap]) + _hex(sol.deviation) + _hex(sol.crossings),
                "rass_fixed": _hex([T.rejection_rass(d, K, np.linspace(1.0, 2.0, K) / np.linspace(1.0, 2.0, K).sum())]),
                "intervals": _hex([x for iv in T.residual_intervals(d, K, sol.omega) for x in iv]),
                "dgrs": _hex(T.acceptance_dgrs(d, K)),
                "bounds": _hex([T.list_bound_iid(d, K), T.list_bound_dependent(d, K)]),
            }
            if K <= 16 and d >= 1e-6:
                out[key]["mcrs"] = _hex(T.acceptance_mcrs(d, K))
            if K in (2, 3, 8) and d >= 0.01:
                pol = MCRS2().policies(np.array([d]), K)[0]
                out[key]["mcrs2"] = _hex([minmax.acceptance_of_minmax(d, pol)])
    return out


if __name__ == "__main__":
    with open(sys.argv[1], "w") as fh:
        json.dump(dump(), fh, indent=0, sort_keys=True)
