"""Grids as grids: setting x setting at each multiple, numeric order, defaults marked."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

from posexp.results.grid import grid_markdown, grids, heat_map  # noqa: E402
from posexp.results.summary import summarize  # noqa: E402
from posexp.results.table import results_frame  # noqa: E402
from tests.results.frames import row, study  # noqa: E402


def test_two_varying_settings_make_one_grid_per_pe_and_no_grid_for_one():
    found = grids(summarize(study()))
    assert {(g.pe, g.method) for g in found} == {("rope", "self_extend"), ("alibi", "self_extend")}
    (rope,) = [g for g in found if g.pe == "rope"]
    assert (rope.rows, rope.columns) == ("group", "window")
    assert rope.multiples() == [1.0, 2.0, 4.0]
    assert rope.axis("window") == [8, 16]  # numeric, not "16" before "8"


def test_each_cell_is_mean_std_n_and_the_defaults_are_marked():
    (rope,) = [g for g in grids(summarize(study())) if g.pe == "rope"]
    means, texts = rope.values(2.0)
    # group 2, window 16 at 128 tokens: 10 * (1 + 0.1 * 2 / 2) + 0.16 = 11.16, seeds +0, +0.1
    assert math.isclose(means[0][1], 11.21)
    assert texts[0][1] == "11.21 ± 0.07 (n = 2)"
    table = rope.table(2.0)
    # self_extend's defaults at L0 64, 128 tokens: window L0 / 4 = 16; group the smallest G with
    # (L0 - W)·G + W >= L (G >= 2.33: 3) whose largest distance 127 // 3 + 16 - 16 // 3 = 53 < 64
    assert rope.defaults_at(2.0) == {"window": 16, "group": 3, "logn": False}
    marked = [c for c in [*table.index, *table.columns] if c.endswith("*")]
    assert marked == ["window=16*"]  # group 3 is not in the grid: no group head marked
    assert rope.default_cell(2.0) is None
    md = grid_markdown(rope)
    assert "At 2× L0 (128 tokens; the defaults (group=3, window=16) are not in the grid):" in md
    assert "| group \\\\ window |" in md


def default_grid():
    """self_extend group 2|3 x window 8|16 at 128 tokens (L0 64): group 3, window 16 is the
    method's default there."""
    rows = []
    for seed in (0, 1):
        for g in (2, 3):
            for w in (8, 16):
                spec = f"self_extend(group={g},window={w})"
                settings = {"group": g, "window": w}
                rows.append(row("rope", seed, "self_extend", spec, settings, 128, 10 + g + w / 10))
    (grid,) = grids(summarize(results_frame(rows)))
    return grid


def test_the_default_cell_is_bold_in_the_table_and_framed_in_the_heat_map():
    grid = default_grid()
    assert grid.default_cell(2.0) == (1, 1)  # group 3 (second row), window 16 (second column)
    table = grid.table(2.0)
    assert table.iloc[1, 1].startswith("**") and table.iloc[1, 1].endswith("**")
    assert not any(str(v).startswith("**") for v in [table.iloc[0, 0], table.iloc[0, 1]])
    assert list(table.index) == ["group=2", "group=3*"]
    assert "the defaults (group=3, window=16) in bold" in grid_markdown(grid)
    fig = heat_map(grid, grid.title)
    (panel,) = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    (frame,) = panel.patches
    assert (frame.get_x() + frame.get_width() / 2, frame.get_y() + frame.get_height() / 2) == (
        1.0,
        1.0,
    )
    assert "framed: the default cell" in fig._suptitle.get_text()


def test_the_heat_map_has_a_panel_per_multiple_with_every_cell_annotated():
    (rope,) = [g for g in grids(summarize(study())) if g.pe == "rope"]
    fig = heat_map(rope, rope.title)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == 3
    texts = [t.get_text() for t in panels[1].texts]
    assert "11.21 ± 0.07\n(n = 2)" in texts and len(texts) == 4
