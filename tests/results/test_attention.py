"""The figures of where attention goes: a panel per layer, a line per head and their mean, the
uniform reference; a sweep's per-layer numbers in each PE's registered colour."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch

from posexp.model.attention_stats import AttentionStats
from posexp.results.attention import (
    HEAD_MEAN,
    plot_distance,
    plot_entropy,
    plot_layers_by_pe,
    plot_sink,
)
from posexp.results.figures import text_overlaps
from posexp.results.style import pe_style


@pytest.fixture
def rows():
    """Two layers of three heads over 16 tokens: layer 0 on the diagonal, layer 1 uniform."""
    stats = AttentionStats(16, far=8)
    stats.add(0, torch.eye(16).expand(2, 3, 16, 16))
    uniform = torch.tril(torch.ones(16, 16))
    stats.add(1, (uniform / uniform.sum(-1, keepdim=True)).expand(2, 3, 16, 16))
    return stats.rows()


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


@pytest.mark.parametrize(
    ("plot", "table", "reference"),
    [
        (plot_distance, "distance", False),
        (plot_entropy, "entropy", True),
        (plot_sink, "sink", True),
    ],
)
def test_one_panel_per_layer_with_a_line_per_head_and_their_mean(rows, plot, table, reference):
    fig = plot(rows[table], "a title")
    axes = visible_axes(fig)
    assert [ax.get_title() for ax in axes] == ["layer 0", "layer 1"]
    for ax in axes:
        lines = ax.get_lines()
        assert len(lines) == 3 + 1 + reference  # heads, mean, uniform reference
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2–3", "4–7", "8–15"]
    mean = next(line for line in axes[0].get_lines() if line.get_label() == "mean of heads")
    assert mean.get_color() == HEAD_MEAN
    if table == "distance":  # layer 0 on the diagonal: all of it at distance 0
        assert list(mean.get_ydata()) == pytest.approx([1, 0, 0, 0, 0])
    if table == "entropy":  # layer 1 uniform: on its reference line log(i+1)
        layer1 = axes[1].get_lines()
        assert list(layer1[3].get_ydata()) == pytest.approx(list(layer1[4].get_ydata()))
    assert text_overlaps(fig) == []
    plt.close(fig)


def test_a_sweep_figure_draws_each_pe_in_its_colour_with_its_seed_count():
    rows = {
        "RoPE": ("rope", {0: [0.1, 0.2, 0.3], 1: [0.2, 0.2, 0.2]}),
        "ALiBi": ("alibi", {0: [0.0, 0.0, 0.01], 1: [0.0, 0.01, 0.0]}),
    }
    fig = plot_layers_by_pe([("far mass", "mass", rows), ("sink", "share", rows)], "title")
    ax = visible_axes(fig)[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"RoPE (n = 3)", "ALiBi (n = 3)"}
    assert lines["RoPE (n = 3)"].get_color() == pe_style("rope").color
    assert lines["ALiBi (n = 3)"].get_color() == pe_style("alibi").color
    assert list(lines["RoPE (n = 3)"].get_ydata()) == pytest.approx([0.2, 0.2])
    assert text_overlaps(fig) == []
    plt.close(fig)


def test_the_training_length_is_marked_where_its_bucket_begins(rows):
    fig = plot_distance(rows["distance"], "a title", train_length=4)
    for ax in visible_axes(fig):
        (mark,) = [line for line in ax.get_lines() if line.get_label() == "L0 = 4"]
        assert list(mark.get_xdata()) == [2.5, 2.5]  # between 2–3 (index 2) and 4–7 (index 3)
    plt.close(fig)
    fig = plot_entropy(rows["entropy"], "a title", train_length=6)  # inside 4–7
    (mark,) = [line for line in visible_axes(fig)[0].get_lines() if line.get_label() == "L0 = 6"]
    assert list(mark.get_xdata()) == [3, 3]
    plt.close(fig)
    fig = plot_sink(rows["sink"], "a title", train_length=64)  # past the window: no mark
    assert not [line for line in visible_axes(fig)[0].get_lines() if "L0" in line.get_label()]
    plt.close(fig)
