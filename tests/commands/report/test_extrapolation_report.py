"""The extrapolation section of a report, rendered from jobs' records as eval-extrapolate
writes them: like is compared with like (one sample, the run's own training length)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from posexp.commands.report.view import ReportContext
from posexp.commands.report.views.extrapolation import (
    extrapolation_columns,
    render_extrapolation,
)
from posexp.labels import run_settings


def text_record(method: str, length: int, ppl: float | None, tokens: int = 16384, **extra):
    """One record of eval-extrapolate's nonoverlap protocol, as ``eval/extrapolate.json`` holds it."""
    return {
        "method": method,
        "length": length,
        "protocol": "nonoverlap",
        "factor": 1.0,
        "metric": "ppl",
        "ppl": ppl,
        "tokens": tokens,
        "note": "",
        "stride": None,
        "sample_size": tokens,
        "precision": None,
        **extra,
    }


def lm_job(path: Path, records: list[dict], pe: str = "rope", seed: int = 0, **config):
    """A completed language-model job with these records (a report reads nothing else)."""
    flat = {
        "pe.name": pe,
        "model.name": "tiny",
        "train.seq_len": 64,
        "extension.method": "none",
        "parent": None,
        "seed": seed,
        **config,
    }
    return SimpleNamespace(
        name=f"pe={pe},seed={seed}",
        path=path,
        pe=pe,
        config=None,
        params={"pe": pe, "seed": str(seed)},
        flat_config=flat,
        settings=run_settings(flat),
        train_length=64,
        extrapolate=records,
        metrics={"final/val_ppl": 10.0},
        status="completed",
        error="",
    )


def sentence(md: str, start: str) -> str:
    """The reading sentence of ``md`` that starts with ``start``."""
    return next(line for line in md.splitlines() if line.startswith(f"- {start}"))


def test_records_of_two_sample_sizes_are_never_averaged_into_one_cell(tmp_path):
    # seed 0 was evaluated twice: 16,384 tokens, then 32,768 for `none` only; the 32k sample
    # reads lower. yarn is 2% worse than none on the 16k sample in every cell.
    jobs = []
    for seed in range(3):
        none16 = {128: 20.0 + seed, 256: 40.0 + seed, 512: 80.0 + seed}
        records = []
        for n, ppl in none16.items():
            records += [text_record("none", n, ppl), text_record("yarn", n, ppl * 1.02)]
            if seed == 0:
                records.append(text_record("none", n, ppl * 0.9, tokens=32768))
        jobs.append(lm_job(tmp_path, records, seed=seed))
    ctx = ReportContext(tmp_path, jobs, ["seed"])
    columns = extrapolation_columns(ctx)
    assert [c.label for c in columns] == [
        "RoPE [tokens 16,384]",
        "RoPE [tokens 32,768]",
        "RoPE+yarn [tokens 16,384]",
    ]
    by_label = {c.label: c for c in columns}
    assert by_label["RoPE [tokens 16,384]"].records[("nonoverlap", 128)]["ppls"] == [
        20.0,
        21.0,
        22.0,
    ]
    only_seed0 = by_label["RoPE [tokens 32,768]"].records[("nonoverlap", 128)]
    assert only_seed0["ppl"] is None and only_seed0["note"] == "scored in 1 of 3 seeds"
    md = render_extrapolation(ctx)
    verdict = sentence(md, "applied zero-shot")
    assert "yarn is worse than no extension for RoPE [tokens 16,384] in 3 of 3 cells" in verdict
    assert "median change +2.0%" in verdict
    assert "each sample is its own column, never averaged with another" in md
    # the CSV keeps each sample's numbers in a column of its own
    header = (tmp_path / "report_extrapolation.csv").read_text().splitlines()[0]
    assert "rope [tokens 16,384]" in header and "rope [tokens 32,768]" in header


def test_one_sample_per_pe_keeps_the_plain_labels(tmp_path):
    records = [text_record(m, n, 10.0) for m in ("none", "yarn") for n in (64, 128)]
    ctx = ReportContext(tmp_path, [lm_job(tmp_path, records)], [])
    assert [c.label for c in extrapolation_columns(ctx)] == ["RoPE", "RoPE+yarn"]
    assert "own column" not in render_extrapolation(ctx)
