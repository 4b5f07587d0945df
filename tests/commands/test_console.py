"""The commands' console: piped, lines without the spaces rich pads them with."""

from __future__ import annotations

import io

from posexp.commands.console import TrimmedLines, stdout_console


def test_each_line_loses_its_trailing_spaces_however_it_is_written():
    out = io.StringIO()
    stream = TrimmedLines(out)
    stream.write("a table   \nrow ")
    stream.write("  one  \n\n   \n")
    assert out.getvalue() == "a table\nrow   one\n\n\n"


def test_a_line_left_open_is_written_as_it_is_on_flush():
    out = io.StringIO()
    stream = TrimmedLines(out)
    stream.write("progress: 3 ")
    stream.flush()
    assert out.getvalue() == "progress: 3 "


def test_piped_a_table_is_printed_without_padding(monkeypatch):
    from rich.table import Table

    out = io.StringIO()  # not a terminal
    monkeypatch.setattr("sys.stdout", out)
    console = stdout_console(width=60)
    table = Table("name", "value")
    table.add_row("a", "1")
    table.add_row("a much longer name", "22")
    console.print(table)
    console.print("a line that wraps " * 6)
    lines = out.getvalue().splitlines()
    assert console.width == 60 and "a much longer name" in out.getvalue() and len(lines) > 6
    assert [line for line in lines if line.endswith(" ")] == []
