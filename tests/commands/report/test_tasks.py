"""The length-generalization report view: sentences and summaries computed from the numbers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from posexp.commands.report.views.tasks import (
    beyond_means,
    frontier,
    reading,
    seed_summary,
    seeds_caption,
    spread_sentence,
    summary_cell,
)
from posexp.commands.train import check_same_network
from posexp.errors import PosexpError
from posexp.model import ModelConfig
from posexp.pe.base import describe_pe
from tests.helpers import record_view

NOPE, T5, SIN, ROPE = (describe_pe(n) for n in ("none", "t5", "sinusoidal", "rope"))
ROPE_RANDOMIZED = describe_pe("rope", randomized=True)


def test_reading_follows_the_numbers():
    summary = {
        "copy": {NOPE: 0.6, T5: 0.4, SIN: 0.0, ROPE: 0.1, ROPE_RANDOMIZED: 0.3},
        "reverse": {NOPE: 0.1, T5: 0.1, SIN: 0.1, ROPE: 0.1},
    }
    lines = reading(summary)
    assert (
        lines[0]
        == "- **copy**: best past the training sizes NoPE (0.60), worst sinusoidal (APE) (0.00)."
    )
    assert "every PE scores 0.10" in lines[1]
    assert lines[2].startswith("- Kazemnejad et al. 2023 find ")
    assert (
        "NoPE or T5 bias is the best on 1 of 1, and sinusoidal (APE) among the worst on 1 of 1 "
        "task(s) where"
    ) in lines[2]
    assert lines[3].startswith("- Ruoss et al. 2023 find ")
    assert "RoPE + randomized minus RoPE" in lines[3]
    assert "copy +0.200" in lines[3] and "higher on 1 of 1 tasks" in lines[3]
    summary["copy"][ROPE] = 0.9  # now RoPE leads: the sentences change with it
    lines = reading(summary)
    assert "best past the training sizes RoPE (0.90)" in lines[0]
    assert "NoPE or T5 bias is the best on 0 of 1," in lines[2] and "copy -0.600" in lines[3]


def test_the_ranking_finding_ranks_only_runs_on_consecutive_positions():
    # Kazemnejad et al. ranked no randomized run: RoPE + randomized leading the task must not
    # count against NoPE, the best of the runs they could have measured.
    summary = {"bucket_sort": {NOPE: 0.24, T5: 0.18, SIN: 0.0, ROPE: 0.0, ROPE_RANDOMIZED: 0.28}}
    (ranks,) = [line for line in reading(summary) if "Kazemnejad" in line]
    assert "NoPE or T5 bias is the best on 1 of 1," in ranks
    assert "where the PEs on consecutive positions differ by at least 0.01" in ranks
    # Level without the randomized run: no task separates the papers' PEs, no sentence.
    level = {"copy": {NOPE: 0.5, T5: 0.5, SIN: 0.5, ROPE_RANDOMIZED: 0.9}}
    assert not [line for line in reading(level) if "Kazemnejad" in line]


def test_reading_compares_families_and_skips_findings_with_nothing_to_compare():
    learned = describe_pe("learned")
    # Both absolute encodings are named by the finding's family; no randomized run, no Ruoss line.
    lines = reading({"copy": {NOPE: 0.9, SIN: 0.2, learned: 0.1}})
    assert "sinusoidal (APE) or learned (APE) among the worst on 1" in lines[1]
    assert len(lines) == 2
    # Only PEs no finding names: no comparison sentence at all.
    assert reading({"copy": {ROPE: 0.9, describe_pe("alibi"): 0.2}}) == [
        "- **copy**: best past the training sizes RoPE (0.90), worst ALiBi (0.20)."
    ]


def test_reading_of_one_pe_compares_nothing():
    # A sweep of one PE (say over seeds or its own settings): its score, no ranking, no finding.
    assert reading({"reverse": {T5: 0.102}}) == [
        "- **reverse**: T5 bias scores 0.10 past the training sizes (the only PE run on it: "
        "nothing to compare)."
    ]
    # PEs that every task ties: no "best on 0 of 0 tasks" sentence either.
    assert reading({"reverse": {T5: 0.0, NOPE: 0.0}}) == [
        "- **reverse**: every PE scores 0.00 past the training sizes; this budget does not "
        "separate them."
    ]


def test_summaries_use_only_sizes_past_training():
    table = {"rope": {4: 1.0, 8: 0.9, 12: 0.5, 16: 0.1}, "none": {4: 1.0, 8: 1.0, 12: 0.7, 16: 0.6}}
    assert beyond_means(table, 8) == pytest.approx({"rope": 0.3, "none": 0.65})
    assert frontier(table) == {"rope": 12, "none": 16}


def job(pe: str, accuracies: dict[int, float]) -> SimpleNamespace:
    """A copy-task job of one seed: its accuracy records per test size."""
    recs = [
        record_view("none", metric="accuracy", length=n, accuracy=a) for n, a in accuracies.items()
    ]
    return SimpleNamespace(
        extrapolate=recs,
        params={"data": "copy", "pe": pe},
        settings={"data": "copy", "pe": pe},
        config=SimpleNamespace(pe=SimpleNamespace(name=pe, params={})),
    )


def by_pe(j):
    return describe_pe(j.params["pe"])


def test_the_summary_averages_each_seed_past_training_then_over_seeds():
    jobs = [
        job("none", {8: 1.0, 9: 0.8, 10: 0.6}),  # past 8: 0.7
        job("none", {8: 1.0, 9: 0.6, 10: 0.4}),  # 0.5
        job("none", {8: 1.0, 9: 0.7, 10: 0.5}),  # 0.6
        job("rope", {8: 1.0, 9: 0.0, 10: 0.0}),
        job("rope", {8: 1.0, 9: 0.1, 10: 0.1}),
        job("rope", {8: 1.0, 9: 0.0, 10: 0.2}),
    ]
    seeds = seed_summary(jobs, 8, by_pe)["copy"]
    assert seeds[NOPE] == pytest.approx([0.7, 0.5, 0.6])
    assert summary_cell(seeds[NOPE]) == "0.600 ± 0.100" and summary_cell([0.25]) == "0.250"
    sentence = spread_sentence("copy", seeds)
    assert sentence.startswith("- **copy**: NoPE leads RoPE past the training sizes by 0.533: ")
    assert "beyond seed noise (5.3× the larger seed std, n = 3)" in sentence
    close = {NOPE: [0.7, 0.5, 0.6], ROPE: [0.6, 0.4, 0.5]}
    assert "within seed noise" in spread_sentence("copy", close)
    # A tie as printed names no leader ("leads by 0.000" would contradict the table).
    tied = spread_sentence("copy", {NOPE: [0.0, 0.0], ROPE: [0.0, 0.0]})
    assert tied == "- **copy**: NoPE and RoPE are level past the training sizes (0.000)."


def test_a_mixtures_parts_are_tables_of_their_own():
    # data=chomsky: one run per PE scores every part; each part is a task of the report, never
    # averaged with the others under the mixture's name.
    from posexp.commands.report.views.tasks import collect, size_values

    def mixture(pe, parts):
        recs = [
            record_view("none", metric="accuracy", length=n, accuracy=a, task=part)
            for part, by_size in parts.items()
            for n, a in by_size.items()
        ]
        return SimpleNamespace(
            extrapolate=recs,
            params={"data": "chomsky", "pe": pe},
            settings={"data": "chomsky", "pe": pe},
            config=SimpleNamespace(pe=SimpleNamespace(name=pe, params={})),
        )

    jobs = [
        mixture("none", {"odd_first": {8: 1.0, 16: 0.2}, "bucket_sort": {8: 0.9, 16: 0.7}}),
        mixture("rope", {"odd_first": {8: 1.0, 16: 0.6}, "bucket_sort": {8: 0.8, 16: 0.1}}),
    ]
    data = collect(size_values(jobs, by_pe))
    assert data == {
        "bucket_sort": {NOPE: {8: 0.9, 16: 0.7}, ROPE: {8: 0.8, 16: 0.1}},
        "odd_first": {NOPE: {8: 1.0, 16: 0.2}, ROPE: {8: 1.0, 16: 0.6}},
    }
    seeds = seed_summary(jobs, 8, by_pe)
    assert seeds == {
        "odd_first": {NOPE: [0.2], ROPE: [0.6]},
        "bucket_sort": {NOPE: [0.7], ROPE: pytest.approx([0.1])},
    }


def test_the_caption_names_one_seed_count_or_a_range():
    assert seeds_caption([3]) == "mean ± sample std over n = 3 seeds."
    assert seeds_caption([1, 3]) == "mean ± sample std over n = 1–3 seeds."
    assert seeds_caption([1]).startswith("one seed per PE")


def test_a_setting_swept_beside_the_pe_gets_its_own_column_not_a_mean(monkeypatch):
    import posexp.commands.report.views.tasks as tasks
    from posexp.commands.report.view import ReportContext

    monkeypatch.setattr(tasks, "job_pe", by_pe)
    jobs = [job("t5", {9: 0.4}), job("t5", {9: 0.0})]
    jobs[0].settings["pe.max_distance"], jobs[1].settings["pe.max_distance"] = 128, 16
    ctx = ReportContext(None, jobs, ["pe.max_distance"])
    seeds = seed_summary(jobs, 8, tasks.column_key(ctx))["copy"]
    assert {pe.label: v for pe, v in seeds.items()} == {
        "T5 bias (max_distance=128)": [0.4],
        "T5 bias (max_distance=16)": [0.0],
    }


def test_a_parent_run_must_have_the_same_network():
    mine = ModelConfig(vocab_size=260, d_model=64, n_layers=2, n_heads=2, pe="rope")
    parent = mine.to_dict()
    check_same_network(parent, mine)
    with pytest.raises(PosexpError, match="parent run has n_layers=4, this run n_layers=2"):
        check_same_network({**parent, "n_layers": 4}, mine)


def test_sizes_an_encoding_cannot_read_are_listed_with_their_reason(monkeypatch):
    import posexp.commands.report.views.tasks as tasks

    monkeypatch.setattr(tasks, "job_pe", by_pe)
    abacus = job("abacus", {2: 1.0, 3: 1.0})
    note = "not applicable: a number of more than 4 digits is past the Abacus table"
    abacus.extrapolate += [
        record_view("none", metric="accuracy", length=n, accuracy=None, note=note) for n in (4, 6)
    ]
    missing = tasks.unmeasured([abacus, job("rope", {2: 1.0, 4: 0.0})], by_pe)
    assert missing == {"copy": {describe_pe("abacus"): {4: note, 6: note}}}
    assert tasks.unmeasured_notes(missing["copy"]) == [f"- Abacus, sizes 4, 6: {note}."]


def test_a_task_no_pe_learned_is_said_before_any_comparison():
    from posexp.commands.report.views.tasks import unlearned_sentences

    data = {
        "copy": {NOPE: {4: 0.0, 8: 0.02, 12: 0.0}, ROPE: {4: 0.1, 8: 0.0, 12: 0.0}},
        "reverse": {NOPE: {4: 0.9, 8: 0.8, 12: 0.3}},
    }
    (line,) = unlearned_sentences(data, (1, 8))
    assert line.startswith("- **copy**: no PE learned the task: the best accuracy at the trained")
    assert "is 0.10 (below 0.5)" in line


def test_a_pe_scored_at_fewer_sizes_breaks_its_line_there_and_the_legend_says_where(tmp_path):
    # Was one straight line from 4 to 16 across 8 and 12, sizes ALiBi was never scored at.
    import math

    from posexp.commands.report.views.tasks_plot import plot

    alibi = describe_pe("alibi")
    data = {
        "copy": {ROPE: {4: 1.0, 8: 0.9, 12: 0.2, 16: 0.0}, alibi: {4: 0.8, 16: 0.0}},
        "reverse": {ROPE: {4: 1.0, 16: 0.0}, alibi: {4: 0.6, 16: 0.0}},
    }
    saved = {}
    ctx = SimpleNamespace(
        memo={}, jobs=[], save_figure=lambda fig, name: saved.setdefault("fig", fig) and tmp_path
    )
    plot(ctx, data, (1, 8))
    copy, reverse = saved["fig"].axes
    (line,) = [x for x in copy.lines if x.get_label().startswith("ALiBi")]
    ys = dict(zip(line.get_xdata(), line.get_ydata(), strict=True))
    assert ys[4] == 0.8 and ys[16] == 0.0 and math.isnan(ys[8]) and math.isnan(ys[12])
    assert line.get_label() == "ALiBi (not scored at 8, 12)"
    assert not any(math.isnan(y) for x in reverse.lines for y in x.get_ydata())
    (legend,) = saved["fig"].legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "RoPE",
        "ALiBi (not scored at 8, 12 in copy)",
        "training sizes 1–8",
    ]


def test_a_mixtures_eight_tasks_are_drawn_in_rows_of_four_with_their_units(tmp_path):
    from posexp.commands.report.views.tasks_plot import plot

    names = ["binary_addition", "bucket_sort", "duplicate_string", "interlocked_pairing"]
    names += ["missing_duplicate", "modular_arithmetic", "odd_first", "stack_manipulation"]
    data = {t: {ROPE: {8: 1.0, 16: 0.5}} for t in names}
    saved = {}
    ctx = SimpleNamespace(
        memo={}, jobs=[], save_figure=lambda fig, name: saved.setdefault("fig", fig) and tmp_path
    )
    plot(ctx, data, (1, 8))
    axes = saved["fig"].axes
    assert len(axes) == 8 and {ax.get_subplotspec().get_geometry()[:2] for ax in axes} == {(2, 4)}
    labels = {ax.get_title(): ax.get_xlabel() for ax in axes}
    assert labels["binary_addition"] == "test size (bits)"
    assert labels["stack_manipulation"] == "test size (stack symbols + actions)"
    # Five tasks: two rows, the three unused panels hidden; a name no task has keeps the old label.
    saved.clear()
    plot(ctx, {**{t: data[t] for t in names[:4]}, "addition_lsb": data[names[0]]}, (1, 8))
    shown = [ax for ax in saved["fig"].axes if ax.get_visible()]
    assert len(saved["fig"].axes) == 8 and len(shown) == 5
    assert shown[-1].get_xlabel() == "test size (symbols / digits per operand)"


def test_randomized_positions_get_a_verdict_on_the_average_over_tasks():
    # Ruoss et al.'s claim is about the mean over tasks: per seed, every task's accuracy past the
    # training sizes averaged, then randomized minus plain paired by seed.
    from posexp.commands.report.views.tasks import randomized_verdicts

    def run(pe, seed, by_task):
        recs = [
            record_view("none", metric="accuracy", length=n, accuracy=a, task=t)
            for t, by_size in by_task.items()
            for n, a in by_size.items()
        ]
        randomized = pe.endswith("_randomized")
        name = pe.removesuffix("_randomized")
        return SimpleNamespace(
            extrapolate=recs,
            params={"pe": pe},
            config=SimpleNamespace(
                seed=seed,
                pe=SimpleNamespace(name=name, params={}),
                positions=SimpleNamespace(randomized=randomized),
            ),
        )

    def key(job):
        return describe_pe(job.config.pe.name, job.config.positions.randomized)

    jobs = []
    for seed, (r, p) in enumerate([(0.5, 0.1), (0.6, 0.1), (0.7, 0.2)]):
        # past size 8: odd_first r / p, copy r + 0.1 / p + 0.1 (size 8 itself never counts)
        jobs.append(
            run("rope_randomized", seed, {"odd_first": {8: 0.0, 16: r}, "copy": {16: r + 0.1}})
        )
        jobs.append(run("rope", seed, {"odd_first": {8: 1.0, 16: p}, "copy": {16: p + 0.1}}))
    jobs.append(run("alibi", 0, {"odd_first": {16: 0.3}}))  # never run both ways: no line
    (line,) = randomized_verdicts(jobs, 8, key)
    # per seed, randomized 0.55, 0.65, 0.75; plain 0.15, 0.15, 0.25: differences 0.4, 0.5, 0.5
    assert line.startswith(
        "- **every task** (Ruoss et al.'s average): RoPE + randomized minus RoPE past the "
        "training sizes, +0.467 (0.650 against 0.183): beyond seed noise"
    )
    assert randomized_verdicts(jobs[:2], 8, key)[0].endswith(
        "n = 1: no verdict (it needs 3 seeds)."
    )
    # Records scored before per-token accuracy existed give no line on that metric.
    assert randomized_verdicts(jobs, 8, key, field="token_accuracy") == []
    for job in jobs:  # per-token accuracy: randomized 0.2 above plain on every seed and task
        for r in job.extrapolate:
            r["token_accuracy"] = r["accuracy"] / 2 + 0.2 * (job.params["pe"] == "rope_randomized")
    (line,) = randomized_verdicts(jobs, 8, key, field="token_accuracy")
    # per seed, randomized 0.475, 0.525, 0.575; plain 0.075, 0.075, 0.125: gaps 0.4, 0.45, 0.45
    assert line.startswith(
        "- **every task** (Ruoss et al.'s average, per-token accuracy): RoPE + randomized minus "
        "RoPE past the training sizes, +0.433 (0.525 against 0.092): beyond seed noise"
    )


def test_a_task_counts_as_learned_only_halfway_from_its_chance_to_perfect():
    from posexp.commands.report.views.tasks import learned_bar, unlearned_sentences, unlearned_tasks

    assert learned_bar("interlocked_pairing") == 0.75  # yes / no: chance 0.5
    assert learned_bar("modular_arithmetic") == 0.6  # a residue mod 5: chance 0.2
    assert learned_bar("copy") == 0.5  # no guessing: the plain bar
    data = {
        "missing_duplicate": {"NoPE": {8: 0.65, 16: 0.5}},  # at chance + a little: not learned
        "copy": {"NoPE": {8: 0.65, 16: 0.1}},
    }
    assert unlearned_tasks(data, (1, 8)) == {"missing_duplicate"}
    (line,) = unlearned_sentences(data, (1, 8))
    assert "0.65 (below 0.75, halfway from chance 0.5 to 1)" in line


def test_the_per_token_table_gives_each_seeds_mean_past_the_training_sizes():
    from posexp.commands.report.views.tasks import token_summary

    def run(seed, by_size, token=True):
        recs = [
            record_view(
                "none",
                metric="accuracy",
                length=n,
                accuracy=0.0,
                task="duplicate_string",
                **({"token_accuracy": a} if token else {}),
            )
            for n, a in by_size.items()
        ]
        return SimpleNamespace(extrapolate=recs, params={"pe": "rope"}, config=None)

    def key(job):
        return ROPE

    # Past size 8: seed means 0.6, 0.7, 0.8 (size 8 itself is a trained size and never counts).
    jobs = [run(s, {8: 1.0, 16: 0.5 + 0.1 * s, 24: 0.7 + 0.1 * s}) for s in range(3)]
    lines = token_summary(jobs, 8, key, [ROPE])
    assert lines[0] == "### Per-token accuracy past the training sizes"
    assert lines[2].endswith("then mean ± sample std over n = 3 seeds.")
    assert "| duplicate_string | 0.700 ± 0.100 |" in lines[4]
    assert token_summary([run(0, {16: 0.5}, token=False)], 8, key, [ROPE]) == []
