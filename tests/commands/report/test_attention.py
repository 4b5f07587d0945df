"""The report's "Where attention goes" view on jobs whose attention is known: one reading only
the diagonal (nothing beyond L0), one reading every key alike (much beyond L0)."""

from __future__ import annotations

import csv

import torch

from posexp.commands.report.jobs import Job
from posexp.commands.report.view import ReportContext
from posexp.commands.report.views.attention import attention_jobs, render, sentence
from posexp.model.attention_stats import AttentionStats
from posexp.store.files import write_csv_atomic
from posexp.store.rundir import RunDir

L0, LONG = 8, 32


def summary(pattern: str) -> list[dict]:
    rows = []
    for n in (L0, LONG):
        stats = AttentionStats(n, far=L0)
        if pattern == "diagonal":
            w = torch.eye(n)
        else:
            w = torch.tril(torch.ones(n, n))
            w = w / w.sum(-1, keepdim=True)
        for layer in range(2):
            stats.add(layer, w.expand(1, 2, n, n))
        rows += stats.rows()["summary"]
    return rows


def job(tmp_path, pe: str, seed: int, pattern: str | None) -> Job:
    path = tmp_path / f"pe={pe},seed={seed}"
    (path / "attention").mkdir(parents=True)
    if pattern is not None:
        write_csv_atomic(path / "attention" / "summary.csv", summary(pattern))
    j = Job(RunDir(path), path.name)
    # What the checkpoint and the config would give (cached properties, set as read).
    j.__dict__["meta"] = {"model": {"pe": pe, "train_length": L0}}
    j.__dict__["flat_config"] = {"pe": pe, "seed": seed}
    j.__dict__["settings"] = {"pe": pe, "seed": seed}
    return j


def test_the_view_compares_far_mass_and_sink_share_per_pe(tmp_path):
    jobs = [job(tmp_path, "rope", s, "uniform") for s in (1, 2, 3)]
    jobs += [job(tmp_path, "alibi", s, "diagonal") for s in (1, 2, 3)]
    out = tmp_path / "report"
    out.mkdir()
    ctx = ReportContext(out, jobs, ["pe", "seed"])
    assert attention_jobs(jobs) == jobs
    text = render(ctx)
    assert "## Where attention goes" in text
    # Uniform over i+1 keys: query i >= 8 puts (i-7)/(i+1) at distance >= 8; the diagonal none.
    far = sum((i - 7) / (i + 1) for i in range(L0, LONG)) / (LONG - L0)
    assert "less attention mass beyond L0 than" in text
    assert f"0 against {far:.3g}" in text
    with open(out / "report_attention.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 * 2  # jobs x layers
    assert {r["far_mass"] for r in rows if r["pe"] == "alibi"} == {"0.0"}
    assert (out / "report_attention.png").is_file() and (out / "report_attention.svg").is_file()


def test_fewer_than_three_seeds_give_no_verdict(tmp_path):
    jobs = [job(tmp_path, "rope", s, "uniform") for s in (1, 2)]
    jobs += [job(tmp_path, "alibi", s, "diagonal") for s in (1, 2)]
    out = tmp_path / "report"
    out.mkdir()
    text = render(ReportContext(out, jobs, ["pe", "seed"]))
    assert "n = 2: no verdict" in text and "less attention" not in text


def test_a_damaged_summary_is_named_not_read(tmp_path):
    jobs = [job(tmp_path, "rope", 1, "uniform"), job(tmp_path, "alibi", 1, None)]
    (jobs[1].path / "attention" / "summary.csv").write_text("length,layer\nx,y\n")
    out = tmp_path / "report"
    out.mkdir()
    text = render(ReportContext(out, jobs, ["pe", "seed"]))
    assert f"Not read (a damaged summary): {jobs[1].name}." in text


def test_sentences_follow_the_verdict_rule():
    level = sentence("mass", "A", [0.1, 0.2, 0.3], "B", [0.2, 0.1, 0.3])
    assert level.startswith("A and B are level on mass")
    more = sentence("mass", "A", [0.5, 0.51, 0.52], "B", [0.1, 0.11, 0.12])
    assert more.startswith("A has more mass than B")


def test_longest_lengths_that_differ_are_said(tmp_path):
    jobs = [job(tmp_path, "rope", 1, "uniform"), job(tmp_path, "alibi", 1, "diagonal")]
    rows = [r for r in summary("uniform") if r["length"] == L0]  # alibi measured at L0 only
    write_csv_atomic(jobs[1].path / "attention" / "summary.csv", rows)
    out = tmp_path / "report"
    out.mkdir()
    text = render(ReportContext(out, jobs, ["pe", "seed"]))
    assert "longest measured lengths differ (8, 32 tokens)" in text
