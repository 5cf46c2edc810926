"""One way to derive seeds: a unit's seed from its identity.

Every random stream in speccheck (a battery cell, a sweep cell, an e2e run, a calibration
seed) is seeded by ``unit_seed(base, *identity)``, so results do not depend on the order in
which units run, on how many workers run them, or on the process that runs them.

    g = generator(unit_seed(run_seed, "sweep-cell", "dgrs", K, L), device)

Law: the identity (base, parts...) is encoded injectively as 32-bit words -- the number of
parts, then per part a type tag (0 int, 1 str) and two words of its 64-bit value (ints as they
are, strings by their 64-bit BLAKE2b digest) -- and fed to ``numpy.random.SeedSequence`` as its
entropy; the seed is the top 63 bits of its first 64-bit state word. Distinct identities give
distinct encodings (so ``(b, a)``, ``(b, a, 0)`` and ``(b, "a")`` differ); the same identity gives
the same seed on every run, process and platform.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from typing import Iterator, Optional, Union

import numpy as np
import torch

from speccheck.errors import DeviceError, InputError

Part = Union[int, str]
MAX_SEED = 2**64 - 1
"""Largest seed a ``torch.Generator`` accepts."""


def _as_int(part: Part) -> int:
    if isinstance(part, bool) or not isinstance(part, (int, np.integer, str)):
        raise InputError(f"seed identity parts must be int or str, got {type(part).__name__} {part!r}")
    if isinstance(part, str):
        return int.from_bytes(hashlib.blake2b(part.encode(), digest_size=8).digest(), "little")
    part = int(part)
    if not 0 <= part < 2**64:
        raise InputError(f"seed identity parts must be in [0, 2^64), got {part}")
    return part


def _words(part: Part) -> list[int]:
    value = _as_int(part)
    return [int(isinstance(part, str)), value & 0xFFFFFFFF, value >> 32]


def unit_seed(base: int, *identity: Part) -> int:
    """A 63-bit seed for the unit ``identity`` under the run seed ``base``.

    Parts are ints in [0, 2^64) or strings; the encoding (module docstring) is injective, so
    distinct identities never share an entropy sequence.
    """
    parts = (base, *identity)
    entropy = [len(parts)] + [word for part in parts for word in _words(part)]
    return int(np.random.SeedSequence(entropy).generate_state(2, np.uint64)[0] >> np.uint64(1))


def generator(seed: int, device: Union[str, torch.device] = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (an integer in [0, 2^64))."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) <= MAX_SEED:
        raise InputError(f"seed must be an integer in [0, 2^64), got {seed!r}")
    try:
        g = torch.Generator(device=device)
    except RuntimeError as exc:
        raise DeviceError(f"cannot create a random generator on device {device!r}: {exc}") from None
    g.manual_seed(int(seed))
    return g


@contextlib.contextmanager
def pinned_global_rngs(seed: int, device: Union[str, torch.device] = "cpu") -> Iterator[None]:
    """Inside: torch's global generators (CPU, and CUDA when ``device`` is cuda), numpy's legacy
    global generator and Python's ``random`` start from ``seed``; on exit each is restored.

    A verifier must draw from the generator it is given, and the battery checks that it does (the
    same-seed check perturbs the global state between two runs). Pinning the global state per
    battery cell makes even a verifier that breaks this rule give the same outputs, hence the same
    report, on every path (one process, an isolated child, a Dask worker), while it still fails
    that check."""
    torch_state = torch.get_rng_state()
    on_cuda = str(device).startswith("cuda") and torch.cuda.is_available()
    cuda_state = torch.cuda.get_rng_state_all() if on_cuda else None
    numpy_state = np.random.get_state()
    python_state = random.getstate()
    try:
        torch.manual_seed(seed)  # seeds every CUDA device too
        np.random.seed(seed % 2**32)
        random.seed(seed)
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)
        np.random.set_state(numpy_state)
        random.setstate(python_state)


@contextlib.contextmanager
def torch_threads(n: Optional[int] = 1) -> Iterator[None]:
    """Run the body on ``n`` torch threads and at most ``n`` BLAS threads, the caller's settings
    restored after; ``n`` None leaves them as they are.

    The in-process helpers (``speccheck.sample``, ``SpeculativeSampler.run``, ``run_cells``,
    ``measure_acceptance``, ``battery(..., isolate=False)``) run inside it with ``n = 1`` by
    default: on a machine shared with other work, torch's default of one thread per core is
    several times slower than one thread for these small batches."""
    if check_threads(n) is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        with threadpool_limits(limits=int(n)):
            yield
    finally:
        torch.set_num_threads(before)


#: the most threads ``threads=`` accepts
MAX_THREADS = 1024


def check_threads(n: Optional[int]) -> Optional[int]:
    """``n`` if it is None or an integer in [1, MAX_THREADS]; else :class:`InputError` naming ``threads``."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_THREADS):
        raise InputError(f"threads must be None or an integer in [1, {MAX_THREADS}], got threads={n!r}")
    return n


def one_thread() -> contextlib.AbstractContextManager[None]:
    """Run the body on one torch thread and one BLAS thread (restored after).

    A multi-threaded reduction sums in an order set by the thread count, so a dot product of
    20 000 rows can differ in its last bit between a two-thread parent process and a one-thread
    Dask worker. Statistics judged inside this context are bit-identical whichever process
    computes them."""
    return torch_threads(1)
