"""The eval figures: tick labels with one number of decimals, a note on zoomed axes, no piles."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from posexp.results.curves import (  # noqa: E402
    decimals_needed,
    plot_accuracy,
    plot_ppl,
    same_decimals_formatter,
    zoom_note,
)
from posexp.results.positions import plot_per_position  # noqa: E402


def test_ticks_of_one_axis_share_their_decimals():
    assert decimals_needed(5.0) == 0 and decimals_needed(10.72) == 2
    assert same_decimals_formatter().format_ticks([10.7, 10.72, 10.8]) == [
        "10.70",
        "10.72",
        "10.80",
    ]
    assert same_decimals_formatter().format_ticks([5, 10, 20]) == ["5", "10", "20"]


def test_zoomed_axes_say_how_small_the_spread_is():
    assert zoom_note([10.0, 10.03]) == " (values span only 0.3%)"
    assert zoom_note([10.0, 12.0]) == ""


def records(ppls):
    return [
        {"method": "none", "protocol": "nonoverlap", "length": n, "ppl": p}
        for n, p in zip((64, 128, 256), ppls, strict=True)
    ]


def test_ppl_plot_labels_its_ticks_and_a_flat_axis():
    fig = plot_ppl(records([5.0, 5.01, 5.02]), 64, "t")
    ax = fig.axes[0]
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and len({len(t.split(".")[-1]) for t in labels}) == 1  # same decimals
    assert ax.get_ylabel().endswith("(values span only 0.4%)")


def test_a_method_scored_at_some_lengths_breaks_its_line_where_it_has_none():
    import math

    partial = [{**r, "method": "yarn"} for r in records([5.0, 5.1, 5.2]) if r["length"] != 128]
    fig = plot_ppl(records([5.0, 5.5, 6.0]) + partial, 64, "t")
    (yarn,) = [line for line in fig.axes[0].lines if line.get_label().startswith("yarn")]
    assert yarn.get_label() == "yarn (not scored at 128)"
    assert math.isnan(dict(zip(yarn.get_xdata(), yarn.get_ydata(), strict=True))[128])


def curve(n):
    return {"start": [0, 8], "end": [8, 16], "loss": [2.0 + n, 2.5 + n], "protocol": "nonoverlap"}


def test_per_position_draws_raw_buckets_only_for_two_methods_or_fewer():
    two = {"length": 16, "train_length": 8, "methods": {"a": curve(0), "b": curve(1)}}
    three = {**two, "methods": {"a": curve(0), "b": curve(1), "c": curve(2)}}
    assert len(plot_per_position(two, "t").axes[0].lines) == 2 * 2 + 1  # + the training line
    fig = plot_per_position(three, "t")
    assert len(fig.axes[0].lines) == 3 + 1 and "faint" not in fig.axes[0].get_title()


def test_a_depth_sweep_wraps_its_panels_three_to_a_row():
    from posexp.results.curves import plot_accuracy

    depths = [0, 0.1, 0.25, 0.5, 0.75, 1]
    recs = [
        {"method": "none", "protocol": "exact_match", "depth": d, "length": n, "accuracy": 0.5}
        for d in depths
        for n in (76, 122)
    ]
    fig = plot_accuracy(recs, (76, 122), "tokens", "passkey")
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == [
        f"exact-match accuracy, key at depth {d:g}" for d in depths
    ]
    assert fig.axes[0].get_gridspec().get_geometry() == (2, 3)
    five = plot_accuracy([r for r in recs if r["depth"] != 1], (76, 122), "tokens", "passkey")
    assert sum(ax.get_visible() for ax in five.axes) == 5  # the sixth cell stays empty


def test_a_narrow_ppl_range_gets_several_labelled_ticks_inside_it():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.results.curves import plain_log_axes

    fig, (narrow, wide) = plt.subplots(1, 2)
    lengths = [64, 128, 256, 512]
    narrow.plot(lengths, [11.6, 11.8, 11.9, 12.1])
    narrow.plot(lengths, [19.9, 19.9, 20.0, 20.0])
    plain_log_axes(narrow, lengths)
    wide.plot(lengths, [5, 9, 40, 300])
    plain_log_axes(wide, lengths)
    fig.canvas.draw()
    low, high = narrow.get_ylim()
    inside = [t for t in narrow.get_yticks() if low <= t <= high]
    assert len(inside) >= 4  # a log locator had labelled only 15 and 20 here
    assert all(
        label.get_text()
        for label in narrow.get_yticklabels()
        if low <= label.get_position()[1] <= high
    )
    assert {10.0, 100.0} <= set(wide.get_yticks())  # decades on a wide range, as before
    plt.close(fig)


def test_the_shared_legend_names_each_panels_gaps_and_keeps_a_methods_style():
    # Was panel one's legend alone: a method scored at fewer lengths in another panel's key
    # depth read as complete, one absent from panel one was not in it, and a method took the
    # next colour of each panel (pi blue where none was missing, orange beside it).
    from posexp.results.curves import plot_accuracy

    cells = {
        ("none", 0.0): (122, 250, 506),
        ("pi", 0.0): (122, 250, 506),
        ("pi", 0.25): (122, 506),
        ("yarn", 0.5): (122, 250, 506),
        ("pi", 0.5): (122, 250),
    }
    recs = [
        {"method": m, "protocol": "exact_match", "depth": d, "length": n, "accuracy": 0.5}
        for (m, d), lengths in cells.items()
        for n in lengths
    ]
    fig = plot_accuracy(recs, (76, 122), "tokens", "passkey")
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "none",
        "pi (not scored at 506 in key at depth 0.5)",  # 250 at 0.25: no other line has it there
        "yarn",
        "training sizes (76–122)",
    ]
    pi = [line for ax in fig.axes for line in ax.lines if line.get_label().startswith("pi")]
    assert len(pi) == 3 and len({line.get_color() for line in pi}) == 1
    assert len({line.get_marker() for line in pi}) == 1


def test_a_legend_note_groups_the_panels_that_lack_the_same_lengths():
    from posexp.results.curves import gaps_note

    lacks = {"niah_multikey": [482], "niah_single": [128, 482], "variable_tracking": [128, 482]}
    assert gaps_note(lacks) == (
        " (not scored at 482 in niah_multikey; 128, 482 in niah_single, variable_tracking)"
    )
    assert gaps_note({"copy": [8], "reverse": [8]}) == " (not scored at 8)"  # the same everywhere
    assert gaps_note({"copy": [], "reverse": []}) == ""


def mixture(cells: dict[tuple[str, float | None, int], float]) -> list[dict]:
    """A RULER mixture's records of niah_single: (method, depth, length) -> score."""
    return [
        {"method": m, "protocol": "string_match_all", "task": "niah_single", "depth": d}
        | {"length": n, "metric": "score", "score": v}
        for (m, d, n), v in cells.items()
    ]


def test_a_mixtures_figure_averages_the_depths_every_method_and_length_has():
    # pi scored again with --depths 0.25 (score 0 there): its point averaged 0, 0.25 and 1
    # (0.33) beside none's 0 and 1 (0.50), though both score the same at those depths.
    from posexp.results.depths import over_depths, panel

    cells = {(m, d, n): d for m in ("none", "pi") for d in (0.0, 1.0) for n in (226, 482)}
    cells |= {("pi", 0.25, 226): 0.0, ("pi", 0.25, 482): 0.0}
    out = over_depths(mixture(cells), "score")
    assert {(r["method"], r["length"]): r["score"] for r in out} == {
        ("none", 226): 0.5,
        ("none", 482): 0.5,
        ("pi", 226): 0.5,
        ("pi", 482): 0.5,
    }
    assert {panel(r) for r in out} == {
        "niah_single, mean over needle depths 0, 1; left out: pi at 226, 482 (depth 0.25)"
    }
    fig = plot_accuracy(out, (76, 226), "tokens", "t", "score")
    assert "left out: pi at 226, 482 (depth 0.25)" in fig.axes[0].get_title().replace("\n", " ")


def test_a_mixture_task_with_no_depth_every_cell_has_keeps_a_panel_per_depth():
    # pi at 482 scored at 0.25 only: a mean over it would stand beside means over 0 and 1.
    from posexp.results.depths import over_depths, panel

    cells = {(m, d, 226): d for m in ("none", "pi") for d in (0.0, 1.0)}
    cells |= {("pi", 0.25, 482): 0.25}
    out = over_depths(mixture(cells), "score")
    assert sorted(out, key=str) == sorted(mixture(cells), key=str)
    assert {panel(r) for r in out} == {
        "niah_single, needle at depth 0",
        "niah_single, needle at depth 0.25",
        "niah_single, needle at depth 1",
    }


def test_curves_over_positions_keep_a_linear_y_axis_that_may_cross_zero():
    from posexp.results.curves import Curve, Panel, plot_panels
    from posexp.results.style import pe_style

    gain = Curve("RoPE", {128: -0.2, 256: 0.1, 512: 0.4}, pe_style("rope"), "-", {256: (0.0, 0.2)})
    fig = plot_panels(
        [Panel("gain", [gain])],
        "t",
        "gain (nats)",
        marks=[(64, ":")],
        xlabel="position in the document",
        log_y=False,
        zero_line=True,
    )
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear" and ax.get_xscale() == "log"
    assert ax.get_xlabel() == "position in the document"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["128", "256", "512"]
    flat = [line for line in ax.get_lines() if list(line.get_ydata()) == [0, 0]]
    assert len(flat) == 1  # the zero line
    assert ax.get_ylim()[0] < -0.2 < 0.4 < ax.get_ylim()[1]
    ppl = Curve("RoPE", {128: 9.0, 256: 11.0}, pe_style("rope"), "-")
    assert plot_panels([Panel("ppl", [ppl])], "t", "ppl").axes[0].get_yscale() == "log"


def test_a_metric_outside_zero_to_one_is_not_clipped_to_it():
    rows = [
        {"protocol": "context_gain", "method": "none", "name": "none", "length": n, "gain": g}
        for n, g in ((128, -0.4), (256, 1.6))
    ]
    ax = plot_accuracy(rows, (64, 64), "tokens", "t", "gain").axes[0]
    assert ax.get_ylim()[0] < -0.4 and ax.get_ylim()[1] > 1.6
    share = [{**r, "gain": 0.5} for r in rows]
    assert plot_accuracy(share, (64, 64), "tokens", "t", "gain").axes[0].get_ylim() == (-0.03, 1.03)


def test_bucket_bands_average_the_seeds_that_measured_each_bucket():
    import math
    import statistics

    import pytest

    from posexp.results.curves import bucket_bands

    bands = bucket_bands([[1.0, 2.0, None], [3.0, 4.0, 5.0], [2.0, math.nan, 6.0]])
    assert [n for *_, n in bands] == [3, 2, 2]
    assert bands[0][:2] == pytest.approx((2.0, 1.0))
    assert bands[1][:2] == pytest.approx((3.0, statistics.stdev([2.0, 4.0])))
    assert bands[2][:2] == pytest.approx((5.5, statistics.stdev([5.0, 6.0])))
    assert math.isnan(bucket_bands([[None]])[0][0])


def test_a_runs_context_use_figure_shows_each_method_at_the_longest_length():
    from posexp.results.curves import plot_run_buckets
    from posexp.results.style import method_style

    def rec(method, length, loss):
        edges = [0, 1, 2, 4][: len(loss) + 1]
        return {
            "protocol": "doc_position",
            "method": method,
            "name": method,
            "length": length,
            "position_edges": edges,
            "position_loss": loss,
        }

    rows = [
        rec("none", 2, [3.0, 2.0]),
        rec("none", 4, [3.0, 2.0, 1.5]),
        rec("pi", 4, [3.1, 2.1, 1.6]),
    ]
    fig = plot_run_buckets(rows, "doc_position", 2, "t")
    ax = fig.axes[0]
    drawn = {
        line.get_label(): line for line in ax.get_lines() if line.get_label() in ("none", "pi")
    }
    assert list(drawn["none"].get_xdata()) == [1, 2, 4]
    assert list(drawn["none"].get_ydata()) == [3.0, 2.0, 1.5]
    assert drawn["pi"].get_color() == method_style("pi", "pi").color
    assert plot_run_buckets(rows, "context_gain", 2, "t") is None


def test_a_panel_with_no_finite_value_draws_without_a_numpy_warning():
    # Every cell of a panel past a learned table (no number): its y range was (inf, -inf), and
    # the tick choice divided them ("invalid value encountered in scalar divide" in reports).
    import math
    import warnings

    from posexp.results.curves import Curve, Guide, Panel, plot_panels, plot_scores
    from posexp.results.style import method_style

    style = method_style("none")
    measured = Curve("none", {64: 10.0, 128: 12.0}, style, "-")
    empty = Curve("yarn", {64: math.nan, 128: math.nan}, style, "-")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plot_panels([Panel("a", [measured]), Panel("b", [empty])], "t", "ppl")
        scores = plot_scores(
            [Panel("copy", [Curve("rope", {4: 1.0}, style, "-")]), Panel("sort", [])],
            "t",
            "accuracy",
            "size",
            [Guide("span", (1, 4), "training sizes")],
        )
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 2
    assert len(scores.axes) == 2
