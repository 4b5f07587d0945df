"""Every bad input: one line naming the value and what is allowed, exit 2, no traceback, no run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posexp.config.paths import config_dir
from tests.helpers import TINY, posexp, run_config, run_dirs

CASES = {
    "unknown pe": (
        ["pe=nope"],
        f"unknown pe 'nope'; allowed: {', '.join(sorted(p.stem for p in (Path(config_dir()) / 'pe').glob('*.yaml')))}",
    ),
    "unknown experiment": (
        ["experiment=bogus"],
        f"unknown experiment 'bogus'; allowed: {', '.join(sorted(p.stem for p in (Path(config_dir()) / 'experiment').glob('*.yaml')))}",
    ),
    "extension the pe cannot take": (
        ["pe=alibi", "extension=yarn"],
        "extension 'yarn' does not apply to pe 'alibi' (bias); allowed for alibi: none",
    ),
    "unknown model": (["model=huge"], "unknown model 'huge'; allowed: base, small, tiny"),
    "unknown data": (["data=imdb"], "unknown data 'imdb'; allowed:"),
    "heads not dividing": (["heads=3"], "heads=3 does not divide d_model=64; allowed: 1, 2, 4, 8"),
    "zero heads": (["heads=0"], "heads must be a positive integer, got 0"),
    "negative heads": (["heads=-4"], "heads must be a positive integer, got -4"),
    "zero steps": (["train.max_steps=0"], "train.max_steps must be a positive integer, got 0"),
    "negative length": (["train.seq_len=-5"], "train.seq_len must be a positive integer, got -5"),
    "short learned table": (
        ["pe=learned", "pe.max_len=16"],
        "pe.max_len=16 is shorter than train.seq_len=32",
    ),
    "missing data file": (["data=text", "data.files=[no_such.txt]"], "no_such.txt"),
    "unreachable hub": (
        ["data=hub", "data.name=wikitext", "data.config=wikitext-2-raw-v1"],
        "data=text",
    ),
    "bad device": (["device=tpu"], "unknown device 'tpu'; allowed: auto, cpu, cuda, mps"),
    "bad method spec": (
        ["extension=yarn(beta_fast=0)"],
        "extension= 'yarn(beta_fast=0)': beta_fast must be a finite number > 0, got 0",
    ),
    "unknown setting in a spec": (
        ["extension=pi(beta_fast=8)"],
        "extension= 'pi(beta_fast=8)': pi has no setting 'beta_fast'; allowed: factor",
    ),
    "a spec key given twice": (
        ["extension=yarn(factor=2)", "extension.factor=4"],
        "extension.factor given twice: in 'extension=yarn(factor=2)' and in 'extension.factor=4'",
    ),
    "an integer past 2^53 in a spec": (
        ["extension=pi(factor=99999999999999999999999)"],
        "factor must be at most 9,007,199,254,740,992, got 99999999999999999999999",
    ),
    "a grid where one method is set up": (
        ["extension=yarn(factor=2|4)"],
        "one setting each expected here, got a grid of 2",
    ),
    "a sweep over specs": (
        ["-m", "extension=yarn(beta_fast=8),ntk"],
        "a sweep over method specs is not supported; sweep one setting at a time",
    ),
    "a swept evaluation setting": (
        ["-m", "extrapolate.method=none,pi"],
        "extrapolate.method=none,pi sweeps an evaluation setting",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_clean_line(tmp_path, cache, name):
    overrides, message = CASES[name]
    # A key the case sets replaces TINY's (given twice, it would be refused for that instead).
    keys = {o.partition("=")[0] for o in overrides}
    base = [a for a in TINY if a.partition("=")[0] not in keys]
    proc = posexp(tmp_path, cache, "train", *base, *overrides, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, proc.stderr
    assert message in error_lines[0]
    assert run_dirs(tmp_path) == []  # nothing half-written


def test_resume_errors(tmp_path, cache):
    missing = posexp(tmp_path, cache, "train", "resume=outputs/runs/nothing_here", check=False)
    assert missing.returncode == 2 and "no such run dir" in missing.stderr
    assert "Traceback" not in missing.stderr

    run = tmp_path / "run"
    posexp(tmp_path, cache, "train", "pe=rope", *TINY, f"hydra.run.dir={run}")
    done = posexp(tmp_path, cache, "train", f"resume={run}")  # completed: nothing to redo
    assert "already completed 6 steps" in done.stderr
    events = EventAccumulator(str(run)).Reload()
    assert [e.step for e in events.Scalars("val/loss")] == [0, 3, 6]  # nothing logged twice
    shorter = posexp(tmp_path, cache, "train", f"resume={run}", "train.max_steps=2", check=False)
    assert shorter.returncode == 2 and "Traceback" not in shorter.stderr
    assert "train.max_steps=2 is below the step 6 of" in shorter.stderr
    assert "allowed: train.max_steps >= 6" in shorter.stderr

    other = posexp(tmp_path, cache, "train", f"resume={run}", "pe=alibi", check=False)
    assert other.returncode == 2
    assert "was trained with pe=rope" in other.stderr and "not pe=alibi" in other.stderr
    # The overrides that made the run are no conflict (a sweep rerun passes them again), even
    # for a PE whose YAML never names the keys its saved config records (pe=none).
    nope = tmp_path / "nope"
    posexp(tmp_path, cache, "train", "pe=none", *TINY, f"hydra.run.dir={nope}")
    posexp(tmp_path, cache, "train", f"resume={nope}", "pe=none", "train.max_steps=8")
    assert json.loads((nope / "results.json").read_text())["step"] == 8

    (run / "checkpoint" / "model.safetensors").write_bytes(b"garbage")
    corrupt = posexp(tmp_path, cache, "train", f"resume={run}", "train.max_steps=9", check=False)
    assert corrupt.returncode == 2 and "corrupt checkpoint" in corrupt.stderr
    assert "Traceback" not in corrupt.stderr

    empty = tmp_path / "empty_run"
    empty.mkdir()
    no_ckpt = posexp(tmp_path, cache, "train", f"resume={empty}", check=False)
    assert no_ckpt.returncode == 2 and "no checkpoint" in no_ckpt.stderr


CONFIG_CASES = {
    "heads=abc": "heads must be a positive integer, got 'abc'",
    "heads=2.0": "heads must be a positive integer, got 2.0",
    "seed=abc": "seed must be an integer, got 'abc'",
    "train.lr=inf": "train.lr must be a finite number > 0, got inf",
    "train.grad_clip=-1": "train.grad_clip must be a finite number > 0, got -1",
    "train.weight_decay=-1": "train.weight_decay must be a finite number >= 0, got -1",
    "train.min_lr=-1": "train.min_lr must be a finite number >= 0, got -1",
    "train.betas=[2,3]": "train.betas[0] must be a finite number in [0, 1), got 2",
    "train.betas=[0.9]": "train.betas must be two numbers in [0, 1), got [0.9]",
    "model.dropout=-0.5": "model.dropout must be a finite number in [0, 1), got -0.5",
    "model.d_ff=0": "model.d_ff must be a positive integer or null, got 0",
}


@pytest.mark.parametrize("override", sorted(CONFIG_CASES))
def test_config_values_are_checked_before_any_work(override):
    # In-process: the same check `posexp train` runs first (the CLI path is covered above).
    from posexp.errors import PosexpError

    with pytest.raises(PosexpError, match=f"^{re.escape(CONFIG_CASES[override])}$"):
        run_config(override)


@pytest.mark.parametrize(
    ("lr", "said"),
    # 1e30: the loss is nan; 1000: finite, but far past a uniform guess (its ppl overflowed)
    [("1e30", r"loss became nan at step \d+"), ("1000", r"loss became [\d.e+]+ at step \d+")],
)
def test_a_diverging_run_stops_as_failed_and_says_so(tmp_path, cache, lr, said):
    proc = posexp(tmp_path, cache, "train", *TINY, f"train.lr={lr}", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert re.search(said + r" \(a uniform guess scores 5\.56\); lower train\.lr", line)
    (run,) = run_dirs(tmp_path)  # kept, to look at
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "failed" and re.search(said, results["error"])
    assert json.loads((run / "provenance.json").read_text())["sessions"][-1]["status"] == "failed"
