"""The main table: PEs and methods as rows, lengths with their multiple as columns."""

from __future__ import annotations

import pytest

from posexp.results.summary import main_table, markdown, summarize
from posexp.results.table import results_frame
from tests.results.frames import row, study


def test_cells_are_mean_std_and_n_over_seeds():
    summary = summarize(study())
    cell = summary[
        (summary["pe"] == "rope") & (summary["spec"] == "none") & (summary["length"] == 128)
    ]
    (values,) = cell["values"]
    assert values == [20.0, 20.1]  # seed 0 then seed 1
    assert cell["mean"].item() == pytest.approx(20.05)
    assert cell["std"].item() == pytest.approx(0.0707107, rel=1e-5)
    assert cell["n"].item() == 2


def test_pes_and_methods_are_rows_and_lengths_with_their_multiple_columns():
    table = main_table(summarize(study()), "nonoverlap", "ppl")
    assert list(table.columns) == ["64 (1×)", "128 (2×)", "256 (4×)"]
    labels = list(table.index)
    assert labels[0] == "rope"  # RoPE's declared order comes before ALiBi's
    assert table.loc["rope", "128 (2×)"] == "20.05 ± 0.07 (n = 2)"
    assert "| PE + method | 64 (1×) |" in markdown(table)


def test_settings_sort_numerically():
    labels = list(main_table(summarize(study()), "nonoverlap", "ppl").index)
    rope = [label for label in labels if label.startswith("rope")]
    # methods in the registry's order, each one's specs numerically (16 after 4 and 8)
    assert rope[0] == "rope"
    assert [x for x in rope if "yarn" in x] == ["rope + yarn(factor=4)", "rope + yarn(factor=16)"]
    assert [x for x in rope if "self_extend" in x] == [
        "rope + self_extend(group=2,window=8)",
        "rope + self_extend(group=2,window=16)",
        "rope + self_extend(group=4,window=8)",
        "rope + self_extend(group=4,window=16)",
    ]


def test_a_fine_tune_is_its_own_row_labelled_by_what_it_changed():
    rows = [row("rope", 0, "none", "none", {}, 128, 20.0)]
    rows.append(row("rope", 0, "none", "none", {}, 128, 12.0, parent="runs/rope-0"))
    summary = summarize(results_frame(rows), changed={"runs/rope-0-ft": "ft yarn x4"})
    table = main_table(summary, "nonoverlap", "ppl")
    assert list(table.index) == ["rope", "rope [ft yarn x4]"]
    assert table.loc["rope [ft yarn x4]", "128 (2×)"] == "12.00"


def test_a_diverged_cell_states_no_spread():
    from posexp.results.summary import cell_text
    from posexp.results.verdict import mean_std

    assert cell_text(*mean_std([float("inf"), float("inf")]), 2) == "inf (n = 2)"
    assert cell_text(*mean_std([1.0, 3.0]), 2) == "2.00 ± 1.41 (n = 2)"
