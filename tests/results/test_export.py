"""Exports: one value a row in CSV, JSON lines and Parquet; LaTeX with mean ± std and n."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from posexp.errors import PosexpError
from posexp.results.export import latex_table, write_long
from posexp.results.summary import main_table, summarize
from tests.results.frames import study


def test_the_long_exports_hold_one_value_a_row_and_read_back_alike(tmp_path):
    frame = study()
    paths = write_long(frame, tmp_path / "results")
    assert [p.name for p in paths] == ["results.csv", "results.jsonl", "results.parquet"]
    csv = pd.read_csv(paths[0])
    parquet = pd.read_parquet(paths[2])
    lines = [json.loads(line) for line in paths[1].read_text().splitlines()]
    assert len(csv) == len(parquet) == len(lines) == len(frame)
    assert list(csv["value"]) == list(frame["value"]) == [r["value"] for r in lines]
    assert lines[0]["settings"] == frame["settings"].iloc[0]
    assert json.loads(csv["settings"].iloc[0]) == frame["settings"].iloc[0]
    assert {"run", "pe", "seed", "spec", "length", "x_l0", "metric", "value"} <= set(csv.columns)


def test_an_unknown_format_is_one_line(tmp_path):
    with pytest.raises(PosexpError, match="unknown format 'xlsx'; allowed: csv, jsonl, parquet"):
        write_long(study(), tmp_path / "r", ("xlsx",))
    assert list(tmp_path.iterdir()) == []


def test_latex_tables_escape_and_carry_mean_std_and_n():
    table = main_table(summarize(study()), "nonoverlap", "ppl")
    tex = latex_table(table, "ppl by length (nonoverlap)")
    assert r"\begin{tabular}{lrrr}" in tex
    assert r"64 (1$\times$)" in tex
    assert r"rope + self\_extend(group=2,window=8)" in tex
    assert r"20.05 $\pm$ 0.07 (n = 2)" in tex
