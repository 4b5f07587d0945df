"""The results table: every current record of a set of runs, one measured value a row."""

from __future__ import annotations

import json
import logging

import pandas as pd
import pytest

from posexp.extension.spec import MethodSpec
from posexp.results.table import COLUMNS, load_results
from posexp.rundir import RunDir
from posexp.scoring.records import Checkpoint, Record, checkpoint_of
from tests.helpers import TINY, posexp
from tests.test_rundir import make_run


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, cache):
    """A tiny RoPE run trained for a few steps, evaluated with a grid and a factor list."""
    cwd = tmp_path_factory.mktemp("table")
    run = cwd / "run"
    posexp(cwd, cache, "train", "pe=rope", *TINY, "seed=7", f"hydra.run.dir={run}")
    posexp(
        cwd,
        cache,
        "eval-extrapolate",
        "--run",
        str(run),
        "--lengths",
        "32,64",
        "--tokens",
        "256",
        "--method",
        "none",
        "--method",
        "self_extend(group=2|4,window=8|16)",
        "--method",
        "yarn(factor=4|16)",
    )
    return run


def test_a_real_run_loads_one_row_per_measured_value(evaluated):
    table = load_results([evaluated])
    assert list(table.columns[: len(COLUMNS)]) == list(COLUMNS)
    stored = json.loads((evaluated / "eval" / "extrapolate.json").read_text())
    # 7 specs x 2 lengths, each record holding a ppl and a loss
    assert len(stored) == 14 and len(table) == 28
    assert set(table["metric"]) == {"ppl", "loss"}
    ppl = table[table["metric"] == "ppl"]
    assert ppl["primary"].all() and not table[table["metric"] == "loss"]["primary"].any()
    assert set(table["run"]) == {str(evaluated)} and set(table["pe"]) == {"rope"}
    assert set(table["seed"]) == {7} and set(table["parent"]) == {None}
    assert set(table["l0"]) == {32} and sorted(set(table["x_l0"])) == [1.0, 2.0]
    assert sorted(set(table["spec"])) == sorted(
        [
            "none",
            "yarn(factor=4)",
            "yarn(factor=16)",
            *(f"self_extend(group={g},window={w})" for g in (2, 4) for w in (8, 16)),
        ]
    )
    # each value is the stored record's, keyed by its spec and length
    by = {(r["label"], r["length"]): r for r in stored}
    for row in ppl.itertuples():
        assert row.value == by[row.spec, row.length]["ppl"]
        assert row.scored_tokens == by[row.spec, row.length]["tokens"] == 256
        assert row.settings == by[row.spec, row.length]["settings"]
    step = RunDir(evaluated).step()
    assert set(table["checkpoint"]) == {f"{step}:{checkpoint_of(RunDir(evaluated)).sha256}"}
    se = ppl[ppl["method"] == "self_extend"]
    assert sorted(zip(se["set_group"], se["set_window"], strict=True)) == sorted(
        [(g, w) for g in (2, 4) for w in (8, 16)] * 2
    )
    assert str(table["set_group"].dtype) == "Int64"  # integers stay integers
    yarn = ppl[ppl["method"] == "yarn"]
    assert sorted(set(yarn["factor"])) == [4.0, 16.0] and yarn["set_group"].isna().all()
    none = ppl[ppl["method"] == "none"]
    # none runs at s = 1 whatever the length
    assert set(none["factor"]) == {1.0}


def record(spec: MethodSpec, length: int, ppl: float, checkpoint: Checkpoint, **kw) -> dict:
    settings = kw.pop("settings", {})
    return Record(
        spec=spec,
        length=length,
        protocol="nonoverlap",
        factor=kw.pop("factor", 1.0),
        settings=settings,
        sample_size=512,
        precision="fp32",
        checkpoint=checkpoint,
        values={"ppl": ppl, "loss": 1.0, "tokens": 512},
        **kw,
    ).to_dict()


def write(run: RunDir, name: str, rows: list[dict]) -> None:
    (run.path / "eval").mkdir(exist_ok=True)
    (run.path / "eval" / name).write_text(json.dumps(rows))


def test_hand_made_files_give_current_records_only_and_skip_damaged_ones(tmp_path, caplog):
    runs = []
    for name in ("a", "b"):
        make_run(tmp_path / name)
        runs.append(RunDir(tmp_path / name))
    now = checkpoint_of(runs[0])
    old = Checkpoint(1, "0123456789abcdef")
    yarn = MethodSpec("yarn", {"beta_fast": 16.0000001}, 4.0)
    yarn2 = MethodSpec("yarn", {"beta_fast": 16.0000002}, 4.0)
    full = {"beta_fast": 16.0000001, "beta_slow": 1.0, "attention_factor": None}
    good = [
        record(MethodSpec("none"), 32, 9.0, now),
        record(yarn, 64, 7.5, now, factor=4.0, settings=full),
        record(yarn2, 64, 7.25, now, factor=4.0, settings={**full, "beta_fast": 16.0000002}),
        record(MethodSpec("none"), 64, 99.0, old),  # earlier weights: not current
    ]
    bad = [
        {**good[0], "ppl": [1, 2]},
        {**good[0], "ppl": -5},
        {**good[0], "precision": 5},
        {**good[1], "settings": {**full, "beta_fast": "x"}},
        {**good[0], "length": 1e30},
        {**good[0], "method": "no_such_method"},
    ]
    write(runs[0], "extrapolate.json", [*good, *bad])
    write(runs[0], "stale.json", [record(MethodSpec("none"), 128, 50.0, old)])
    # run b: records of other weights only -> adds nothing
    write(runs[1], "extrapolate.json", [record(MethodSpec("none"), 32, 3.0, old)])
    with caplog.at_level(logging.WARNING, "posexp"):
        table = load_results(runs)
    ppl = table[table["metric"] == "ppl"]
    assert sorted(ppl["value"]) == [7.25, 7.5, 9.0]
    # two values that differ in the 8th digit are two rows, two labels
    assert sorted(ppl[ppl["method"] == "yarn"]["set_beta_fast"]) == [16.0000001, 16.0000002]
    assert len(set(ppl["spec"])) == 3
    said = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert len(said) == 1 and "set aside 6 damaged record(s) of 10" in said[0]
    assert "\n" not in said[0]


def test_no_records_is_an_empty_table_with_the_columns(tmp_path):
    make_run(tmp_path / "r")
    table = load_results([tmp_path / "r"])
    assert table.empty and list(table.columns) == list(COLUMNS)
    assert isinstance(table, pd.DataFrame)


def test_a_sweep_dir_stands_for_its_jobs_and_a_folder_without_runs_is_one_line(tmp_path):
    from posexp.errors import PosexpError

    sweep = tmp_path / "sweep"
    for name in ("pe=rope", "pe=alibi"):
        make_run(sweep / name, pe=name.split("=")[1])
        run = RunDir(sweep / name)
        write(run, "extrapolate.json", [record(MethodSpec("none"), 32, 5.0, checkpoint_of(run))])
    table = load_results([sweep, sweep / "pe=rope"])  # a job named twice is read once
    assert sorted(table[table["metric"] == "ppl"]["pe"]) == ["alibi", "rope"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(PosexpError, match=r"no runs in .*empty"):
        load_results([tmp_path / "empty"])
