"""One writer per run dir: an exclusive ``flock`` on its ``.owner`` file while a process writes it.

Every command that writes into a run dir (train, a resume, finetune, eval-extrapolate, report)
holds the lock for as long as it writes; a second writer is refused in one line naming the
holder (``pid@host``, which the holder writes into the file). The kernel drops the lock when its
process ends, however it ends (SIGKILL included), so a dead run never blocks the next one.
Read-only commands (``posexp runs``, ``generate``) never take it; evaluations share it
(``share``): several may run at once, none while the run trains.
"""

from __future__ import annotations

import os
import platform
import threading
from pathlib import Path

from posexp.errors import PosexpError
from posexp.store.files import check_writable

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock: run dirs go unlocked there
    fcntl = None  # type: ignore[assignment]

OWNER = ".owner"

# This process's locks, by resolved dir: [descriptor, depth]. A command that writes a run dir
# twice (report, then the evaluation it runs) re-enters its own lock instead of being refused.
_held: dict[Path, list[int]] = {}
_mutex = threading.Lock()


def me() -> str:
    """This process as the lock file names it: ``pid@host``."""
    return f"{os.getpid()}@{platform.node()}"


def label(what: str, path: Path | str) -> str:
    """``resume='x'`` for a key ending in ``=``, else ``run dir 'x'``."""
    return f"{what}{str(path)!r}" if what.endswith("=") else f"{what} {str(path)!r}"


def busy_message(path: Path | str, who: str, what: str = "run dir") -> str:
    """The one line a second writer gets."""
    return (
        f"{label(what, path)} is being written by another posexp process ({who}); "
        f"wait for it to end (or stop it), then retry"
    )


def claim(run_dir: Path) -> bool:
    """Take a fresh dir: create its ``.owner`` exclusively and lock it; False if it has one.

    Exclusive creation decides between runs started together (atomic on every file system);
    a dir keeps its ``.owner`` after its run ends, so a later fresh run never reuses it.
    """
    try:
        fd = os.open(Path(run_dir) / OWNER, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    except FileExistsError:
        return False
    if not _try_flock(fd):  # someone locked the new file already (a resume of a half-made dir)
        os.close(fd)
        return False
    _own(run_dir, fd)
    return True


def lock(run_dir: Path, what: str = "run dir") -> None:
    """Hold ``run_dir``'s lock (again, if this process holds it); one line if another process does."""
    key = Path(run_dir).resolve()
    with _mutex:
        if key in _held:
            _held[key][1] += 1
            return
    for _ in range(3):
        try:
            fd = os.open(key / OWNER, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as e:
            check_writable(run_dir, what.rstrip("="))  # read-only: the usual one line
            raise PosexpError(f"{label(what, run_dir)} cannot be written: {e.strerror}") from None
        if not _try_flock(fd):
            who = _read(fd) or "another process"
            os.close(fd)
            raise PosexpError(busy_message(run_dir, who, what))
        if _same_file(fd, key / OWNER):
            _own(key, fd)
            return
        os.close(fd)  # the last holder removed the dir meanwhile (a failed run): look again
    raise PosexpError(f"{label(what, run_dir)} keeps being removed by another process; retry")


def share(run_dir: Path, what: str = "run dir") -> None:
    """Hold ``run_dir``'s lock shared: readers that write only their own files (evaluations, which
    merge under their own lock) run side by side, and keep out a writer of the whole dir (a
    training run); one line if such a writer holds it. Re-entrant like ``lock``."""
    key = Path(run_dir).resolve()
    with _mutex:
        if key in _held:
            _held[key][1] += 1
            return
    try:
        fd = os.open(key / OWNER, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as e:
        check_writable(run_dir, what.rstrip("="))
        raise PosexpError(f"{label(what, run_dir)} cannot be written: {e.strerror}") from None
    if not _try_flock(fd, shared=True):
        who = _read(fd) or "another process"
        os.close(fd)
        raise PosexpError(busy_message(run_dir, who, what))
    _own(key, fd)  # a refused trainer names one of the evaluations


def unlock(run_dir: Path) -> None:
    """Give back one ``lock`` (or the ``claim``); the last one releases the dir."""
    key = Path(run_dir).resolve()
    with _mutex:
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _held[key]
    os.close(entry[0])  # closing the only descriptor drops the flock


def holder(run_dir: Path) -> str | None:
    """``pid@host`` of another process writing ``run_dir`` now; None if no other process is."""
    key = Path(run_dir).resolve()
    with _mutex:
        if key in _held:
            return None
    try:
        fd = os.open(key / OWNER, os.O_RDONLY)
    except OSError:
        return None
    try:
        return None if _try_flock(fd, shared=True) else _read(fd) or "another process"
    finally:
        os.close(fd)  # also drops the shared lock just taken


def _own(run_dir: Path, fd: int) -> None:
    """Register the lock and write this process into the file, for a refused writer to name."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{me()}\n".encode(), 0)
    with _mutex:
        _held[Path(run_dir).resolve()] = [fd, 1]


def _try_flock(fd: int, shared: bool = False) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False
