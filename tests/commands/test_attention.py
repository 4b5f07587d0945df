"""`posexp attention` on a tiny trained run, in-process: the lengths it picks, the CSVs (long
format, every length in one table) and figures it writes, and its one-line refusals."""

from __future__ import annotations

import csv
import io
from collections import defaultdict

import pytest
from rich.console import Console

from posexp.commands.attention import longest_evaluated, measure_run, plan_lengths
from posexp.commands.train import run_training
from posexp.errors import PosexpError
from posexp.store.rundir import RunDir
from tests.helpers import TINY, run_config


@pytest.fixture(scope="module")
def run(tmp_path_factory, cache):
    """A tiny byte-level rope run trained at 32 tokens (2 layers, 2 heads)."""
    path = tmp_path_factory.mktemp("attention") / "run"
    run_training(run_config(*TINY, f"cache_dir={cache}"), path)
    return path


def read(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def quiet():
    return Console(file=io.StringIO(), width=200)


def test_lengths_are_the_training_length_and_the_longest_asked_or_evaluated():
    assert plan_lengths(32, 128, 64) == [32, 128]
    assert plan_lengths(32, None, 256) == [32, 256]
    assert plan_lengths(32, None, None) == [32]
    assert plan_lengths(32, 32, None) == [32]


def test_the_command_writes_long_tables_and_figures_at_both_lengths(run):
    result = measure_run(run, length=64, windows=2, device="cpu", console=quiet())
    folder = run / "attention"
    assert result.lengths == [32, 64] and result.windows == {32: 2, 64: 2}
    names = {p.name for p in folder.iterdir()}
    for n in (32, 64):
        for stat in ("distance", "entropy", "sink"):
            assert {f"{stat}_L{n}.png", f"{stat}_L{n}.svg"} <= names
    distance = read(folder / "distance.csv")
    # 2 layers x 2 heads x buckets (6 up to 32 tokens, 7 up to 64)
    assert len(distance) == 2 * 2 * 6 + 2 * 2 * 7
    totals = defaultdict(float)
    for r in distance:
        totals[r["length"], r["layer"], r["head"]] += float(r["mass"])
        assert int(r["queries"]) == 2 * (int(r["length"]) - int(r["low"]))
    assert all(t == pytest.approx(1.0, abs=1e-6) for t in totals.values())  # rows sum to 1
    sink = read(folder / "sink.csv")
    assert all(float(r["sink_share"]) == pytest.approx(1.0) for r in sink if r["bucket"] == "0")
    summary = read(folder / "summary.csv")
    assert {(r["length"], r["far"]) for r in summary} == {("32", "32"), ("64", "32")}
    assert all(r["far_mass"] == "" for r in summary if r["length"] == "32")  # nothing past L0
    assert all(0 <= float(r["far_mass"]) <= 1 for r in summary if r["length"] == "64")


def test_without_len_it_takes_the_longest_evaluated_length(run, monkeypatch):
    from posexp.commands import attention

    monkeypatch.setattr(attention, "longest_evaluated", lambda run: 48)
    result = measure_run(run, windows=1, device="cpu", console=quiet())
    assert result.lengths == [32, 48]
    assert longest_evaluated(RunDir(run)) is None  # the run has no eval records


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"windows": 0}, "--windows must be a positive integer, got 0"),
        ({"batch_tokens": 0}, "--batch-tokens must be a positive integer, got 0"),
        ({"length": 1}, "--len must be at least 2 tokens, got 1"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(run, kw, says, tmp_path):
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(PosexpError, match=says):
        measure_run(run, device="cpu", console=quiet(), **kw)
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_length_longer_than_the_test_split_is_skipped_with_its_reason(run):
    console = quiet()
    result = measure_run(run, length=10**7, windows=1, device="cpu", console=console)
    assert result.lengths == [32]
    assert "length 10,000,000 skipped: the test split holds" in console.file.getvalue()


def test_the_cli_measures_a_run_and_refuses_bad_input_in_one_line(run, cache, tmp_path):
    from tests.helpers import posexp

    proc = posexp(tmp_path, cache, "attention", "--run", str(run), "--len", "48", "--windows", "1")
    assert str(run / "attention" / "distance_L48.png") in proc.stdout
    bad = posexp(tmp_path, cache, "attention", "--run", str(run), "--windows", "0", check=False)
    assert bad.returncode != 0
    assert bad.stderr.strip() == "error: --windows must be a positive integer, got 0"
    assert "Traceback" not in bad.stderr


def test_batches_shrink_to_fit_and_a_length_that_cannot_fit_is_skipped(run, monkeypatch):
    from posexp.commands import attention
    from posexp.runtime import hardware

    one = attention.layer_bytes(64, 1, 2)
    assert attention.layer_bytes(64, 4, 2) == 4 * one
    assert attention.fitting_batch(64, 8, 2, None) == 8
    assert attention.fitting_batch(64, 8, 2, 5 * one) == 4
    assert attention.fitting_batch(64, 8, 2, one - 1) == 0
    # Room for one layer at 32 tokens, not at 64.
    monkeypatch.setattr(hardware, "available_memory", lambda kind: attention.layer_bytes(32, 1, 2))
    console = quiet()
    result = measure_run(run, length=64, windows=1, device="cpu", console=console)
    assert result.lengths == [32]
    assert "length 64 skipped: one layer's attention at 64 tokens needs about" in (
        console.file.getvalue()
    )


def test_a_sweep_dir_measures_every_job_and_names_the_ones_it_skips(run, tmp_path, monkeypatch):
    import shutil

    from posexp.commands import attention

    sweep = tmp_path / "sweep"
    for name in ("a", "b"):
        shutil.copytree(run, sweep / name, ignore=shutil.ignore_patterns("attention*"))
    results = attention.measure_runs(sweep, windows=1, device="cpu", console=quiet())
    assert [r.run_dir.name for r in results] == ["a", "b"]
    assert all((sweep / n / "attention" / "summary.csv").is_file() for n in ("a", "b"))

    real = attention.measure_run

    def fails_on_a(path, *args):
        if path.name == "a":
            raise PosexpError("a broken job")
        return real(path, *args)

    monkeypatch.setattr(attention, "measure_run", fails_on_a)
    console = quiet()
    with pytest.raises(PosexpError, match=r"measured 1 run\(s\); skipped 1"):
        attention.measure_runs(sweep, windows=1, device="cpu", console=console)
    assert f"{sweep / 'a'}: skipped: a broken job" in console.file.getvalue()
    with pytest.raises(PosexpError, match="--windows must be a positive integer"):
        attention.measure_runs(sweep, windows=0, device="cpu", console=console)


def test_eval_extrapolate_with_attention_measures_the_longest_evaluated_length_once(run, tmp_path):
    import shutil

    from posexp.commands.extrapolate.evaluate import evaluate_runs
    from posexp.commands.extrapolate.plan import Settings
    from posexp.config import ExtrapolateConfig

    path = tmp_path / "run"
    shutil.copytree(run, path, ignore=shutil.ignore_patterns("attention"))
    asked = ExtrapolateConfig.from_dict(
        {"lengths": "32,64", "method": "none", "tokens": 128, "attention": True}, prefix="--"
    )
    evaluate_runs(path, Settings(asked, "cpu"), console=quiet(), tables=False)
    summary = path / "attention" / "summary.csv"
    assert {r["length"] for r in read(summary)} == {"32", "64"}
    before = summary.stat().st_mtime_ns
    evaluate_runs(path, Settings(asked, "cpu"), console=quiet(), tables=False)
    assert summary.stat().st_mtime_ns == before  # measured there already: not again
    plain = ExtrapolateConfig.from_dict({"lengths": "32,128", "method": "none"}, prefix="--")
    evaluate_runs(path, Settings(plain, "cpu"), console=quiet(), tables=False)
    assert {r["length"] for r in read(summary)} == {"32", "64"}  # not asked: not measured


def test_a_non_boolean_attention_knob_is_one_line():
    from posexp.config import ExtrapolateConfig

    with pytest.raises(PosexpError, match="extrapolate.attention must be true or false, got 'yes'"):
        ExtrapolateConfig.from_dict({"attention": "yes"})
