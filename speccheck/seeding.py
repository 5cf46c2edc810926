"""One way to derive seeds: a unit's seed from its identity.

Every random stream in speccheck (a battery cell, a sweep cell, an e2e run, a calibration
seed) is seeded by ``unit_seed(base, *identity)``, so results do not depend on the order in
which units run, on how many workers run them, or on the process that runs them.
"""

from __future__ import annotations

import hashlib
from typing import Union

import numpy as np
import torch

Part = Union[int, str]


def _as_int(part: Part) -> int:
    if isinstance(part, bool) or not isinstance(part, (int, np.integer, str)):
        raise TypeError(f"seed identity parts must be int or str, got {type(part).__name__}")
    if isinstance(part, str):
        return int.from_bytes(hashlib.blake2b(part.encode(), digest_size=8).digest(), "little")
    part = int(part)
    if part < 0:
        raise ValueError(f"seed identity parts must be >= 0, got {part}")
    return part


def unit_seed(base: int, *identity: Part) -> int:
    """A 63-bit seed for the unit ``identity`` under the run seed ``base``.

    Integer parts enter ``numpy.random.SeedSequence`` as they are, string parts as their
    64-bit BLAKE2b digest; stable across runs, processes and platforms.
    """
    entropy = [_as_int(base), *(_as_int(p) for p in identity)]
    return int(np.random.SeedSequence(entropy).generate_state(2, np.uint64)[0] >> np.uint64(1))


def generator(seed: int, device: Union[str, torch.device] = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``."""
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g
