"""Grids as grids: setting x setting at each multiple, numeric order, defaults marked."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

from posexp.results.grid import grid_markdown, grids, heat_map  # noqa: E402
from posexp.results.summary import summarize  # noqa: E402
from tests.results.frames import study  # noqa: E402


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
    defaults = rope.defaults
    marked = [c for c in [*table.index, *table.columns] if c.endswith("*")]
    for label in marked:
        name, value = label.rstrip("*").split("=")
        assert str(defaults[name]) == value
    md = grid_markdown(rope)
    assert "At 2× L0 (128 tokens):" in md and "| group \\\\ window |" in md


def test_the_heat_map_has_a_panel_per_multiple_with_every_cell_annotated():
    (rope,) = [g for g in grids(summarize(study())) if g.pe == "rope"]
    fig = heat_map(rope, rope.title)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == 3
    texts = [t.get_text() for t in panels[1].texts]
    assert "11.21 ± 0.07\n(n = 2)" in texts and len(texts) == 4
