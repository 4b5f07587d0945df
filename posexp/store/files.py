"""Every file posexp writes goes through here: a temporary file, then a rename.

Readers (TensorBoard, `posexp report`, a rerun sweep) never see half a file, and a run killed
at any moment leaves either the old file or the new one.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("posexp")


# The renames ``staged_files`` holds back, by the folder it stages: (temporary file, final path).
_staged: dict[Path, list[tuple[str, Path]]] = {}


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file through a temporary file and a rename, so readers never see half of it
    (inside ``staged_files`` of its folder, the rename waits for the block's end). A write the
    device refuses (no space) names the file it was for."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as e:
            if e.filename is None:  # a short write knows no path: say where space ran out
                raise OSError(e.errno, e.strerror, str(path)) from e
            raise
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file gets the usual mode
        pending = _staged.get(path.parent.absolute())
        if pending is not None:
            pending.append((tmp, path))
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def staged_files(folder: Path) -> Iterator[None]:
    """The files written atomically into ``folder`` inside the block appear together at its
    end (renames need no space); a block that fails (a full disk) leaves the old files, none of
    the new, and no temporary file."""
    key = Path(folder).absolute()
    pending: list[tuple[str, Path]] = []
    _staged[key] = pending
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        del _staged[key]
    for tmp, path in pending:
        os.replace(tmp, path)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def check_writable(path: Path | str, what: str) -> None:
    """Refuse, in one line, a destination that cannot be written: empty, not UTF-8, a file in
    the way, a read-only folder or mount, or a place the OS refuses (``/proc``).

    ``path`` need not exist yet: a file is made and removed in its nearest existing ancestor
    (permission bits alone do not say it: root passes them, a read-only mount does not), so
    nothing is left behind whatever the answer.
    """
    from posexp.checks import user_path
    from posexp.errors import PosexpError

    target = user_path(what, path).absolute()
    existing = target
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise PosexpError(f"{what} {str(path)!r} cannot be created: {str(existing)!r} is a file")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".posexp-write-check.")
    except OSError as e:
        reason = (
            "is read-only"
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
            else (f"refuses new files ({e.strerror})")
        )
        raise PosexpError(
            f"{what} {str(path)!r} is not writable: {str(existing)!r} {reason} "
            f"(choose another folder)"
        ) from None
    os.close(fd)
    os.unlink(probe)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing), waiting for its holder."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on Windows: unlocked there
        yield
        return
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor drops the lock


@contextlib.contextmanager
def cache_lock(entry: Path) -> Iterator[None]:
    """Hold ``<entry>.lock`` while a cache entry is looked for again and made: jobs that miss it
    together (packed on one GPU, a sweep's processes, a Slurm array on one cache) make it once;
    the others wait, then read it. Once the entry is there the lock file goes: a job that
    misses the entry looks again under the lock, so one still waiting on it finds the entry."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = entry.with_name(entry.name + ".lock")
    with exclusive_lock(lock):
        try:
            yield
        finally:
            if entry.exists():
                lock.unlink(missing_ok=True)


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Write a set of files into a fresh ``<final>.tmp`` folder, then swap it in as ``final``.

    Readers see the old set or the new one, never a mix: a kill before the swap leaves the old
    folder (and a stale ``.tmp`` that the next call removes); a kill inside the swap leaves
    ``<final>.old``, which ``recover_staged`` puts back before anything else is touched, so a
    whole set stays on disk at every instant (in ``final`` or, mid-swap, in ``<final>.old``).
    """
    final = Path(final)
    tmp, old = final.with_name(final.name + ".tmp"), final.with_name(final.name + ".old")
    recover_staged(final)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        # On disk before the swap: after a power cut the new folder is whole or not there.
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed write (a full disk) leaves no debris
        raise
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def recover_staged(final: Path) -> None:
    """After a kill inside ``staged_dir``'s swap: the previous folder back in place, no leftovers."""
    final = Path(final)
    tmp, old = final.with_name(final.name + ".tmp"), final.with_name(final.name + ".old")
    if old.exists():
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, final)
    shutil.rmtree(tmp, ignore_errors=True)


def staged_current(final: Path) -> Path:
    """Where a reader finds a staged folder's files: ``final``, or ``<final>.old`` while a swap
    is cut between its two renames (read-only: the next writer's ``recover_staged`` mends it)."""
    final = Path(final)
    old = final.with_name(final.name + ".old")
    return old if not final.exists() and old.is_dir() else final


# What torch's and safetensors' writers say when a write comes up short: they wrap the OS
# error in their own exception types, so its text is all there is to go by.
WRITE_FAILURES = (
    "unexpected pos",
    "file write failed",
    "failed writing file",
    "No space left on device",
    "os error 28",
    "Disk quota exceeded",
)


def disk_full(e: BaseException) -> bool:
    """True when ``e`` is a write that failed for want of space (or quota) on the device."""
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(e, Exception) and any(m in str(e) for m in WRITE_FAILURES)


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically."""
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON atomically."""
    write_bytes_atomic(path, json.dumps(data, indent=2, default=str).encode())


def write_csv_atomic(
    path: Path, rows: list[dict[str, Any]], fields: Sequence[str] | None = None
) -> None:
    """CSV with a header, written atomically; None becomes an empty cell."""
    fields = list(fields or (list(rows[0]) if rows else []))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
    write_text_atomic(path, buf.getvalue())


def figure_png(fig: Any, fmt: str = "png", close: bool = True) -> bytes:
    """Render a matplotlib figure (PNG at 160 dpi, or ``fmt``: svg, pdf), then close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=160)
    if close:
        plt.close(fig)
    return buf.getvalue()


def save_figure_atomic(fig: Any, path: Path) -> bytes:
    """Save a figure as PNG plus a vector SVG beside it, atomically (and close it); PNG bytes."""
    write_bytes_atomic(path.with_suffix(".svg"), figure_png(fig, "svg", close=False))
    png = figure_png(fig)
    write_bytes_atomic(path, png)
    return png


# ---- reading back what posexp wrote ---------------------------------------------------------


def read_json(path: Path, shape: Any = None) -> Any:
    """A JSON file posexp wrote, parsed; None when there is none. Cut short, empty, not UTF-8,
    not JSON, or failing ``shape`` (a function naming what is wrong, None when nothing is) is
    ``UnreadableFile``: one line naming the file, never taken for "no file"."""
    from posexp.errors import UnreadableFile

    path = Path(path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise UnreadableFile(path, "a folder is in its place") from None
    except OSError as e:
        raise UnreadableFile(path, e.strerror or type(e).__name__) from None
    except UnicodeDecodeError as e:
        raise UnreadableFile(path, f"not UTF-8 at byte {e.start}") from None
    except ValueError as e:
        reason = "empty" if not path.stat().st_size else f"not JSON: {e}"
        raise UnreadableFile(path, reason) from None
    problem = shape(data) if shape is not None else None
    if problem:
        raise UnreadableFile(path, problem)
    return data


def keep_damaged(path: Path) -> Path | None:
    """Before a damaged file is replaced: its bytes copied to ``<path>.bak`` (``.bak.2``, ...
    when one exists), so nothing a user may want to recover is overwritten; the backup's path,
    None when there was no file."""
    path = Path(path)
    if not path.exists():
        return None
    for n in range(1, 1000):
        backup = path.with_name(path.name + (".bak" if n == 1 else f".bak.{n}"))
        if not backup.exists():
            write_bytes_atomic(backup, path.read_bytes())
            return backup
    raise FileExistsError(f"{path}.bak: 999 backups already")


def mapping_shape(required: Sequence[str] = ()) -> Any:
    """A ``read_json`` shape: a JSON object holding ``required`` keys."""

    def check(data: Any) -> str | None:
        if not isinstance(data, dict):
            return f"expected a JSON object, found {type(data).__name__}"
        missing = [k for k in required if k not in data]
        return f"no {missing[0]!r}" if missing else None

    return check


def set_aside(path: Path, problem: str) -> None:
    """A damaged cache file renamed to ``<path>.bak`` (replacing an older one), said once: the
    caller makes it again. Cache files are written atomically, so only something outside
    posexp (a full disk's copy, an edit, a bad sector) leaves one damaged."""
    log.warning(
        "cache file %s is damaged (%s): kept as %s.bak, made again", path, problem, path.name
    )
    os.replace(path, path.with_name(path.name + ".bak"))
