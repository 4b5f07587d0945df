"""posexp/commands/extrapolate/tables.py: the terminal table prints names as they are."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from posexp.commands.extrapolate.plan import RunResult
from posexp.commands.extrapolate.tables import print_table


def test_brackets_in_run_dirs_and_labels_are_text_not_markup(tmp_path):
    run_dir = tmp_path / "data.files=[/tmp/a.txt]"
    records = [
        {"method": method, "protocol": "sliding", "length": n, "metric": "ppl", "ppl": 3.0 + n / 64}
        for method in ("none [stride 32]", "yarn [bold]")
        for n in (64, 128)
    ]
    console = Console(width=120, record=True)
    print_table(RunResult(Path(run_dir), "rope", 64, records, []), console, several=True)
    text = console.export_text()
    assert f"{run_dir}: test perplexity" in text
    assert "none [stride 32]" in text and "yarn [bold]" in text


def test_lengths_that_do_not_fit_a_narrow_console_go_on_to_another_table(tmp_path):
    # A pipe or a Slurm log is 80 columns: the labels and numbers stay whole, never cut.
    lengths = [64 * k for k in (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 32)]
    records = [
        {"method": method, "protocol": "sliding", "length": n, "metric": "ppl", "ppl": 10.25 + n}
        for method in ("none", "self_extend(group=4,window=16)")
        for n in lengths
    ]
    console = Console(width=80, record=True)
    print_table(RunResult(tmp_path / "run", "rope", 64, records, []), console)
    text = console.export_text()
    rules = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert "…" not in text and max(map(len, rules)) <= 80
    tables = text.count("┏")
    assert tables >= 2 and text.count("self_extend(group=4,window=16)") == tables
    for n in lengths:  # each length once, its value whole
        assert f"{10.25 + n:,.2f}" in text and text.count(f" {n} ┃") == 1


def test_rows_told_apart_by_key_depth_are_headed_so(tmp_path):
    from posexp.commands.extrapolate.tables import markdown_table

    records = [
        {
            "method": "none",
            "protocol": "exact_match",
            "length": 64,
            "metric": "accuracy",
            "accuracy": 1.0,
            "depth": depth,
        }
        for depth in (0.0, 0.5)
    ]
    console = Console(width=120, record=True)
    print_table(RunResult(tmp_path / "run", "rope", 64, records, []), console)
    assert "key depth" in console.export_text() and "protocol" not in console.export_text()
    assert "| method | key depth | 64 |" in markdown_table(records)
