"""One matplotlib style for every speccheck figure, and the CSV tables behind them.

Readable at slide size (large fonts, thick lines), colour-blind-safe (the Okabe-Ito palette for
categories; cividis for ordered quantities), notation as in the papers (delta, K, L, B).
Everything renders with the Agg backend (no display needed).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    import contextlib

import numpy as np

# Okabe & Ito (2008), "Color universal design": distinguishable under the common colour-vision
# deficiencies.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
}
CYCLE = [OKABE_ITO[k] for k in ("blue", "orange", "green", "vermillion", "purple", "sky", "yellow", "black")]

# one colour per verification rule / bound, used by every figure
RULE_COLORS = {
    "rmc": OKABE_ITO["sky"],
    "dgrs": OKABE_ITO["blue"],
    "rass": OKABE_ITO["vermillion"],
    "mcrs": OKABE_ITO["purple"],
    "bound_iid": OKABE_ITO["black"],
    "bound_dependent": OKABE_ITO["green"],
}
RULE_LABELS = {
    "rmc": "RMC",
    "dgrs": "D-GRS",
    "rass": "RASS (optimal $\\omega$)",
    "mcrs": "MCRS",
    "bound_iid": "i.i.d.-list bound",
    "bound_dependent": "dependent-drafts bound",
}
RULE_MARKERS = {"rmc": "o", "dgrs": "s", "rass": "D", "mcrs": "^"}
ORDERED_CMAP = "cividis"  # areas / heatmaps: perceptually uniform, colour-blind safe
ORDERED_LINES_CMAP = "viridis"  # ordered lines (use 0..0.85: the yellow end is unreadable on white)

DELTA = r"$\delta$"
DELTA_LONG = r"normalised mean mismatch $\delta = \|\mu_q - \mu_p\| / \sigma$"

RC = {
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "font.size": 13,
    "axes.titlesize": 14,
    "axes.labelsize": 13,
    "legend.fontsize": 11,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "lines.linewidth": 2.2,
    "lines.markersize": 6,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "svg.fonttype": "none",  # text stays text: small, searchable SVGs
    "svg.hashsalt": "speccheck",  # deterministic ids: re-running does not churn the SVGs
    "savefig.bbox": "tight",
}


def _mpl():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return matplotlib, plt


def style_context() -> contextlib.AbstractContextManager:
    """Context manager applying the speccheck rcParams; draw (and save) figures inside it."""
    matplotlib, _ = _mpl()
    from cycler import cycler

    return matplotlib.rc_context({**RC, "axes.prop_cycle": cycler(color=CYCLE)})


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float = 7.5, height: float = 5.0, **kw: Any) -> tuple:
    """(fig, axes) of ``plt.subplots``; call inside :func:`style_context`. Inches for the whole figure."""
    _, plt = _mpl()
    return plt.subplots(nrows, ncols, figsize=(width, height), **kw)


def save_figure(fig: Any, out_dir: str, stem: str) -> list[str]:
    """Write ``stem.png`` and ``stem.svg`` into ``out_dir``; close the figure; return the paths."""
    _, plt = _mpl()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    with style_context():
        for ext, meta in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
            p = os.path.join(out_dir, f"{stem}.{ext}")
            fig.savefig(p, metadata=meta)
            paths.append(p)
    plt.close(fig)
    return paths


# ----------------------------------------------------------------------------- tables
@dataclass
class Table:
    """A column table (the data behind a figure): ``columns`` maps name -> 1-D array, all of
    one length. Numeric columns are float/int arrays; text columns are arrays of str."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cols = {}
        n = None
        for k, v in self.columns.items():
            a = np.asarray(v)
            if a.ndim != 1:
                raise ValueError(f"column {k!r} must be 1-D, got shape {a.shape}")
            if n is not None and a.size != n:
                raise ValueError(f"column {k!r} has length {a.size}, expected {n}")
            n = a.size
            cols[k] = a
        self.columns = cols

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> "Table":
        """From a list of dicts (all with the same keys, or ``columns``)."""
        if not rows:
            return cls({c: np.empty(0) for c in (columns or [])})
        cols = list(columns) if columns is not None else list(rows[0])
        return cls({c: np.asarray([r[c] for r in rows]) for c in cols})

    def __len__(self) -> int:
        return 0 if not self.columns else next(iter(self.columns.values())).size

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; have {list(self.columns)}")
        return self.columns[name]

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def where(self, **eq: Any) -> "Table":
        """Rows whose columns equal the given values."""
        m = np.ones(len(self), dtype=bool)
        for k, v in eq.items():
            m &= self[k] == v
        return Table({k: a[m] for k, a in self.columns.items()})

    def rows(self) -> list[dict]:
        return [{k: _py(a[i]) for k, a in self.columns.items()} for i in range(len(self))]

    def to_csv(self, path: str) -> str:
        """Floats are written with 17 significant digits (round-trip exact); NaN as 'nan'."""
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.names)
            for r in self.rows():
                w.writerow([_fmt(x) for x in r.values()])
        return path

    @classmethod
    def from_csv(cls, path: str) -> "Table":
        """Read a table written by ``to_csv`` (numeric columns come back as float or int arrays)."""
        with open(path, newline="") as f:
            rd = csv.reader(f)
            names = next(rd)
            data = list(rd)
        cols = {}
        for j, c in enumerate(names):
            vals = [r[j] for r in data]
            cols[c] = _parse_column(vals)
        return cls(cols)


def _py(x):
    if isinstance(x, np.generic):
        return x.item()
    return x


def _fmt(x) -> str:
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return format(x, ".17g")
    return str(x)


def _parse_column(vals: list[str]) -> np.ndarray:
    try:
        ints = [int(v) for v in vals]
        return np.asarray(ints, dtype=np.int64)
    except ValueError:
        pass
    try:
        return np.asarray([float(v) for v in vals], dtype=np.float64)
    except ValueError:
        return np.asarray(vals, dtype=str)


def concat(tables: Iterable[Table]) -> Table:
    """Row-wise concatenation of tables with the same columns."""
    tables = [t for t in tables if len(t)]
    if not tables:
        return Table()
    names = tables[0].names
    return Table({c: np.concatenate([t[c] for t in tables]) for c in names})
