"""The passkey report view: rows over seeds, and sentences computed from the per-seed numbers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from posexp.commands.report.views.passkey import (
    gain_sentences,
    learned_sentence,
    rows_of,
)
from posexp.extension import ExtensionConfig
from tests.helpers import record_view


def job(
    seed: int,
    accuracies: dict[tuple[str, float, int], float],
    tuned: bool = False,
    extension: ExtensionConfig | None = None,
    pose: bool = False,
    pe: str = "rope",
):
    """A stand-in for a report Job: its seed, whether it is a fine-tune, its passkey records,
    and its settings (the encoding, ``pe``)."""
    config = SimpleNamespace(
        seed=seed,
        extension=extension or ExtensionConfig(),
        parent="lm" if tuned else None,
        train_length=128 if tuned else None,
        data=SimpleNamespace(params={"task": "passkey"}),
        train=SimpleNamespace(pose=SimpleNamespace(enabled=pose)),
    )
    records = [
        record_view(m, metric="accuracy", depth=d, length=n, accuracy=a)
        for (m, d, n), a in accuracies.items()
    ]
    name = f"s{seed}{'ft' if tuned else ''}{extension.method if extension else ''}"
    settings = {"seed": seed, "pe": pe}
    return SimpleNamespace(
        config=config, extrapolate=records, name=name + "pose" * pose, settings=settings
    )


def per_seed(rows, label: str, size: int) -> dict[int, float]:
    """Seed -> the table's accuracy of row ``label`` at ``size`` (over the common depths)."""
    from posexp.commands.report.views.passkey import seed_means

    return seed_means(rows)[0].get((label, size), {})


def test_rows_keep_every_seed_and_average_depths_per_seed():
    # Every row at both depths: every cell averages 0 and 1.
    none0 = {("none", 0.0, 122): 1.0, ("none", 1.0, 122): 0.5}
    none1 = {("none", 0.0, 122): 0.0, ("none", 1.0, 122): 0.25}
    jobs = [
        job(0, {**none0, ("pi", 0.0, 122): 0.2, ("pi", 1.0, 122): 0.6}),
        job(1, {**none1, ("pi", 0.0, 122): 0.4, ("pi", 1.0, 122): 0.2}),
        job(
            0,
            {("baked:pi", 0.0, 250): 0.9, ("baked:pi", 1.0, 250): 0.5, ("none", 0.0, 250): 0.1},
            tuned=True,
        ),
    ]
    rows = rows_of(jobs)
    assert per_seed(rows, "none (zero-shot)", 122) == {0: 0.75, 1: 0.125}
    assert per_seed(rows, "pi (zero-shot)", 122) == {0: 0.4, 1: 0.30000000000000004}
    # A fine-tune shows only the method it was trained with.
    assert set(rows) == {"none (zero-shot)", "pi (zero-shot)", "pi + fine-tune"}
    assert per_seed(rows, "pi + fine-tune", 250) == {0: 0.7}


def test_a_fine_tune_with_a_setting_changed_gets_its_own_row():
    # YaRN's ablation (scripts/passkey.py's fine-tune with one setting changed) beside the default.
    default = ExtensionConfig("yarn", 2.0, 128)
    changed = ExtensionConfig("yarn", 2.0, 128, {"beta_fast": 8})
    jobs = [
        job(0, {("baked:yarn", 0.0, 250): 0.5}, tuned=True, extension=default),
        job(0, {("baked:yarn", 0.0, 250): 0.9}, tuned=True, extension=changed),
    ]
    rows = rows_of(jobs)
    assert set(rows) == {"yarn + fine-tune", "yarn(beta_fast=8) + fine-tune"}
    assert per_seed(rows, "yarn(beta_fast=8) + fine-tune", 250) == {0: 0.9}
    assert per_seed(rows, "yarn + fine-tune", 250) == {0: 0.5}


def test_a_fine_tune_not_scored_with_its_method_is_named_not_taken_for_the_baseline():
    # Its records without the method (`none`) are not the plain fine-tune's (the baseline row).
    yarn = ExtensionConfig("yarn", 2.0, 128)
    jobs = [
        job(0, {("none", 0.0, 250): 0.0}, tuned=True),
        job(0, {("none", 0.0, 250): 0.77}, tuned=True, extension=yarn),
    ]
    unscored = []
    rows = rows_of(jobs, unscored)
    assert set(rows) == {"none + fine-tune"} and per_seed(rows, "none + fine-tune", 250) == {0: 0.0}
    assert unscored == ["s0ftyarn"]


def test_a_pose_fine_tune_and_a_full_one_of_one_method_keep_their_own_rows():
    yarn = ExtensionConfig("yarn", 2.0, 128)
    jobs = [
        job(0, {("baked:yarn", 0.0, 250): 0.5}, tuned=True, extension=yarn),
        job(0, {("baked:yarn", 0.0, 250): 0.9}, tuned=True, extension=yarn, pose=True),
    ]
    rows = rows_of(jobs)
    assert per_seed(rows, "yarn + fine-tune", 250) == {0: 0.5}
    assert per_seed(rows, "yarn + PoSE fine-tune", 250) == {0: 0.9}


def test_a_changed_setting_is_compared_with_its_methods_default_fine_tune():
    default = ExtensionConfig("yarn", 2.0, 128)
    changed = ExtensionConfig("yarn", 2.0, 128, {"attention_factor": 1.0})
    jobs = [
        job(s, {("baked:yarn", 0.5, 250): a}, tuned=True, extension=default)
        for s, a in ((0, 0.5), (1, 0.6), (2, 0.7))
    ]
    jobs += [
        job(s, {("baked:yarn", 0.5, 250): a}, tuned=True, extension=changed)
        for s, a in ((0, 0.9), (1, 1.0), (2, 1.0))
    ]
    lines = gain_sentences(rows_of(jobs), 250, "2×")
    # paired gaps 0.4, 0.4, 0.3 (mean 0.367) against the larger seed std, the default's 0.1
    assert lines == [
        "- yarn(attention_factor=1) + fine-tune is better than yarn + fine-tune at 2× on accuracy "
        "(0.9667 against 0.6000: beyond seed noise (3.7× the larger seed std, n = 3))."
    ]


def test_learned_sentence_counts_seeds_at_l0():
    jobs = [job(s, {("none", 0.5, 122): a}) for s, a in ((0, 0.9), (1, 0.1), (2, 0.6))]
    assert learned_sentence(rows_of(jobs), 122) == (
        "- Retrieval was learned (zero-shot accuracy at L0 ≥ 0.5) on 2 of 3 seeds "
        "(seed 0: 0.90, seed 1: 0.10, seed 2: 0.60)."
    )


def test_gain_sentence_pairs_seeds_and_calls_noise():
    base = {0: 0.0, 1: 0.1, 2: 0.05}
    ntk = {0: 0.8, 1: 0.9, 2: 0.85}  # +0.8 on every seed: differences have std 0
    pi = {0: 0.5, 1: 0.0, 2: 0.0}  # +0.12 on average, std of the differences 0.30
    jobs = [job(s, {("none", 0.5, 250): a}, tuned=True) for s, a in base.items()]
    jobs += [job(s, {("baked:ntk", 0.5, 250): a}, tuned=True) for s, a in ntk.items()]
    jobs += [job(s, {("baked:pi", 0.5, 250): a}, tuned=True) for s, a in pi.items()]
    lines = gain_sentences(rows_of(jobs), 250, "256 tokens (2× L0)")
    # ntk: gap 0.80 against the sides' seed std 0.05 (16×); pi: gap 0.117 against the paired
    # differences' std 0.333 (0.35×): level, no winner named
    assert lines[0] == (
        "- ntk + fine-tune is better than none + fine-tune at 256 tokens (2× L0) on accuracy "
        "(0.8500 against 0.0500: beyond seed noise (16.0× the larger seed std, n = 3))."
    )
    assert lines[1] == (
        "- pi + fine-tune and none + fine-tune at 256 tokens (2× L0) are level on accuracy "
        "(0.1667 against 0.0500: within seed noise (0.4× the larger seed std, n = 3))."
    )


def test_one_seed_gets_no_verdict():
    jobs = [
        job(0, {("none", 0.5, 250): 0.0}, tuned=True),
        job(0, {("baked:ntk", 0.5, 250): 1.0}, tuned=True),
    ]
    (line,) = gain_sentences(rows_of(jobs), 250, "2×")
    assert "n = 1: no verdict (it needs 3 seeds)" in line


def test_two_rows_with_no_retrieval_are_said_to_have_none_not_a_gap_of_zero():
    # "+0.00" read as a tie between two methods, where neither retrieved a single key.
    jobs = [job(s, {("none", 0.5, 250): 0.0, ("pi", 0.5, 250): 0.0}) for s in (0, 1, 2)]
    jobs += [job(0, {("none", 0.5, 250): 0.0}, tuned=True)]
    jobs += [job(0, {("baked:ntk", 0.5, 250): 0.25}, tuned=True)]
    lines = gain_sentences(rows_of(jobs), 250, "2×")
    assert lines[0] == (
        "- At 2×, neither pi (zero-shot) nor none (zero-shot) retrieves any key "
        "(accuracy 0 at key depth 0.5, n = 3 seeds): nothing to compare."
    )
    # One side retrieving some keys is a gap as before.
    assert lines[1] == (
        "- ntk + fine-tune against none + fine-tune at 2× (accuracy): n = 1: no verdict (it "
        "needs 3 seeds)."
    )


def render_passkey(tmp_path, jobs) -> str:
    """The passkey section of a report over ``jobs`` (stand-ins of 122- and 250-token rows)."""
    from posexp.commands.report.view import ReportContext
    from posexp.commands.report.views.passkey import render

    for j in jobs:
        j.config.data.params.update(train_lengths=[76, 122], test_lengths=[122, 250])
    return render(ReportContext(tmp_path, jobs, ["seed"]))


def test_the_caption_counts_only_seeds_scored_and_names_the_rows_with_none(tmp_path):
    # The passkey run scored at L0 only (the script's criterion step), its fine-tune at both
    # lengths: the caption said "n = 0–1 seed(s)", a cell with no seed counted as n = 0.
    jobs = [
        job(0, {("none", 0.5, 122): 0.0}),
        job(0, {("none", 0.5, 122): 0.0, ("none", 0.5, 250): 0.0}, tuned=True),
    ]
    md = render_passkey(tmp_path, jobs)
    assert "Mean ± sample std over n = 1 seed. – where no seed was scored: none (zero-shot) " in md
    assert "none (zero-shot) at 256 tokens." in md
    assert "0–1" not in md and "seed(s)" not in md


def test_the_caption_gives_the_range_of_seeds_when_cells_differ(tmp_path):
    jobs = [job(s, {("none", 0.5, 122): 1.0, ("none", 0.5, 250): 0.5}) for s in (0, 1, 2)]
    jobs += [job(0, {("pi", 0.5, 122): 1.0, ("pi", 0.5, 250): 0.5})]
    md = render_passkey(tmp_path, jobs)
    assert "Mean ± sample std over n = 1–3 seeds." in md and "no seed was scored" not in md


def test_a_heat_map_cell_no_seed_was_scored_at_is_marked_as_in_the_tables(tmp_path):
    # It read "nan": pi scored at depth 0.25 at 122 tokens only.
    from posexp.commands.report.depth_maps import depth_maps
    from posexp.commands.report.view import ReportContext

    rows = {"pi (zero-shot)": {(0.0, 122): {0: 1.0}, (0.0, 250): {0: 0.5}, (0.25, 122): {0: 0.0}}}
    ctx, figures = ReportContext(tmp_path, [], []), []
    save = ctx.save_figure
    ctx.save_figure = lambda fig, name: (figures.append(fig), save(fig, name))[1]
    depth_maps(ctx, rows, {122: 128, 250: 256}, 128, ("depth", "accuracy", "t"), "maps.png")
    assert [t.get_text() for t in figures[0].axes[0].texts] == ["1.00", "0.50", "0.00", "–"]


def by_depth(seed: int, method: str, depths: tuple[float, ...], sizes=(122, 250), **kw):
    """A job scored at ``depths`` and ``sizes``, its accuracy the key's depth (any method)."""
    return job(seed, {(method, d, n): d for d in depths for n in sizes}, **kw)


def test_a_method_scored_at_one_more_depth_averages_only_the_depths_every_cell_has(tmp_path):
    # pi scored again with --depths 0.25: its cells averaged 0, 0.25, 0.5 and 1 (0.44) beside
    # none's 0, 0.5 and 1 (0.50), a gap that was nothing but the depths.
    jobs = [by_depth(0, "none", (0.0, 0.5, 1.0)), by_depth(0, "pi", (0.0, 0.25, 0.5, 1.0))]
    md = render_passkey(tmp_path, jobs)
    assert "| none (zero-shot) | 0.50 | 0.50 |" in md and "| pi (zero-shot) | 0.50 | 0.50 |" in md
    assert "averaged over key depths 0, 0.5, 1, the ones every cell was scored at;" in md
    assert (
        "Left out of the means so that the cells average the same key depths (0, 0.5, 1): "
        "pi (zero-shot) at 128, 256 tokens (key depth 0.25)." in md
    )
    assert "†" not in md
    # The sentences go through the one rule: one seed, no verdict, no number
    assert "- pi (zero-shot) against none (zero-shot) at " in md
    assert "(accuracy): n = 1: no verdict (it needs 3 seeds)." in md


def test_a_cell_without_the_common_depths_is_marked_and_named(tmp_path):
    # pi at 256 tokens scored at depth 0.25 only: no depth is common to every cell, so that
    # cell (the mean of its own depth) is marked, not set beside the others as if comparable.
    jobs = [
        by_depth(0, "none", (0.0, 0.5, 1.0)),
        by_depth(0, "pi", (0.0, 0.5, 1.0), sizes=(122,)),
        by_depth(0, "pi", (0.25,), sizes=(250,)),
    ]
    jobs[2].extrapolate += jobs.pop(1).extrapolate  # one run: pi's records of both calls
    md = render_passkey(tmp_path, jobs)
    assert "| pi (zero-shot) | 0.50 | 0.25† |" in md and "| none (zero-shot) | 0.50 | 0.50 |" in md
    assert "averaged over key depths 0, 0.5, 1, those most cells were scored at (†: " in md
    assert (
        "† No key depth was scored in every cell: these cells lack some of 0, 0.5, 1 and are the "
        "mean of the key depths they have, not comparable with the other cells: pi (zero-shot) "
        "at 256 tokens (key depth 0.25)." in md
    )
    assert "pi (zero-shot) and none (zero-shot) are not compared: † their cells average" in md


def test_every_heat_map_has_a_column_for_each_length_of_the_report(tmp_path):
    # none, never scored at 256 tokens, got a map of one column beside pi's two, so the maps'
    # columns did not line up; that column is now there, every cell of it –.
    from posexp.commands.report.depth_maps import depth_maps
    from posexp.commands.report.view import ReportContext

    rows = {
        "none (zero-shot)": {(0.0, 122): {0: 1.0}, (1.0, 122): {0: 0.5}},
        "pi (zero-shot)": {(0.0, 122): {0: 1.0}, (0.0, 250): {0: 0.25}, (1.0, 250): {0: 0.0}},
    }
    ctx, figures = ReportContext(tmp_path, [], []), []
    save = ctx.save_figure
    ctx.save_figure = lambda fig, name: (figures.append(fig), save(fig, name))[1]
    depth_maps(ctx, rows, {122: 128, 250: 256}, 128, ("depth", "accuracy", "t"), "maps.png")
    none, pi = figures[0].axes[:2]
    for ax in (none, pi):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1×", "2×"]
    assert [t.get_text() for t in none.texts] == ["1.00", "–", "0.50", "–"]
    assert [t.get_text() for t in pi.texts] == ["1.00", "0.25", "–", "0.00"]


def sweep_of_encodings() -> list:
    """Runs of a sweep over encodings (fourth_wave_passkey's shape), 3 seeds each, scored at
    L0 (122 tokens) and 2× (250): rope retrieves at L0 only, swan_gpt also at 2×, and RoPE's
    YaRN a little at 2×."""
    jobs = []
    for s in (0, 1, 2):
        rope = {("none", 0.5, 122): 1.0, ("none", 0.5, 250): 0.0, ("yarn", 0.5, 250): 0.1 * s}
        swan = {("none", 0.5, 122): 1.0, ("none", 0.5, 250): 0.5 + 0.1 * s}
        nope = {("none", 0.5, 122): 0.9, ("none", 0.5, 250): 0.2 + 0.05 * s}
        jobs += [job(s, rope), job(s, swan, pe="swan_gpt"), job(s, nope, pe="none")]
    return jobs


def test_runs_of_several_encodings_keep_a_row_each_not_the_last_seen():
    # The rows were keyed by method and seed alone: the three encodings' seed-0 runs wrote one
    # cell, whichever came last.
    from posexp.commands.report.views.passkey import model_names

    jobs = sweep_of_encodings()
    rows = rows_of(jobs, models=model_names(jobs))
    assert set(rows) == {
        "rope · none (zero-shot)",
        "rope · yarn (zero-shot)",
        "swan_gpt · none (zero-shot)",
        "none · none (zero-shot)",
    }
    assert per_seed(rows, "swan_gpt · none (zero-shot)", 250) == {0: 0.5, 1: 0.6, 2: 0.7}
    assert per_seed(rows, "none · none (zero-shot)", 122) == {0: 0.9, 1: 0.9, 2: 0.9}
    # One model (seeds only): the rows are named by method alone, as before.
    one = [j for j in jobs if j.settings["pe"] == "rope"]
    assert model_names(one) == {} and set(rows_of(one)) == {"none (zero-shot)", "yarn (zero-shot)"}


def test_each_method_is_set_against_its_own_model_and_the_models_are_ranked(tmp_path):
    md = render_passkey(tmp_path, sweep_of_encodings())
    assert "| model · method | 128 (1×) | 256 (2×) |" in md
    assert "| swan_gpt · none (zero-shot) | 1.00 ± 0.00 | 0.60 ± 0.10 |" in md
    # One sentence for the models that learned retrieval on every seed
    assert (
        "- Retrieval was learned (zero-shot accuracy at L0 ≥ 0.5) on every seed (n = 3) by rope, "
        "swan_gpt, none." in md
    )
    # YaRN against RoPE without a method (paired gaps 0, 0.1, 0.2: 1.0× the seed std), not
    # against another model; one sentence per model
    assert (
        "- rope, each method against no method at 256 tokens (2× L0), n = 3: level (within seed "
        "noise): yarn." in md
    )
    # swan_gpt first, NoPE second: paired gaps 0.3, 0.35, 0.4 against the seed std 0.1
    assert (
        "- swan_gpt is better than none at 256 tokens (2× L0), the best two models without a "
        "method, on accuracy (0.6000 against 0.2500: beyond seed noise (3.5× the larger seed "
        "std, n = 3))."
    ) in md


def test_a_models_methods_are_grouped_by_verdict_in_one_sentence():
    from posexp.commands.report.views.passkey import model_gain_sentences, model_names

    jobs = []
    for s in (0, 1, 2):
        rope = {("none", 0.5, 122): 1.0, ("none", 0.5, 250): 0.1 + 0.01 * s}
        rope |= {("rerope", 0.5, 250): 0.9 + 0.01 * s, ("pi", 0.5, 250): 0.0}
        rope |= {("logn", 0.5, 250): 0.1 + 0.02 * s}
        nope = {("none", 0.5, 122): 1.0, ("none", 0.5, 250): 0.0, ("logn", 0.5, 250): 0.0}
        jobs += [job(s, rope), job(s, nope, pe="none")]
    rows = rows_of(jobs, models=model_names(jobs))
    # rerope: +0.80 on every seed (seed std 0.01: 80×); pi: -0.11 (11×); logn: +0.01 with a
    # paired std of 0.01 against the seed std 0.02 (0.5×)
    assert model_gain_sentences(rows, 250, "2×") == [
        "- rope, each method against no method at 2×, n = 3: better beyond seed noise: rerope (0.91 "
        "against 0.11, 80.0×); worse beyond seed noise: pi (0.00 against 0.11, 11.0×); level "
        "(within seed noise): logn.",
        "- none, each method against no method at 2×: neither retrieves a key: logn.",
    ]


def test_no_model_retrieving_past_l0_is_said_so(tmp_path):
    from posexp.commands.report.views.passkey import model_names, model_sentences

    jobs = [
        job(s, {("none", 0.5, 122): 1.0, ("none", 0.5, 250): 0.0}, pe=pe)
        for s in (0, 1, 2)
        for pe in ("rope", "alibi")
    ]
    rows = rows_of(jobs, models=model_names(jobs))
    assert model_sentences(rows, 250, "2×") == [
        "- At 2×, no model retrieves any key without a method."
    ]
    assert model_sentences(rows_of(jobs[:1]), 250, "2×") == []  # one model: no ranking


def test_the_maps_of_several_models_count_the_seeds_of_the_rows_they_draw(tmp_path):
    # The title counted the table's rows, RoPE's YaRN (one seed) among them: "n = 1–3 seeds"
    # over maps that are all three seeds.
    from posexp.commands.report.views import passkey

    jobs = sweep_of_encodings()
    jobs[0].extrapolate += job(0, {("pi", 0.5, 122): 1.0}).extrapolate
    titles = []
    draw = passkey.depth_maps
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(passkey, "depth_maps", lambda *a: (titles.append(a[4][2]), draw(*a))[1])
        md = render_passkey(tmp_path, jobs)
    assert "Mean ± sample std over n = 1–3 seeds." in md  # the table: pi on one seed
    assert titles == [
        "Passkey retrieval accuracy by key depth and context length (mean over n = 3 seeds)"
    ]


def test_the_title_of_a_single_map_stays_inside_the_figure(tmp_path):
    # A sweep of one encoding (one map, 4.8 inches wide) cut the report's title at both sides.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from posexp.commands.report.depth_maps import depth_maps
    from posexp.commands.report.view import ReportContext

    rows = {"rope*3+none (window 64/64/64/full) · none (zero-shot)": {(0.0, 122): {0: 1.0}}}
    title = "Passkey retrieval accuracy by key depth and context length (mean over n = 3 seeds)"
    ctx, figures = ReportContext(tmp_path, [], []), []
    save = ctx.save_figure
    ctx.save_figure = lambda fig, name: (figures.append(fig), save(fig, name))[1]
    depth_maps(ctx, rows, {122: 128, 250: 256}, 128, ("depth", "accuracy", title), "maps.png")
    fig = figures[0]
    canvas = FigureCanvasAgg(fig)  # the saved figure was closed, detached from its canvas
    canvas.draw()
    renderer, frame = canvas.get_renderer(), fig.bbox
    for text in (fig._suptitle, fig.axes[0].title):
        box = text.get_window_extent(renderer)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, text.get_text()


def test_digits_right_get_their_own_table_and_csv_column(tmp_path):
    # Exact match 0 past L0 on every seed, yet 3 of 5 digits right: a key found in part, which
    # the digits table shows and the accuracy table cannot.
    import csv

    jobs = [job(s, {("none", 0.0, 122): 1.0, ("none", 0.0, 250): 0.0}) for s in (0, 1, 2)]
    for s, j in enumerate(jobs):
        for r in j.extrapolate:
            r["token_accuracy"] = 1.0 if r["length"] == 122 else 0.5 + 0.1 * s
    md = render_passkey(tmp_path, jobs)
    table = md.split("Digits right (per-token accuracy")[1]
    assert "| none (zero-shot) | 1.00 ± 0.00 | 0.60 ± 0.10 |" in table
    rows = list(csv.DictReader((tmp_path / "report_passkey.csv").open()))
    assert sorted(float(r["token_accuracy"]) for r in rows if r["length"] == "256") == [
        0.5,
        0.6,
        0.7,
    ]
    for j in jobs:  # records scored before per-token accuracy: no digits table
        for r in j.extrapolate:
            del r["token_accuracy"]
    assert "Digits right" not in render_passkey(tmp_path, jobs)
