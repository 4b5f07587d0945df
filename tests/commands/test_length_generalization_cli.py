"""The length-generalization and passkey presets, tiny, end to end through the real CLI."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.helpers import posexp, snapshot

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


def sweep_into_report(tmp_path, cache, *overrides: str) -> tuple[Path, str]:
    """A tiny preset sweep (one job at a time, 5 test instances per size), then its report."""
    sweep = tmp_path / "sweep"
    posexp(
        tmp_path,
        cache,
        "train",
        "-m",
        *overrides,
        *TINY,
        "hydra.launcher.n_jobs=1",
        "data.test_examples=5",
        f"hydra.sweep.dir={sweep}",
    )
    posexp(tmp_path, cache, "report", str(sweep))
    return sweep, (sweep / "report.md").read_text()


def test_length_generalization_preset_into_the_report(tmp_path, cache):
    sweep, report = sweep_into_report(
        tmp_path,
        cache,
        "experiment=length_generalization",
        "data.test_lengths=[4,12]",
        "data=copy,addition",
        "pe=none,rope_randomized",
    )
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
    # One seed has no sample std: the CSV leaves it empty rather than write 0.
    rows = list(csv.DictReader((sweep / "report_length_generalization.csv").open()))
    assert rows and {(r["n"], r["accuracy_std"]) for r in rows} == {("1", "")}


def test_addition_preset_sweeps_abacus_seeds_into_the_report(tmp_path, cache):
    sweep, report = sweep_into_report(
        tmp_path, cache, "experiment=addition", "seed=0,1", "data.test_lengths=[2,4]"
    )
    assert "### addition" in report and "n = 2" in report
    rows = list(csv.DictReader((sweep / "report_length_generalization.csv").open()))
    assert rows and all(r["n"] == "2" and float(r["accuracy_std"]) >= 0 for r in rows)
    jobs = sorted(d.name for d in sweep.iterdir() if d.is_dir())
    assert jobs == ["seed=0", "seed=1"]
    meta = json.loads((sweep / "seed=1" / "checkpoint" / "meta.json").read_text())
    config = meta["config"]
    assert config["pe"]["name"] == "abacus" and config["pe"]["max_digits"] == 6


def test_ruler_preset_scores_each_task_apart_into_the_report(tmp_path, cache):
    sweep, report = sweep_into_report(
        tmp_path, cache, "experiment=ruler", "pe=rope", "seed=0", "data.test_lengths=[226,482]"
    )
    # One seed: the means over seeds are tests/commands/report/test_ruler.py's, by hand.
    assert "## RULER-style tasks" in report and "n = 1 seed(s)" in report
    assert "| model · method |" in report and "effective length |" in report
    # untrained models score 0 at 1x: no threshold to pass, no effective length
    assert "- Threshold: 0.9 × the task average of rope · none at 256 tokens" in report
    assert "no effective length" in report
    for method in ("none", "pi", "yarn", "self_extend"):
        assert f"| rope · {method} | niah_multikey |" in report
    assert (sweep / "report_ruler.png").stat().st_size > 10_000
    assert (sweep / "report_ruler_depths_rope_none.png").exists()  # named by its row
    (job,) = [d for d in sweep.iterdir() if d.is_dir()]
    records = json.loads((job / "eval" / "extrapolate.json").read_text())
    depths = {}
    for r in records:
        assert r["metric"] == "score" and r["protocol"] == "string_match_all"
        assert r["examples"] == 5 and 0 <= r["score"] <= 1
        depths.setdefault(r["task"], set()).add(r["depth"])
    assert depths["niah_single"] == {0.0, 0.5, 1.0}  # the preset's three depths
    assert depths["variable_tracking"] == depths["common_words"] == {None}
    assert set(depths) == {
        "niah_single",
        "niah_multikey",
        "niah_multivalue",
        "niah_multiquery",
        "variable_tracking",
        "common_words",
        "frequent_words",
    }
    # every task x depth x length x method once: 4 tasks x 3 depths + 3, at 2 lengths, 4 methods
    assert len(records) == (4 * 3 + 3) * 2 * 4


def load_passkey_script():
    """scripts/passkey.py as a module (scripts are not a package)."""
    path = Path(__file__).parents[2] / "scripts" / "passkey.py"
    spec = importlib.util.spec_from_file_location("passkey_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_passkey_script_into_the_report(tmp_path, cache, monkeypatch, capsys):
    script = load_passkey_script()
    # Each step through posexp's entry point in this process, not a new Python per step.
    monkeypatch.setattr(
        script, "run_posexp", lambda args: posexp(tmp_path, cache, *args).returncode
    )
    argv = ["passkey.py", "--out", str(tmp_path / "pk"), "--model", "tiny", "--lm-steps", "2"]
    argv += ["--passkey-steps", "2", "--passkey-max-steps", "3", "--finetune-steps", "1"]
    # A tiny model never retrieves: one extension block, then the cap.
    argv += ["--extend-steps", "1", "--methods", "none,yarn", "--examples", "2", "--seeds", "3"]
    monkeypatch.setattr(sys, "argv", [*argv, "--device", "cpu"])
    script.main()
    stdout = capsys.readouterr().out
    assert (tmp_path / "pk" / "seed3" / "ft_yarn" / "eval" / "extrapolate.json").exists()
    passkey = tmp_path / "pk" / "seed3" / "passkey"
    assert f"$ posexp train resume={passkey} train.max_steps=3" in stdout
    assert "step 3, worst depth at L0" in stdout
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
    assert "over n = 1 seed." in report and "Retrieval was learned" in report
    # A second call finds every run done and every cell measured: it trains nothing, its
    # evaluations score nothing (their files stay as they are), and it writes the report again.
    evals = sorted((tmp_path / "pk").rglob("eval"))
    before = [snapshot(e) for e in evals]
    script.main()
    again = capsys.readouterr().out.splitlines()
    skipped = [line for line in again if line.endswith("skipped")]
    assert len(skipped) == 4  # lm, passkey and the two fine-tunes
    commands = [line for line in again if line.startswith("$ posexp")]
    assert commands[-1] == f"$ posexp report {tmp_path / 'pk'} --no-eval --device cpu"
    assert all(c.startswith("$ posexp eval-extrapolate --run ") for c in commands[:-1])
    assert [snapshot(e) for e in evals] == before


def test_the_passkey_script_stops_on_a_failed_step(tmp_path, cache, monkeypatch, capsys):
    script = load_passkey_script()
    monkeypatch.setattr(
        script, "run_posexp", lambda args: posexp(tmp_path, cache, *args, check=False).returncode
    )
    monkeypatch.setattr(
        sys, "argv", ["passkey.py", "--out", str(tmp_path / "pk"), "--model", "huge"]
    )
    with pytest.raises(SystemExit, match=r"^stopped: `posexp train .*model=huge.*` failed$"):
        script.main()


def test_chomsky_preset_scores_each_task_apart_into_the_report(tmp_path, cache):
    sweep, report = sweep_into_report(
        tmp_path,
        cache,
        "experiment=chomsky",
        "pe=none,rope_randomized",
        "seed=0",
        "data.test_lengths=[8,12]",
    )
    parts = ["modular_arithmetic", "stack_manipulation", "duplicate_string", "missing_duplicate"]
    parts += ["odd_first", "binary_addition", "bucket_sort", "interlocked_pairing"]
    # One table per task of the mixture, never one for the mixture itself.
    assert all(f"### {p}" in report for p in parts) and "### chomsky" not in report
    assert "RoPE + randomized" in report and "NoPE" in report
    rows = list(csv.DictReader((sweep / "report_length_generalization.csv").open()))
    assert {(r["task"], r["size"]) for r in rows} == {(p, s) for p in parts for s in ("8", "12")}
    (job,) = [d for d in sweep.iterdir() if d.name == "pe=rope_randomized"]
    records = json.loads((job / "eval" / "extrapolate.json").read_text())
    assert sorted((r["task"], r["length"]) for r in records) == sorted(
        (p, n) for p in parts for n in (8, 12)
    )
    assert all(r["protocol"] == "exact_match" and r["examples"] == 5 for r in records)
    # The papers' metric beside exact match: per-token accuracy in the records, CSV and report.
    assert all(0.0 <= r["token_accuracy"] <= 1.0 for r in records)
    assert all(r["token_accuracy"] != "" for r in rows)
    assert "### Per-token accuracy past the training sizes" in report
