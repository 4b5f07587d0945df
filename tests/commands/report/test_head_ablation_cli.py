"""`experiment=head_ablation` end to end: a tiny sweep through the CLI, then `posexp report`."""

from __future__ import annotations

import csv
import json
import math
import shutil

import pytest
import yaml

from posexp.commands.report.write import write_report
from tests.helpers import posexp

# The preset, shrunk: d_model 32, one layer, a few steps, a few verses decoded.
TINY_ABLATION = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.dropout=0.0",
    "tokenizer.vocab_size=300",
    "train.max_steps=4",
    "train.seq_len=48",
    "train.batch_size=4",
    "train.eval_interval=4",
    "train.log_interval=2",
    "train.checkpoint_interval=4",
    "train.warmup_steps=1",
    "translate.bleu_examples=3",
    "translate.test_examples=4",
    "device=cpu",
]


def read_rows(path):
    with open(path) as f:
        return {row["h"]: row for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, cache):
    """heads=1,3,2 seed=0 on the command line narrows the preset's 6 x 3 grid to 3 jobs; heads=3
    does not divide d_model=32, so that job fails alone (the ones after it still run)."""
    cwd = tmp_path_factory.mktemp("ablation")
    sweep_dir = cwd / "sweep"
    with pytest.MonkeyPatch.context() as env:  # a grid with a job known to fail: run the rest
        env.setenv("POSEXP_SWEEP_CHECK", "0")
        proc = run_sweep(cwd, cache, sweep_dir)
    return cwd, sweep_dir, proc


def run_sweep(cwd, cache, sweep_dir):
    return posexp(
        cwd,
        cache,
        "train",
        "-m",
        "experiment=head_ablation",
        "heads=1,3,2",
        "seed=0",
        *TINY_ABLATION,
        f"hydra.sweep.dir={sweep_dir}",
        # short job dir names: all the overrides above would exceed a file name's limit
        "hydra.sweep.subdir=h${heads}_s${seed}",
        check=False,
    )


def test_sweep_runs_only_the_narrowed_grid_and_isolates_the_bad_job(sweep):
    cwd, sweep_dir, proc = sweep
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "heads=3 does not divide d_model=32" in proc.stderr
    jobs = sorted(p.parent for p in sweep_dir.glob("*/results.json"))
    assert [p.name for p in jobs] == ["h1_s0", "h2_s0", "h3_s0"]
    status = {p.name: json.loads((p / "results.json").read_text())["status"] for p in jobs}
    assert status == {"h1_s0": "completed", "h2_s0": "completed", "h3_s0": "failed"}
    saved = yaml.safe_load((jobs[0] / ".hydra" / "config.yaml").read_text())
    assert saved["data"]["source"] == "wyc2kjv" and saved["tokenizer"]["name"] == "bpe"
    assert saved["pe"]["name"] == "sinusoidal"
    results = json.loads((jobs[1] / "results.json").read_text())
    for key in ("final/val_ppl", "final/bleu", "final/chrf", "final/copy_bleu", "final/params"):
        assert math.isfinite(results[key]), key
    assert sorted(p.name for p in (jobs[1] / "attention").iterdir()) == ["layer0.png", "layer0.svg"]


def test_report_has_a_row_per_head_count_with_numbers_and_the_plot(sweep, cache):
    cwd, sweep_dir, _ = sweep
    posexp(cwd, cache, "report", str(sweep_dir))
    rows = read_rows(sweep_dir / "report_heads.csv")
    assert list(rows) == ["1", "2", "3"]
    for h, d_k in (("1", "32"), ("2", "16")):
        row = rows[h]
        assert row["d_k"] == row["d_v"] == d_k and row["seeds"] == "1"
        for key in ("params", "ppl_mean", "bleu_mean", "chrf_mean", "copy_bleu", "copy_chrf"):
            assert math.isfinite(float(row[key])), (h, key)
        assert row["status"] == "1 completed"
    assert rows["1"]["params"] == rows["2"]["params"]  # same parameters whatever the head count
    assert rows["1"]["vaswani_bleu"] == "24.9" and rows["2"]["vaswani_bleu"] == ""
    assert rows["3"]["status"] == "1 failed" and rows["3"]["ppl_mean"] in ("", "nan")
    md = (sweep_dir / "report.md").read_text()
    assert "## Head-count ablation" in md
    assert "heads=3 does not divide d_model=32" in md
    assert (sweep_dir / "report_heads.png").stat().st_size > 10_000
    assert (sweep_dir / "attention" / "h1_seed0_layer0.png").is_file()
    assert (sweep_dir / "attention" / "h1_seed0_layer0.svg").is_file()
    assert (sweep_dir / "attention" / "h2_seed0_layer0.png").is_file()


def test_report_shows_unfinished_and_not_started_jobs(sweep, tmp_path):
    _, sweep_dir, _ = sweep
    copy = tmp_path / "copy"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("report*", "attention"))
    (copy / "h2_s0" / "results.json").unlink()  # killed before the end
    shutil.rmtree(copy / "h3_s0")  # never started
    write_report(copy, evaluate=False)  # in-process: the CLI path is tested above
    rows = read_rows(copy / "report_heads.csv")
    assert rows["2"]["status"] == "1 unfinished" and rows["2"]["seeds"] == "0"
    assert rows["3"]["status"] == "1 not started"
    md = (copy / "report.md").read_text()
    assert "no results.json; checkpoint at step 4" in md and "not started" in md
