"""The RULER report view: depth and task averages per seed, and effective lengths, by hand."""

from __future__ import annotations

from posexp.commands.report.views.ruler import effective_length


def test_depths_are_averaged_per_seed_and_tasks_only_over_seeds_that_scored_all():
    from posexp.commands.report.views.ruler import depth_means, task_average

    niah = {
        (0.0, 100): {0: 1.0, 1: 0.5},
        (1.0, 100): {0: 0.5, 1: 0.0},
        (0.0, 200): {0: 0.2},
        (1.0, 200): {0: 0.4},
    }
    words = {(None, 100): {0: 0.25, 2: 1.0}}
    (by_task, _) = depth_means({"row": {"niah": niah, "words": words}})
    assert by_task["row"]["niah"] == {100: {0: 0.75, 1: 0.25}, 200: {0: 0.30000000000000004}}
    # seed 1 has no word score and seed 2 no needle score: only seed 0 averages both tasks
    assert task_average(by_task["row"], 100) == {0: (0.75 + 0.25) / 2}
    assert task_average(by_task["row"], 300) == {}


def test_effective_length_is_the_longest_context_up_to_which_every_length_passes():
    context = {240: 256, 496: 512, 1008: 1024, 2032: 2048}
    assert effective_length({240: 0.9, 496: 0.8, 1008: 0.5, 2032: 0.1}, 0.6, context) == 512
    # a later length back above the threshold does not count: the run of passes broke at 1,024
    assert effective_length({240: 0.9, 496: 0.8, 1008: 0.5, 2032: 0.7}, 0.6, context) == 512
    assert effective_length({240: 0.9, 496: 0.9, 1008: 0.9, 2032: 0.9}, 0.6, context) == 2048
    assert effective_length({240: 0.5, 496: 0.9}, 0.6, context) is None
    assert effective_length({240: 0.6}, 0.6, context) == 256  # at the threshold counts
    assert effective_length({240: float("nan")}, 0.6, context) is None
    assert effective_length({240: 0.0, 496: 0.0}, 0.0, context) is None  # nothing learned


def test_the_task_sentence_ranks_tasks_at_1x_and_says_what_is_left_at_the_longest():
    from posexp.commands.report.views.ruler import depth_means, task_sentence

    tasks = {
        "niah_single": {
            (0.0, 226): {0: 1.0, 1: 0.8},
            (1.0, 226): {0: 0.6, 1: 0.6},
            (0.0, 994): {0: 0.1, 1: 0.3},
            (1.0, 994): {0: 0.1, 1: 0.3},
        },
        "common_words": {(None, 226): {0: 0.2, 1: 0.4}, (None, 994): {0: 0.0, 1: 0.0}},
    }
    tasks = depth_means({"rope · none": tasks})[0]["rope · none"]
    context = {226: 256, 994: 1024}
    assert task_sentence(tasks, 226, 994, context, "rope · none") == (
        "\n- rope · none, by task at 256 → 1,024 tokens (seed means): "
        "niah_single 0.75 → 0.20, common_words 0.30 → 0.00."
    )
    assert (
        task_sentence(tasks, 226, 226, context, "rope · none") == ""
    )  # one length: nothing to add


def test_depth_map_files_are_named_by_their_row():
    from posexp.commands.report.views.ruler import file_stems

    rows = ["rope · none", "rope · self_extend(group=4)", "rope / none", "···"]
    assert file_stems(rows) == {
        "rope · none": "rope_none",
        "rope · self_extend(group=4)": "rope_self_extend_group=4",
        "rope / none": "rope_none_2",  # the same file name as the first: its position added
        "···": "3",
    }


def render_ruler(tmp_path, scored: dict[str, tuple[int, ...]], more: tuple[dict, ...] = ()):
    """The RULER section of a report over one stand-in run of a three-task mixture scored with
    each method at its lengths (none of niah_multikey below its smallest size, 178), and
    ``more`` records, and the figures it drew."""
    from types import SimpleNamespace

    from posexp.commands.report.view import ReportContext
    from posexp.commands.report.views.ruler import render

    parts = (("niah_single", 0.0), ("niah_multikey", 0.0), ("variable_tracking", None))
    records = [
        {"metric": "score", "method": m, "task": t, "depth": d, "length": n, "score": 0.5}
        for m, lengths in scored.items()
        for n in lengths
        for t, d in parts
        if t != "niah_multikey" or n >= 178
    ] + [{"metric": "score", "task": "niah_single", **r} for r in more]
    params = {"task": "ruler", "tasks": [t for t, _ in parts], "train_lengths": [76, 226]}
    params["test_lengths"] = [226]
    config = SimpleNamespace(seed=0, data=SimpleNamespace(params=params))
    run = SimpleNamespace(config=config, extrapolate=records, settings={"pe": "rope"}, name="r")
    ctx, figures = ReportContext(tmp_path, [run], []), []
    save = ctx.save_figure
    ctx.save_figure = lambda fig, name: (figures.append(fig), save(fig, name))[1]
    return render(ctx), figures


def test_a_row_scored_at_fewer_lengths_breaks_its_line_where_it_has_no_average(tmp_path):
    # pi's line was drawn straight from 242 to 1,010 tokens across 498, never scored.
    import math

    _, figures = render_ruler(tmp_path, {"none": (226, 482, 994), "pi": (226, 994)})
    ax = figures[0].axes[0]
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    assert set(lines) == {"rope · none", "rope · pi (not scored at 498)"}
    pi = dict(zip(*lines["rope · pi (not scored at 498)"].get_data(), strict=True))
    assert pi[242] == 0.5 and math.isnan(pi[498]) and pi[1010] == 0.5
    assert not any(math.isnan(y) for y in lines["rope · none"].get_ydata())


def test_a_length_below_a_tasks_smallest_is_the_context_of_the_tasks_scored_there(tmp_path):
    # 128 tokens, below niah_multikey's 178, read "194 (0.802×)": a multi-key row of 178
    # tokens, never scored there; the longest row scored is variable_tracking's, 144 tokens.
    md, figures = render_ruler(tmp_path, {"none": (128, 150, 226)})
    assert "| model · method | 144 (0.595×) | 166 (0.686×) | 242 (1×) | effective length |" in md
    # No task average below 178 (niah_multikey is not scored there): no empty tick for them.
    assert [t.get_text() for t in figures[0].axes[0].get_xticklabels()] == ["242"]


def test_a_method_scored_at_one_more_depth_averages_only_the_depths_every_cell_has(tmp_path):
    # pi's niah_single cells also at depth 0.25 (score 0.0 there) averaged 0 and 0.25: 0.25
    # beside none's 0.50 at depth 0 alone, and a task average of 0.42 against 0.50.
    extra = tuple({"method": "pi", "depth": 0.25, "length": n, "score": 0.0} for n in (226, 482))
    md, figures = render_ruler(tmp_path, {"none": (226, 482), "pi": (226, 482)}, extra)
    assert "| rope · pi | 0.50 | 0.50 |" in md and "| rope · pi | niah_single | 0.50 | 0.50 |" in md
    assert "mean over tasks and over needle depth 0, the ones every cell was scored at;" in md
    assert (
        "Left out of the niah_single means so that the cells average the same needle depths (0): "
        "rope · pi at 242, 498 tokens (needle depth 0.25)." in md
    )
    assert "†" not in md


def test_a_cell_without_its_tasks_common_depths_is_marked_in_both_tables_and_the_figure(tmp_path):
    # pi at 1,010 tokens scored at needle depth 0.25 only (the mixture's depth 0 was not).
    extra = ({"method": "pi", "depth": 0.25, "length": 994, "score": 0.0},)
    md, figures = render_ruler(tmp_path, {"none": (226, 482), "pi": (226, 482)}, extra)
    assert "| rope · pi | niah_single | 0.50 | 0.50 | 0.00† |" in md
    # No task average at 1,010 tokens (only niah_single was scored there): nothing to mark.
    assert "| rope · pi | 0.50 | 0.50 | – | 498 |" in md
    assert "mean over tasks and over needle depth 0, those most cells were scored at (†: " in md
    assert (
        "† No niah_single needle depth was scored in every cell: these cells lack some of 0 and "
        "are the mean of the needle depths they have, not comparable with the other cells: "
        "rope · pi at 1,010 tokens (needle depth 0.25)." in md
    )
    labels = [c.get_label() for c in figures[0].axes[0].containers]
    assert labels == ["rope · none", "rope · pi"]
    # Every task at 1,010 tokens: the task average there is marked, in the table and the figure.
    extra += tuple(
        {"method": "pi", "task": t, "depth": d, "length": 994, "score": 0.5}
        for t, d in (("niah_multikey", 0.0), ("variable_tracking", None))
    )
    md, figures = render_ruler(tmp_path, {"none": (226, 482), "pi": (226, 482)}, extra)
    assert "| rope · pi | 0.50 | 0.50 | 0.33† | 498† |" in md
    assert "| rope · pi | variable_tracking | 0.50 | 0.50 | 0.50 |" in md  # no depths: no mark
    labels = [c.get_label() for c in figures[0].axes[0].containers]
    assert "rope · pi († at 1,010: other needle depths)" in labels
