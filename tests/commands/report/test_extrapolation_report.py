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
from posexp.results.labels import run_settings
from tests.helpers import record_view


def text_record(method: str, length: int, ppl: float | None, tokens: int = 16384, **extra):
    """One record of eval-extrapolate's nonoverlap protocol, as the report's views read it."""
    return {
        **record_view(method),
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
    # 2% worse in every seed, but the seeds themselves spread by 5%: no verdict, on 3 cells
    assert "yarn and no extension for RoPE [tokens 16,384] past the training length" in verdict
    assert "no verdict over 3 cells (0 better, 0 worse beyond seed noise, 3 within it" in verdict
    assert "each sample is its own column, never averaged with another" in md
    # the CSV keeps each sample's numbers in a column of its own
    header = (tmp_path / "report_extrapolation.csv").read_text().splitlines()[0]
    assert "rope [tokens 16,384]" in header and "rope [tokens 32,768]" in header


def test_one_sample_per_pe_keeps_the_plain_labels(tmp_path):
    records = [text_record(m, n, 10.0) for m in ("none", "yarn") for n in (64, 128)]
    ctx = ReportContext(tmp_path, [lm_job(tmp_path, records)], [])
    assert [c.label for c in extrapolation_columns(ctx)] == ["RoPE", "RoPE+yarn"]
    assert "own column" not in render_extrapolation(ctx)


def test_a_fine_tuned_run_is_described_as_fine_tuned_and_not_set_beside_the_paper(tmp_path):
    # `posexp finetune --run <rope, L0 64> extension=yarn extension.factor=4`: trained at 256.
    # Without YaRN the fine-tuned weights explode past 256; with it (baked) they stay flat.
    none = {64: 10.0, 128: 10.0, 256: 10.0, 512: 30.0, 1024: 60.0}
    records = [text_record("none", n, ppl) for n, ppl in none.items()]
    records += [text_record("baked:yarn", n, 10.0) for n in none]
    records += [text_record("yarn", n, 10.0 if n <= 256 else ppl * 1.5) for n, ppl in none.items()]
    tuned = lm_job(
        tmp_path,
        records,
        parent="outputs/runs/rope",
        **{"train.seq_len": 256, "extension.method": "yarn", "extension.factor": 4.0},
    )
    ctx = ReportContext(tmp_path, [tuned], [])
    md = render_extrapolation(ctx)
    assert "fine-tuned (`posexp finetune`) at 256 tokens from a model trained at 64 tokens" in md
    assert "trained at 64 tokens." not in md
    assert "zero-shot" not in md  # baked:yarn is the method it was fine-tuned with
    baked = sentence(md, "baked:yarn, the extension the run was fine-tuned with,")
    # only 512 and 1,024 lie past the length it trained at
    assert (
        "against no extension (the same weights without it) for RoPE past the length the run "
        "was fine-tuned at (256) (nonoverlap): n = 1: no verdict over 2 cells" in baked
    )
    assert "`posexp finetune` trains" not in baked
    applied = sentence(md, "applied at evaluation to fine-tuned weights, yarn against")
    assert "no verdict over 2 cells" in applied
    # Press et al.'s models were trained from scratch without extension: no shape comparison
    assert "explodes here" not in md and "in the paper it" not in md
    assert "RoPE is not set beside Press et al. 2022 (ALiBi): fine-tuned" in md


def test_verdicts_count_the_cells_past_each_run_s_own_training_length(tmp_path):
    # `posexp train -m train.seq_len=32,64 pe=rope`, evaluated at 32..256 with none and yarn.
    jobs = []
    for seq_len in (32, 64):
        records = []
        for n in (32, 64, 128, 256):
            records += [text_record("none", n, 20.0), text_record("yarn", n, 20.0)]
            records += [
                {**text_record(m, n, 22.0), "protocol": "sliding", "stride": 16}
                for m in ("none", "yarn")
            ]
        job = lm_job(tmp_path, records, **{"train.seq_len": seq_len})
        job.train_length = seq_len
        jobs.append(job)
    md = render_extrapolation(ReportContext(tmp_path, jobs, ["train.seq_len"]))
    assert "training lengths differ" in md
    verdicts = [line for line in md.splitlines() if line.startswith("- applied zero-shot")]
    assert len(verdicts) == 2
    assert (
        "for RoPE [L32] past the training length (nonoverlap): n = 1: no verdict over 3 cells"
        in verdicts[0]
    )
    assert (
        "for RoPE [L64] past the training length (nonoverlap): n = 1: no verdict over 2 cells"
        in verdicts[1]
    )
    # the protocols are compared past each run's own length too: 3 + 2 cells of two methods
    assert "non-overlapping ones in 10 of 10 cells" in sentence(md, "past the training length")


def test_methods_scored_in_only_some_seeds_are_named_under_the_plot(tmp_path):
    # `report --method ntk,'self_extend(group=2,window=8)'` after seed 0 only was evaluated.
    jobs = []
    for seed in range(3):
        methods = ("none", "ntk", "self_extend(group=2,window=8)") if seed == 0 else ("none",)
        records = [text_record(m, n, 10.0 + n / 64) for m in methods for n in (64, 128)]
        jobs.append(lm_job(tmp_path, records, seed=seed))
    md = render_extrapolation(ReportContext(tmp_path, jobs, ["seed"]))
    assert (
        "Not plotted, no length scored in every seed: RoPE+ntk (scored in 1 of 3 seeds); "
        "RoPE+self_extend(group=2,window=8) (scored in 1 of 3 seeds)."
    ) in md
    assert (tmp_path / "report_extrapolation_nonoverlap.png").is_file()


def test_a_pose_fine_tune_is_judged_past_its_target_length_not_its_window(tmp_path):
    # `posexp finetune ... train.pose.enabled=true`: rows of 64 tokens, positions up to 256.
    none = {64: 10.0, 128: 10.0, 256: 10.0, 512: 30.0, 1024: 60.0}
    records = [text_record("none", n, ppl) for n, ppl in none.items()]
    records += [text_record("baked:yarn", n, 10.0) for n in none]
    pose = {"train.pose.enabled": True, "train.pose.target_length": 256}
    tuned = lm_job(
        tmp_path,
        records,
        parent="outputs/runs/rope",
        **{"extension.method": "yarn", "extension.factor": 4.0, **pose},
    )
    md = render_extrapolation(ReportContext(tmp_path, [tuned], []))
    assert "fine-tuned (`posexp finetune`) at 256 tokens from a model trained at 64 tokens" in md
    assert "past the length the run was fine-tuned at (256)" in md
