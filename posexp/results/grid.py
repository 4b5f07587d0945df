"""A method's settings grid as a grid: where two or more settings of one method vary among its
specs (``self_extend(group=2|4,window=8|16)``), a table and a heat map of setting × setting at
each length multiple, each cell the mean ± std over seeds with n, the method's defaults marked.

A method's defaults are those its settings declare (``posexp.extension.settings``), at their
effective values for the multiple's factor s and L0 (self_extend's window L0 / 4, its group the
smallest that reaches the length): a head is marked where its value is the default, the cell
whose every setting is the default is framed (heat map) or bold (table), and a default that
the grid does not hold is said in words.

Rows and columns are the settings' values in numeric order; a third varying setting splits the
grid into one per value of it (named in the title).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from posexp.results.summary import cell_text

DEFAULT_MARK = "*"  # beside a value that is the method's default
# A panel's colour scale spans at least this share of its values: a spread of 0.001% is not
# painted from one end of the colour map to the other.
MIN_SPAN = 0.02


@dataclass(frozen=True)
class Grid:
    """One method's grid for one PE (and lineage), protocol and metric, at every length."""

    pe: str
    lineage: str
    method: str
    protocol: str
    metric: str
    rows: str  # the setting along the rows
    columns: str  # the setting along the columns
    fixed: tuple[tuple[str, Any], ...]  # the other varying settings, at one value each
    cells: pd.DataFrame  # the summary's rows of this grid
    defaults: dict[str, Any]  # the method's declared defaults (None: the value s and L0 give)

    @property
    def title(self) -> str:
        """``self_extend: group × window (RoPE, nonoverlap, ppl)``."""
        fixed = "".join(f", {k}={_text(v)}" for k, v in self.fixed)
        tag = f" [{self.lineage}]" if self.lineage else ""
        return (
            f"{self.method}: {self.rows} × {self.columns}{fixed} "
            f"({self.pe}{tag}, {self.protocol}, {self.metric})"
        )

    def multiples(self) -> list[float]:
        """The length multiples the grid was scored at, ascending."""
        return sorted(set(self.cells["x_l0"]))

    def axis(self, name: str) -> list[Any]:
        """A setting's values, in numeric order."""
        values = {_hashable(s[name]): s[name] for s in self.cells["settings"]}
        return [values[k] for k in sorted(values, key=_order)]

    def values(self, x_l0: float) -> tuple[list[list[float]], list[list[str]]]:
        """(means, cell texts) at one multiple, rows × columns (nan / '–' where none)."""
        rows, cols = self.axis(self.rows), self.axis(self.columns)
        means = [[math.nan] * len(cols) for _ in rows]
        texts = [["–"] * len(cols) for _ in rows]
        at = self.cells[self.cells["x_l0"] == x_l0]
        for _, c in at.iterrows():
            i = [_hashable(v) for v in rows].index(_hashable(c["settings"][self.rows]))
            j = [_hashable(v) for v in cols].index(_hashable(c["settings"][self.columns]))
            means[i][j] = c["mean"]
            texts[i][j] = cell_text(c["mean"], c["std"], c["n"], 3 if self.metric != "ppl" else 2)
        return means, texts

    def defaults_at(self, x_l0: float) -> dict[str, Any]:
        """The method's defaults at one multiple, each null at the value it stands for there
        (the factor s and L0 of the grid's cells at that multiple); {} for a method no longer
        registered."""
        from posexp.extension.registry import effective_params, get_extension

        at = self.cells[self.cells["x_l0"] == x_l0]
        if at.empty or not self.defaults:
            return {}
        first = at.iloc[0]
        try:
            method = get_extension(self.method)
            return effective_params(method, self.defaults, float(first["factor"]), int(first["l0"]))
        except Exception:  # a method no longer registered: no default to mark
            return {}

    def default_cell(self, x_l0: float) -> tuple[int, int] | None:
        """(row, column) of the cell whose every setting is the method's default at this
        multiple, None where the grid does not hold it."""
        defaults = self.defaults_at(x_l0)
        if not defaults:
            return None
        rows, cols = self.axis(self.rows), self.axis(self.columns)
        at = self.cells[self.cells["x_l0"] == x_l0]
        for settings in at["settings"]:
            if all(_hashable(settings.get(k)) == _hashable(v) for k, v in defaults.items()):
                i = [_hashable(v) for v in rows].index(_hashable(settings[self.rows]))
                j = [_hashable(v) for v in cols].index(_hashable(settings[self.columns]))
                return i, j
        return None

    def defaults_text(self, x_l0: float) -> str:
        """The defaults of the grid's settings at this multiple: ``group=3, window=16``."""
        defaults = self.defaults_at(x_l0)
        names = [self.rows, self.columns, *(n for n, _ in self.fixed)]
        return ", ".join(f"{n}={_text(defaults[n])}" for n in names if n in defaults)

    def label(self, name: str, value: Any, x_l0: float | None = None) -> str:
        """A row or column head: the value, marked when it is the method's default (at the
        multiple ``x_l0``, where a null default stands for a value that depends on it)."""
        defaults = self.defaults if x_l0 is None else self.defaults_at(x_l0)
        default = defaults.get(name)
        mark = (
            DEFAULT_MARK if default is not None and _hashable(default) == _hashable(value) else ""
        )
        return f"{name}={_text(value)}{mark}"

    def table(self, x_l0: float) -> pd.DataFrame:
        """The grid at one multiple as a table of cell texts (the default cell in bold)."""
        _, texts = self.values(x_l0)
        cell = self.default_cell(x_l0)
        if cell is not None:
            i, j = cell
            texts[i][j] = f"**{texts[i][j]}**"
        return pd.DataFrame(
            texts,
            index=[self.label(self.rows, v, x_l0) for v in self.axis(self.rows)],
            columns=[self.label(self.columns, v, x_l0) for v in self.axis(self.columns)],
        )


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _order(value: Any) -> tuple:
    """Numbers in numeric order, then everything else by its text."""
    if isinstance(value, bool) or value is None:
        return (1, str(value))
    if isinstance(value, (int, float)):
        return (0, float(value))
    return (1, str(value))


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def grids(summary: pd.DataFrame) -> list[Grid]:
    """Every grid the summary holds: per PE, lineage, method, protocol and metric whose specs
    vary in two or more settings (in setting-name order: the first two span the grid)."""
    from posexp.extension.registry import get_extension, method_params

    out: list[Grid] = []
    if summary.empty:
        return out
    keys = ["pe", "lineage", "method", "protocol", "metric"]
    for (pe, lin, method, protocol, metric), group in summary.groupby(keys, sort=False):
        settings = list(group["settings"])
        names = sorted({k for s in settings for k in s})
        varying = [n for n in names if len({repr(s.get(n)) for s in settings}) > 1]
        if len(varying) < 2:
            continue
        try:
            defaults = method_params(get_extension(method), {})
        except Exception:  # a method no longer registered: no default to mark
            defaults = {}
        rows, cols, rest = varying[0], varying[1], varying[2:]
        splits = group.groupby(
            group["settings"].map(lambda s, rest=rest: tuple(repr(s.get(n)) for n in rest)),
            sort=False,
        )
        for _, part in splits:
            first = part.iloc[0]["settings"]
            fixed = tuple((n, first.get(n)) for n in rest)
            out.append(Grid(pe, lin, method, protocol, metric, rows, cols, fixed, part, defaults))
    return out


def grid_markdown(grid: Grid, pe_label: str | None = None) -> str:
    """A grid's tables, one per length multiple, as Markdown."""
    lines = []
    for x in grid.multiples():
        table = grid.table(x)
        length = int(grid.cells[grid.cells["x_l0"] == x]["length"].iloc[0])
        defaults = grid.defaults_text(x)
        where = (
            ""
            if not defaults
            else f"; the defaults ({defaults}) in bold"
            if grid.default_cell(x) is not None
            else f"; the defaults ({defaults}) are not in the grid"
        )
        lines += [
            "",
            f"At {x:g}× L0 ({length:,} tokens{where}):",
            "",
            "| " + " | ".join([f"{grid.rows} \\\\ {grid.columns}", *table.columns]) + " |",
            "|" + "|".join([":--", *["--:"] * len(table.columns)]) + "|",
        ]
        for label, row in table.iterrows():
            lines.append("| " + " | ".join([str(label), *row]) + " |")
    return "\n".join(lines)


def _colorbar(fig: Any, image: Any, ax: Any, label: str) -> None:
    """A panel's own colour bar, its ticks plain numbers with one count of decimals."""
    from matplotlib.ticker import MaxNLocator, NullFormatter

    from posexp.results.curves import same_decimals_formatter

    bar = fig.colorbar(image, ax=ax, shrink=0.8, label=label)
    bar.ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
    bar.ax.yaxis.set_major_formatter(same_decimals_formatter())
    bar.ax.yaxis.set_minor_formatter(NullFormatter())


def heat_map(grid: Grid, title: str) -> Any:
    """The grid as heat maps, one panel per length multiple (a shared colour scale, each cell
    annotated with its mean ± std and n, the defaults marked in the heads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from posexp.results.figures import figure_title, panel_title

    multiples = grid.multiples()
    cols = min(len(multiples), 3)
    rows_n = math.ceil(len(multiples) / cols)
    n_rows, n_cols = len(grid.axis(grid.rows)), len(grid.axis(grid.columns))
    width = max(3.6, 1.3 * n_cols + 1.6)
    fig, axes = plt.subplots(
        rows_n,
        cols,
        figsize=(width * cols + 1.0, (0.7 * n_rows + 1.8) * rows_n + 0.8),
        squeeze=False,
        layout="constrained",
    )
    for ax, x in zip(axes.flat, multiples, strict=False):
        means, texts = grid.values(x)
        # Each multiple its own colour scale: a grid compares settings at one length, and a
        # scale shared with longer lengths would paint every cell of a short one alike.
        finite = [v for row in means for v in row if math.isfinite(v) and v > 0]
        low, high = (min(finite), max(finite)) if finite else (1.0, 2.0)
        middle = (low + high) / 2
        if high - low < MIN_SPAN * middle:  # cells equal to the shown digits look alike
            low, high = middle * (1 - MIN_SPAN / 2), middle * (1 + MIN_SPAN / 2)
        norm = (
            matplotlib.colors.LogNorm(low, high)
            if grid.metric == "ppl"
            else matplotlib.colors.Normalize(low, high)
        )
        image = ax.imshow(
            means, cmap="viridis_r" if grid.metric == "ppl" else "viridis", norm=norm, aspect="auto"
        )
        for i, line in enumerate(texts):
            for j, text in enumerate(line):
                shade = image.cmap(image.norm(means[i][j])) if not math.isnan(means[i][j]) else None
                # dark text on light cells, light on dark: luminance of the cell's colour
                light = shade is None or 0.3 * shade[0] + 0.59 * shade[1] + 0.11 * shade[2] > 0.5
                ax.text(
                    j,
                    i,
                    text.replace(" (", "\n("),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if light else "white",
                )
        columns = [grid.label(grid.columns, v, x) for v in grid.axis(grid.columns)]
        ax.set_xticks(range(n_cols), columns, fontsize=8)
        ax.set_yticks(
            range(n_rows), [grid.label(grid.rows, v, x) for v in grid.axis(grid.rows)], fontsize=8
        )
        cell = grid.default_cell(x)
        if cell is not None:  # the method's defaults: a frame around their cell
            i, j = cell
            ax.add_patch(
                Rectangle(
                    (j - 0.47, i - 0.47), 0.94, 0.94, fill=False, edgecolor="red", linewidth=2.2
                )
            )
        length = int(grid.cells[grid.cells["x_l0"] == x]["length"].iloc[0])
        defaults = grid.defaults_text(x)
        note = f"\ndefault {defaults}: not in the grid" if defaults and cell is None else ""
        panel_title(ax, f"{x:g}× L0 ({length:,} tokens){note}")
        _colorbar(fig, image, ax, grid.metric)
    for ax in list(axes.flat)[len(multiples) :]:
        ax.set_visible(False)
    marked = any(
        grid.label(n, v, x).endswith(DEFAULT_MARK)
        for x in multiples
        for n in (grid.rows, grid.columns)
        for v in grid.axis(n)
    )
    framed = any(grid.default_cell(x) is not None for x in multiples)
    key = [f"{DEFAULT_MARK}: the method's default"] if marked else []
    key += ["framed: the default cell"] if framed else []
    figure_title(fig, title + "".join(f"; {k}" for k in key))
    return fig
