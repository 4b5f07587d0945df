"""Every bad input: one line naming the value and what is allowed, exit 2, no traceback, no run."""

from __future__ import annotations

import pytest

from tests.helpers import TINY, posexp, run_dirs

CASES = {
    "unknown pe": (["pe=nope"], "unknown pe 'nope'; allowed: alibi, learned, none, rope, sinusoidal"),
    "unknown model": (["model=huge"], "unknown model 'huge'; allowed: base, small, tiny"),
    "unknown data": (["data=imdb"], "unknown data 'imdb'; allowed:"),
    "heads not dividing": (["heads=3"], "heads=3 does not divide d_model=64; allowed: 1, 2, 4, 8"),
    "zero heads": (["heads=0"], "heads must be a positive integer, got 0"),
    "negative heads": (["heads=-4"], "heads must be a positive integer, got -4"),
    "zero steps": (["train.max_steps=0"], "train.max_steps must be a positive integer, got 0"),
    "negative length": (["train.seq_len=-5"], "train.seq_len must be a positive integer, got -5"),
    "short learned table": (["pe=learned", "pe.max_len=16"], "pe.max_len=16 is shorter than train.seq_len=32"),
    "missing data file": (["data=text", "data.files=[no_such.txt]"], "no_such.txt"),
    "unreachable hub": (["data=hub", "data.name=wikitext", "data.config=wikitext-2-raw-v1"], "data=text"),
    "bad device": (["device=tpu"], "unknown device 'tpu'; allowed: auto, cpu, cuda, mps"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_clean_line(tmp_path, cache, name):
    overrides, message = CASES[name]
    proc = posexp(tmp_path, cache, "train", *TINY, *overrides, check=False)
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
    other = posexp(tmp_path, cache, "train", f"resume={run}", "pe=alibi", check=False)
    assert other.returncode == 2
    assert "was trained with pe=rope" in other.stderr and "not pe=alibi" in other.stderr

    (run / "checkpoint" / "model.safetensors").write_bytes(b"garbage")
    corrupt = posexp(tmp_path, cache, "train", f"resume={run}", "train.max_steps=9", check=False)
    assert corrupt.returncode == 2 and "corrupt checkpoint" in corrupt.stderr
    assert "Traceback" not in corrupt.stderr

    empty = tmp_path / "empty_run"
    empty.mkdir()
    no_ckpt = posexp(tmp_path, cache, "train", f"resume={empty}", check=False)
    assert no_ckpt.returncode == 2 and "no checkpoint" in no_ckpt.stderr
