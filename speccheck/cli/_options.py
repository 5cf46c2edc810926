"""Option checks shared by the commands: each returns the value or raises
:class:`~speccheck.errors.UsageError` (exit 2) naming the option and what is allowed.

Domains are stated once here (README / docs/exit-codes.md quote them).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from typing import Optional

from speccheck import errors
from speccheck.errors import UsageError
from speccheck.theory.validate import MAX_K  # noqa: F401 - the one definition, re-exported for the commands

MAX_L = 64                   # draft-tree depth
MAX_TREE_NODES = 1_000_000   # |V| of one draft tree: speccheck.sampler.tree's cap (tests assert equal)
MAX_SEED = 2**63 - 1
# --timeout defaults, per unit: a battery cell (the full suite's largest takes ~1 min on a CPU), a
# contract check, a whole speed-up run, an e2e cell (an SD3.5 cell of 2000 samples takes hours)
TIMEOUT_BATTERY_CELL_S = 900.0
TIMEOUT_CHECK_S = 300.0
TIMEOUT_SPEEDUP_S = 4 * 3600.0
TIMEOUT_E2E_CELL_S = 12 * 3600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MEMORY_SHARE = 0.25          # a request whose estimated working set exceeds this share of RAM is refused


def check_int(value: int, option: str, low: int, high: Optional[int] = None) -> int:
    """``value`` in [low, high]; else UsageError naming ``option`` and the allowed range."""
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise UsageError(f"{option} must be {allowed}, got {value}")
    return value


def check_ints(values: Optional[list], option: str, low: int, high: Optional[int] = None) -> Optional[list]:
    """Every value of a list option in [low, high]; an explicit empty list is refused."""
    for value in check_values(values, option) or []:
        check_int(value, option, low, high)
    return values


def check_float(value: float, option: str, low: float, high: float, *, low_open: bool = False,
                high_open: bool = False) -> float:
    """``value`` finite and in the interval; else UsageError naming ``option`` and the interval."""
    lo_ok = value > low if low_open else value >= low
    hi_ok = value < high if high_open else value <= high
    if not math.isfinite(value) or not (lo_ok and hi_ok):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise UsageError(f"{option} must be a finite number in {interval}, got {value}")
    return value


def check_values(values: Optional[list], option: str) -> Optional[list]:
    """A list option given explicitly must hold at least one value."""
    if values is not None and len(values) == 0:
        raise UsageError(f"{option} needs at least one value")
    return values


def parse_range(values: list[str], option: str, high: Optional[int] = None) -> list[int]:
    """``["1..3", "6"]`` -> ``[1, 2, 3, 6]`` (sorted, unique, each >= 1 and, with ``high``, <= high:
    checked on the range's ends before it is expanded, so ``1..10**12`` is refused, not built)."""
    out: list[int] = []
    for value in values:
        try:
            if ".." in value:
                low, top = (int(x) for x in value.split(".."))
                if high is not None and top > high:
                    raise UsageError(f"--{option} must be integers in [1, {high}], got {value!r}")
                out += list(range(low, top + 1))
            else:
                out.append(int(value))
        except ValueError as exc:
            if isinstance(exc, UsageError):
                raise
            raise UsageError(f"--{option} takes integers or ranges like 1..7, got {value!r}") from None
    if not out or min(out) < 1 or (high is not None and max(out) > high):
        allowed = ">= 1" if high is None else f"in [1, {high}]"
        raise UsageError(f"--{option} must be integers {allowed}, got {values}")
    return sorted(set(out))


def check_seed(seed: Optional[int], option: str = "--seed") -> Optional[int]:
    """None or a seed in [0, 2^63 - 1]."""
    return None if seed is None else check_int(seed, option, 0, MAX_SEED)


def check_threads(threads: Optional[int], option: str = "--threads") -> Optional[int]:
    """None or a torch thread count in [1, 256]."""
    return None if threads is None else check_int(threads, option, 1, 256)


def check_timeout(timeout: float) -> float:
    """``--timeout``: finite seconds in (0, MAX_TIMEOUT_S]."""
    return check_float(timeout, "--timeout", 0.0, MAX_TIMEOUT_S, low_open=True)


def check_device_name(device: str, option: str = "--device") -> str:
    """cpu, cuda or cuda:N (spelling only; availability is the command's business)."""
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise UsageError(f"{option} must be cpu, cuda or cuda:N, got {device!r}")
    return device


def check_cuda_available(device: str, option: str = "--device") -> str:
    """A cuda device only where CUDA is available (DeviceError, exit 2)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise errors.DeviceError(f"{option} {device}: CUDA is not available on this machine")
    return device


def tree_nodes(K: int, L: int) -> int:
    """|V| of the uniform (K, L) tree, stopping once it passes the bound (no huge integers)."""
    total, level = 0, 1
    for _ in range(L + 1):
        total += level
        if total > MAX_TREE_NODES:
            return total
        level *= K
    return total


def check_tree(K: int, L: int, hint: str = "") -> int:
    """|V| of the (K, L) tree, refused above MAX_TREE_NODES naming ``--K`` and ``--L``."""
    nodes = tree_nodes(K, L)
    if nodes > MAX_TREE_NODES:
        raise UsageError(f"--K {K} --L {L}: the draft tree has more than {MAX_TREE_NODES} nodes{hint}")
    return nodes


def check_output_file(path: Optional[str], option: str) -> Optional[str]:
    """An output file we will be able to write: not a folder, its folder creatable and writable.
    Checked before any work starts, so a long job never ends in an unwritable path."""
    if path is None:
        return None
    if not path or os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a folder or empty; give a file path")
    check_output_dir(os.path.dirname(os.path.abspath(path)), option, what=f"the folder of {option} {path!r}")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{option} {path!r} exists and is not writable")
    return path


def check_output_dir(path: str, option: str, what: Optional[str] = None) -> str:
    """Create ``path`` if needed and prove it writable with a probe file."""
    what = what or f"{option} {path!r}"
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{what} exists and is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".speccheck-probe-"):
            pass
    except OSError as exc:
        raise UsageError(f"{what} is not writable ({exc.strerror or exc})") from None
    return path


def check_memory(estimate_bytes: float, what: str) -> None:
    """Refuse a request whose estimated working set exceeds MEMORY_SHARE of physical memory."""
    from speccheck.isolation import physical_memory_bytes

    budget = MEMORY_SHARE * (physical_memory_bytes() or 8 * 2**30)
    if estimate_bytes > budget:
        raise UsageError(f"{what} needs about {estimate_bytes / 2**30:.1f} GiB, more than {MEMORY_SHARE:.0%} of this "
                         f"machine's memory ({budget / 2**30:.1f} GiB); reduce it")


def add_timeout(p: argparse.ArgumentParser, unit: str, default: float) -> None:
    """``--timeout SECONDS``: the bound on one ``unit`` of the command."""
    p.add_argument("--timeout", type=float, default=default, metavar="SECONDS",
                   help=f"stop and exit 2 when one {unit} runs longer than this (default {default:g} s)")


def set_threads(threads: Optional[int]) -> None:
    """torch's CPU threads, when asked for."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def add_protocol_args(p: argparse.ArgumentParser, *, threads_help: str) -> None:
    """The Gaussian-mixture protocol options of ``speedup`` and ``sweep`` (a preset plus overrides);
    their defaults are the preset's, as in :func:`speccheck.sampler.experiments.preset`."""
    p.add_argument("--target", default="gmm-paper", choices=["gmm-paper", "gmm-d512"],
                   help="preset (gmm-paper: d=500, eps=0.1, uniform grid, leaves evaluated; gmm-d512: "
                        "d=512, eps=0.06, flow grid with deterministic ends, leaves not evaluated)")
    p.add_argument("--trajectories", type=int, default=100, help="trajectories per cell, in [2, 100000]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lazy", action=argparse.BooleanOptionalAction, default=True,
                   help="realise only visited branches (same law and NFE as --no-lazy, other draws; default: lazy, "
                        "the preset's and speccheck.api's default)")
    p.add_argument("--prefetch", choices=["nearest", "parent", "none"], default=None)
    p.add_argument("--leaves", action=argparse.BooleanOptionalAction, default=None,
                   help="evaluate leaves too (|V| rows per round) or not (|I| rows)")
    p.add_argument("--freeze", choices=["drift", "velocity", "denoised"], default=None)
    p.add_argument("--grid", choices=["uniform", "shifted", "flow", "edm"], default=None)
    p.add_argument("--steps", type=int, default=None, help="grid steps, in [2, 10000]")
    p.add_argument("--eps", type=float, default=None, help="churn, in (0, 1)")
    p.add_argument("--chain-match", choices=["budget", "rows"], default=None,
                   help="chain compared with a (K, L) tree: same drafted budget B or same rows")
    p.add_argument("--threads", type=int, default=1, help=threads_help)
