"""Atomic writes: readers see a whole old file or a whole new one, and one evaluation's set together."""

from __future__ import annotations

import os

import pytest

from posexp.errors import PosexpError
from posexp.store.files import check_writable, recover_staged, staged_dir, write_bytes_atomic


def test_atomic_write_leaves_no_temp_file_even_when_it_fails(tmp_path, monkeypatch):
    path = tmp_path / "a.json"
    write_bytes_atomic(path, b"old")
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_bytes() == b"old" and os.stat(path).st_mode & 0o777 == 0o666 & ~mask

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_bytes_atomic(path, b"new")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_staged_dir_swaps_a_whole_set_in(tmp_path):
    final = tmp_path / "eval"
    with staged_dir(final) as out:
        (out / "a.json").write_text("1")
        (out / "a.csv").write_text("1")
    with staged_dir(final) as out:
        (out / "a.json").write_text("2")
        assert (final / "a.json").read_text() == "1"  # readers still see the old set
    # The new set replaces the old one entirely: no file from the last evaluation survives.
    assert (
        sorted(p.name for p in final.iterdir()) == ["a.json"]
        and (final / "a.json").read_text() == "2"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]


def test_a_kill_before_or_inside_the_swap_is_recovered(tmp_path):
    final = tmp_path / "eval"
    with pytest.raises(KeyboardInterrupt):  # interrupted while writing the new set
        with staged_dir(final) as out:
            (out / "a.json").write_text("half")
            raise KeyboardInterrupt
    assert not final.exists() and not (tmp_path / "eval.tmp").exists()  # cleaned up on the way out
    (tmp_path / "eval.tmp").mkdir()  # SIGKILL while writing: no cleanup ran, the next call's job
    (tmp_path / "eval.tmp" / "a.json").write_text("half")
    (tmp_path / "eval.old").mkdir()  # killed between the two renames of a later swap
    (tmp_path / "eval.old" / "a.json").write_text("previous")
    recover_staged(final)
    assert (final / "a.json").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]


def test_unwritable_destinations_are_named(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        PosexpError, match=r"^hydra.run.dir '.*file/run' cannot be created: '.*file' is a file$"
    ):
        check_writable(tmp_path / "file" / "run", "hydra.run.dir")
    check_writable(
        tmp_path / "new" / "deeper", "run dir"
    )  # the nearest existing folder is writable
    with pytest.raises(PosexpError, match=r"^run dir '/proc/x' is not writable: '/proc' refuses"):
        check_writable("/proc/x", "run dir")  # the OS refuses new files there, even to root
    assert not list(tmp_path.glob(".posexp-write-check*"))  # the probe leaves nothing behind


def test_staged_files_appear_together_or_not_at_all_and_a_full_disk_names_its_file(
    tmp_path, monkeypatch
):
    # report --no-eval on a nearly full disk left report.csv without report.md, and the
    # message named no path.
    import errno

    from posexp.store import files

    (tmp_path / "report.csv").write_text("old")
    with files.staged_files(tmp_path):
        files.write_text_atomic(tmp_path / "report.csv", "new")
        files.write_text_atomic(tmp_path / "report.md", "new")
        assert (tmp_path / "report.csv").read_text() == "old"  # not before the block's end
        assert not (tmp_path / "report.md").exists()
    assert (tmp_path / "report.csv").read_text() == (tmp_path / "report.md").read_text() == "new"

    real = os.fdopen

    class Full:
        def __init__(self, fd, mode):
            self.f = real(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as full:
        with files.staged_files(tmp_path):
            files.write_text_atomic(tmp_path / "report.csv", "newer")
            monkeypatch.setattr(files.os, "fdopen", Full)
            files.write_text_atomic(tmp_path / "report.md", "newer")
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(tmp_path / "report.md")
    assert files.disk_full(full.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.csv", "report.md"]
    assert (tmp_path / "report.csv").read_text() == "new"  # the old set, whole
