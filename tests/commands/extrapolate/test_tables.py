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
