"""ReportContext: a figure drawn from the same inputs as the last report's is not drawn again."""

from __future__ import annotations

from posexp.commands.report.view import ReportContext


def test_a_second_report_skips_a_figure_whose_inputs_did_not_change(tmp_path):
    first = ReportContext(tmp_path, [], [])
    assert first.drawn_already("grid.png", "cells v1") is None  # never drawn: draw it
    (tmp_path / "grid.png").write_bytes(b"png")
    (tmp_path / "grid.svg").write_bytes(b"svg")
    first.save_drawn()
    again = ReportContext(tmp_path, [], [])
    assert again.drawn_already("grid.png", "cells v1") == tmp_path / "grid.png"
    assert again.files == [tmp_path / "grid.png"]  # still listed among the report's files
    changed = ReportContext(tmp_path, [], [])
    assert changed.drawn_already("grid.png", "cells v2") is None  # new numbers: redraw
    (tmp_path / "grid.svg").unlink()
    gone = ReportContext(tmp_path, [], [])
    assert gone.drawn_already("grid.png", "cells v1") is None  # its vector copy is gone
