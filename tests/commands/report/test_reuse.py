"""`posexp report` on a sweep reuses what is measured and scores only the cells still missing."""

from __future__ import annotations

import json

import pytest

from tests.helpers import TINY, posexp, snapshot

PRESET = [
    "experiment=extrapolation",
    *[a for a in TINY if not a.startswith("heads=")],
    "heads=2",
    "extrapolate.len=64",
    "extrapolate.tokens=256",
    "extrapolate.method='none,pi'",
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, cache):
    """A two-job sweep of the extrapolation preset (RoPE and ALiBi), trained and not evaluated."""
    cwd = tmp_path_factory.mktemp("reuse")
    posexp(cwd, cache, "train", "-m", "pe=rope,alibi", "seed=0", *PRESET, "hydra.sweep.dir=sweep")
    return cwd, cwd / "sweep"


def cells(job):
    return {
        (r["label"], r["length"]) for r in json.loads((job / "eval/extrapolate.json").read_text())
    }


def test_a_report_fills_in_what_is_missing_then_scores_nothing(sweep, cache):
    cwd, root = sweep
    rope, alibi = root / "pe=rope", root / "pe=alibi"
    # A run evaluated for one method is not "evaluated": the preset's other cells are filled in.
    posexp(cwd, cache, "eval-extrapolate", "--run", str(rope), "--method", "none")
    first = posexp(cwd, cache, "report", str(root))
    assert f"{rope}: 2 of 4 cells already measured, scoring 2" in first.stdout
    assert f"{alibi}: scoring 2 cells" in first.stdout
    assert f"{alibi}: skipping pi (not applicable to pe=alibi)" in first.stdout
    assert cells(rope) == {(m, n) for m in ("none", "pi") for n in (32, 64)}
    md = (root / "report.md").read_text()
    assert "RoPE+pi" in md and "## Length extrapolation" in md
    # Nothing new: nothing scored, no evaluation file touched, the report written again.
    before = [snapshot(job / "eval") for job in (rope, alibi)]
    second = posexp(cwd, cache, "report", str(root))
    assert (
        "2 of 2 runs have every cell asked for measured on their current weights" in second.stdout
    )
    assert [snapshot(job / "eval") for job in (rope, alibi)] == before


def test_a_report_adds_the_method_specs_asked_for(sweep, cache):
    cwd, root = sweep
    rope = root / "pe=rope"
    out = posexp(cwd, cache, "report", str(root), "--method", "none,self_extend(group=2,window=8)")
    assert f"{rope}: 2 of 4 cells already measured, scoring 2" in out.stdout
    assert {("self_extend(group=2,window=8)", 32), ("self_extend(group=2,window=8)", 64)} <= cells(
        rope
    )
    assert "RoPE+self_extend(group=2,window=8)" in (root / "report.md").read_text()


def test_a_bad_spec_for_a_report_is_one_line_and_writes_nothing(sweep, cache):
    cwd, root = sweep
    before = snapshot(root)
    bad = posexp(cwd, cache, "report", str(root), "--method", "self_extend(group=0)", check=False)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: --method 'self_extend(group=0)': group must be a positive integer or null, got 0"
    ]
    assert snapshot(root) == before


def test_a_damaged_record_file_is_named_in_the_report(sweep, cache):
    cwd, root = sweep
    alibi = root / "pe=alibi"
    records = alibi / "eval" / "extrapolate.json"
    saved = records.read_text()
    try:
        records.write_text('{"records": []}')  # a file, not a record, damaged: see test_records
        out = posexp(cwd, cache, "report", str(root), "--no-eval")
        md = (root / "report.md").read_text()
        assert "## Evaluations that could not be read" in md
        assert "expected a list of records" in md
        assert "evaluation not read" in out.stdout
    finally:
        records.write_text(saved)
