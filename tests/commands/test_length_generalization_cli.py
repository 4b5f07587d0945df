"""The length-generalization and passkey presets, tiny, end to end through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import posexp, posexp_env

TINY = [
    "model=tiny",
    "heads=2",
    "train.max_steps=4",
    "train.batch_size=8",
    "train.eval_interval=2",
    "train.checkpoint_interval=4",
    "train.warmup_steps=1",
    "train.log_interval=2",
]


def test_length_generalization_preset_into_the_report(tmp_path, cache):
    sweep = tmp_path / "sweep"
    posexp(
        tmp_path,
        cache,
        "train",
        "-m",
        "experiment=length_generalization",
        *TINY,
        "hydra.launcher.n_jobs=1",
        "data.test_lengths=[4,12]",
        "data.test_examples=5",
        "data=copy,addition",
        "pe=none,rope_randomized",
        f"hydra.sweep.dir={sweep}",
    )
    posexp(tmp_path, cache, "report", str(sweep))
    report = (sweep / "report.md").read_text()
    assert "## Length generalization (exact-match accuracy)" in report
    assert "### copy" in report and "### addition" in report and "RoPE + randomized" in report
    assert (sweep / "report_length_generalization.png").stat().st_size > 10_000
    assert (sweep / "report_length_generalization.svg").exists()
    # Job dirs are named by the swept keys alone: data and pe.
    (job,) = [d for d in sweep.iterdir() if d.name == "data=copy,pe=none"]
    records = json.loads((job / "eval" / "extrapolate.json").read_text())
    assert {(r["metric"], r["length"], r["examples"]) for r in records} == {
        ("accuracy", 4, 5),
        ("accuracy", 12, 5),
    }
    assert "## Extrapolation" not in report  # the perplexity view stays out of task sweeps


def test_passkey_script_into_the_report(tmp_path, cache):
    command = [
        sys.executable,
        str(Path(__file__).parents[2] / "scripts" / "passkey.py"),
        "--out",
        str(tmp_path / "pk"),
        "--model",
        "tiny",
        "--lm-steps",
        "2",
        "--passkey-steps",
        "2",
        "--extend-steps",  # a tiny model never retrieves: one extension block, then the cap
        "1",
        "--passkey-max-steps",
        "3",
        "--finetune-steps",
        "1",
        "--methods",
        "none,yarn",
        "--examples",
        "2",
        "--seeds",
        "3",
        "--device",
        "cpu",
    ]
    proc = subprocess.run(
        command, env=posexp_env(cache), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "pk" / "seed3" / "ft_yarn" / "eval" / "extrapolate.json").exists()
    passkey = tmp_path / "pk" / "seed3" / "passkey"
    assert f"$ posexp train resume={passkey} train.max_steps=3" in proc.stdout
    assert "step 3, worst depth at L0" in proc.stdout
    report = (tmp_path / "pk" / "report.md").read_text()
    assert "## Passkey retrieval" in report
    for row in (
        "none (zero-shot)",
        "pi (zero-shot)",
        "yarn (zero-shot)",
        "none + fine-tune",
        "yarn + fine-tune",
    ):
        assert f"| {row} |" in report
    assert "1,024 (8×)" in report
    assert (tmp_path / "pk" / "report_passkey.png").exists()
    assert "n = 1 seed(s)" in report and "Retrieval was learned" in report
    # A second call finds every run and evaluation done and only writes the report again.
    again = subprocess.run(
        command, env=posexp_env(cache), capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    skipped = [line for line in again.stdout.splitlines() if line.endswith("skipped")]
    assert len(skipped) == 7  # lm, passkey and its evaluation, two fine-tunes and theirs
    assert [line for line in again.stdout.splitlines() if line.startswith("$ posexp")] == [
        f"$ posexp report {tmp_path / 'pk'} --no-eval --device cpu"
    ]
