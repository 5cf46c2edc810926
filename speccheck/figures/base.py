"""What every figure is: a pure ``compute`` returning :class:`FigureData` (tables + notes), and a
``draw`` turning that data into a matplotlib figure. The registry lives in ``__init__``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from speccheck.figures.style import Table


@dataclass
class FigureData:
    """The data behind one figure. ``tables['main']`` is written to ``<stem>.csv``, any other
    key ``k`` to ``<stem>-<k>.csv``. ``notes``: short human-readable remarks (what was skipped,
    settings), carried into the run manifest; ``meta``: JSON-able settings."""

    tables: dict[str, Table]
    notes: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def main(self) -> Table:
        return self.tables["main"]


@dataclass
class FigureConfig:
    """Run settings shared by all figures.

    quick: CI sizes (coarse delta grids, tiny sweeps). sweep_dir: a resumable sampler sweep
    directory for the measured figures (None: a temporary one). battery_suite: the suite
    figure 7's kill matrix runs (None: a tiny one for quick, 'smoke' for full). seed: base seed
    of every randomised computation."""

    quick: bool = False
    sweep_dir: Optional[str] = None
    sweep_run: bool = True  # False: only read sweep_dir (missing cells are noted, not run)
    seed: int = 0
    battery_suite: Optional[str] = None  # suite of figure 7's kill matrix (None: per quick/full)
    battery_json: Optional[str] = None  # read figure 7's reports from `speccheck battery --mutants --json`
    log: Callable[[str], None] = print
    cache: dict = field(default_factory=dict)  # shared between figures within one run


@dataclass(frozen=True)
class FigureSpec:
    """One figure: its file stem, a short name for ``--only``, the claim it checks, the paper
    figure it reproduces (and where ours differs), and its compute/draw pair."""

    stem: str
    name: str
    claim: str
    paper: str
    compute: Callable[[FigureConfig], FigureData]
    draw: Callable[[FigureData], object]
    differs: str = ""  # where ours differs from the paper's figure
