"""A run dir's lifecycle: claimed by one process (the CLI paths are in test_train_cli.py)."""

from __future__ import annotations

import logging

from posexp.runtime.lifecycle import claim_run_dir


def test_a_run_dir_taken_in_the_same_second_moves_the_run_and_its_log(tmp_path):
    shared = tmp_path / "2026-11-30_07-00-00_kjv_rope_h4"
    (shared / ".hydra").mkdir(parents=True)
    (shared / ".hydra" / "overrides.yaml").write_text("- pe=rope\n")
    assert claim_run_dir(shared) == shared  # the first run keeps Hydra's dir
    handler = logging.FileHandler(shared / "train.log")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        moved = claim_run_dir(shared)  # the second run, same second, same overrides
        assert moved == tmp_path / f"{shared.name}-2"
        assert (moved / ".hydra" / "overrides.yaml").read_text() == "- pe=rope\n"
        logging.getLogger("posexp").warning("a line of the second run")
    finally:
        for h in [h for h in root.handlers if isinstance(h, logging.FileHandler)
                  and str(tmp_path) in h.baseFilename]:
            root.removeHandler(h)
            h.close()
    assert "a line of the second run" in (moved / "train.log").read_text()
    assert "a line of the second run" not in (shared / "train.log").read_text()
