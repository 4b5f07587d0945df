"""The report's generic runs table: names, decimals, fixed settings, collisions, the sentence."""

from __future__ import annotations

from types import SimpleNamespace

from posexp.commands.report.runs_section import (
    cell,
    column_decimals,
    comparison_sentence,
    metric_name,
    runs_section,
)
from posexp.commands.report.view import ReportContext
from posexp.results.labels import run_settings, setting_key


def job(name, params, metrics, status="completed", error="", config=None):
    """A stand-in for a report Job with what the runs table reads."""
    flat = {"train.max_steps": 30, "seed": 0, **(config or {})}
    settings = {**run_settings(flat), **{setting_key(k): v for k, v in params.items()}}
    return SimpleNamespace(
        settings=settings,
        name=name,
        params=params,
        metrics=metrics,
        status=status,
        error=error,
        config=True,
        flat_config=flat,
        setting=lambda key: str(flat.get(key, flat.get(f"{key}.name", ""))),
    )


def test_metric_names_read_as_words():
    assert metric_name("final/val_ppl") == "val ppl"
    assert metric_name("final/bleu") == "BLEU"
    assert metric_name("final/params") == "parameters"


def test_a_column_keeps_one_number_of_decimals():
    decimals = column_decimals([10.8, 10.82, 9.5])
    assert decimals == 2
    assert [cell(v, decimals) for v in (10.8, 10.82, 9.5)] == ["10.80", "10.82", "9.50"]
    assert column_decimals([3, 4]) is None and cell(3, None) == "3"  # integers stay integers


def test_table_moves_constants_to_fixed_settings_and_drops_empty_errors(tmp_path):
    jobs = [
        job("pe=rope", {"pe": "rope"}, {"step": 30, "final/val_ppl": 34.7, "final/params": 115264}),
        job(
            "pe=alibi",
            {"pe": "alibi"},
            {"step": 30, "final/val_ppl": 34.72, "final/params": 115264},
        ),
    ]
    md, rows = runs_section(ReportContext(tmp_path, jobs, ["pe"]))
    assert "| pe | status | val ppl |" in md
    assert "| alibi | completed | 34.72 |" in md and "| rope | completed | 34.70 |" in md
    assert "parameters 115,264" in md and "step 30" not in md  # step = max_steps: said once
    assert "error" not in md.split("\n\n")[2]  # no job failed: no error column
    assert rows[0]["final/params"] == 115264 and rows[0]["dir"] == "pe=alibi"  # CSV keeps all


def test_results_every_run_shares_are_not_called_settings_and_a_task_is_the_data(tmp_path):
    tasks = {"data.source": "synthetic"}
    jobs = [
        job(f"data={t}", {"data": t}, {"final/val_acc": 0.0}, config={**tasks, "data.task": t})
        for t in ("copy", "reverse")
    ]
    md, _ = runs_section(ReportContext(tmp_path, jobs, ["data"]))
    line = next(x for x in md.splitlines() if x.startswith("Fixed settings: "))
    assert "data synthetic" not in line and "Varying: data." in line
    assert line.endswith("The same in every run: val acc 0.")
    fixed = line.split(" Varying:")[0]
    assert "accuracy" not in fixed


def test_rows_that_would_look_alike_get_their_folder(tmp_path):
    jobs = [job(f"run{i}", {}, {"final/val_loss": 1.0 + i}) for i in range(2)]
    jobs += [job("x", {"pe": "rope"}, {"final/val_loss": 3.0})]
    md, _ = runs_section(ReportContext(tmp_path, jobs, ["pe"]))
    assert "| pe | dir | status | val loss |" in md
    assert "|  | run0 | completed | 1.000 |" in md


def test_swept_key_missing_from_overrides_shows_the_resolved_value(tmp_path):
    jobs = [
        job("a", {}, {"final/val_loss": 1.0}, config={"pe.name": "rope"}),
        job("b", {"pe": "alibi"}, {"final/val_loss": 2.0}, config={"pe.name": "alibi"}),
    ]
    ctx = ReportContext(tmp_path, jobs, ["pe"])
    md, _ = runs_section(ctx)
    assert "| rope | completed | 1.000 |" in md
    assert ctx.label(jobs[0]) == "rope"


def test_sentence_calls_noise_only_with_three_seeds(tmp_path):
    one = [
        job("a", {"pe": "rope"}, {"final/val_ppl": 10.0}),
        job("b", {"pe": "alibi"}, {"final/val_ppl": 12.0}),
    ]
    text = comparison_sentence(ReportContext(tmp_path, one, ["pe"]), one)
    # one seed a setting: no best and no worst, only the extremes and "no verdict"
    assert text.startswith(
        "Lowest validation perplexity: rope (10.00); highest: alibi (12.00), 2.00 apart (20.0%)"
    )
    assert "n = 1: no verdict" in text and "one run per setting" in text
    seeds = [
        job(f"{pe}{s}", {"pe": pe, "seed": str(s)}, {"final/val_ppl": base + 0.1 * s})
        for pe, base in (("rope", 10.0), ("alibi", 12.0))
        for s in range(3)
    ]
    text = comparison_sentence(ReportContext(tmp_path, seeds, ["pe", "seed"]), seeds)
    assert "rope (mean 10.10)" in text and "alibi (mean 12.10)" in text
    assert "beyond seed noise (20.0× the larger seed std, n = 3)" in text
    assert text.startswith("Best validation perplexity: rope")


def test_perplexities_of_different_tokenizers_are_not_ranked(tmp_path):
    # ppl is per token: a byte run's 7.19 and a BPE run's 25.89 measure different units.
    runs = [
        job("byte", {"tokenizer": "byte"}, {"final/val_ppl": 7.19}, config={"data.source": "text"}),
        job(
            "bpe",
            {"tokenizer": "bpe"},
            {"final/val_ppl": 25.89},
            config={"data.source": "text", "tokenizer.name": "bpe", "tokenizer.vocab_size": 300},
        ),
    ]
    text = comparison_sentence(ReportContext(tmp_path, runs, ["tokenizer"]), runs)
    assert text == (
        "Validation perplexity is not compared across these runs: it is per token, and they read "
        "different text or tokenize it differently (text bpe 300, text byte)."
    )


def test_one_run_draws_no_one_dot_plot(tmp_path):
    jobs = [job("a", {"pe": "rope"}, {"final/val_ppl": 10.0})]
    md, _ = runs_section(ReportContext(tmp_path, jobs, ["pe"]))
    assert "report_runs.png" not in md and not (tmp_path / "report_runs.png").exists()


def test_a_folder_of_different_runs_names_rows_by_their_dir(tmp_path):
    keys = ["data", "fine-tuned", "train.lr", "train.seq_len", "extension", "seed"]
    jobs = [
        job(f"seed0/{name}", {k: f"{name}-{k}" for k in keys}, {"final/val_loss": 1.0 + i})
        for i, name in enumerate(("lm", "passkey"))
    ]
    md, _ = runs_section(ReportContext(tmp_path, jobs, keys))
    # Every key differs, but the data alone tells the two apart: the rows are named by it.
    assert "| data | status | val loss |" in md and "| lm-data | completed | 1.000 |" in md
    assert "Varying: fine-tuned." in md  # a key that differs is still named


def test_a_job_without_settings_is_named_by_its_folder(tmp_path):
    # A job dir killed before Hydra wrote its overrides: no config, no pe, no seed to show.
    jobs = [
        job(f"pe={pe},seed={s}", {"pe": pe, "seed": str(s)}, {"final/val_loss": 1.0 + s})
        for pe, s in (("rope", 0), ("rope", 1), ("alibi", 0))
    ]
    lost = job("pe=none,seed=1", {}, {}, status="unfinished", error="no results.json")
    lost.settings, lost.flat_config = {}, {}
    md, _ = runs_section(ReportContext(tmp_path, [*jobs, lost], ["pe", "seed"]))
    assert "| pe | seed | dir | status | val loss | error |" in md
    assert "|  |  | pe=none,seed=1 | unfinished | — | no results.json |" in md
