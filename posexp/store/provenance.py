"""Where a run's results came from: code version, libraries, machine, command, times.

``<run>/provenance.json`` holds one entry per session that trained in the run dir (the first
run and every resume), so a resumed run says what each part of it ran with.
"""

from __future__ import annotations

import logging
import os
import platform
import shlex
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from posexp.errors import UnreadableFile
from posexp.store.files import keep_damaged, read_json, write_json_atomic

log = logging.getLogger("posexp")

FILE = "provenance.json"
# Set by the CLI; inherited by sweep workers and torchrun's processes, whose own argv differ.
COMMAND_ENV = "POSEXP_COMMAND"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_commit() -> str | None:
    """The commit of posexp's source tree (``+dirty`` with local changes), None outside git."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        commit, dirty = (
            git("rev-parse", "HEAD"),
            git("status", "--porcelain", "--untracked-files=no"),
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+dirty" if dirty else commit


def command() -> list[str]:
    """The command line as the user typed it (the CLI records it before Hydra rewrites argv)."""
    typed = os.environ.get(COMMAND_ENV)
    if typed:
        return shlex.split(typed)
    return [Path(sys.argv[0]).name, *sys.argv[1:]]


def session() -> dict[str, Any]:
    """This process: versions, machine, command line, start time."""
    import torch

    from posexp import __version__

    return {
        "started": _now(),
        "ended": None,
        "status": "running",
        "command": command(),
        "posexp": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "scheduler": scheduler(),
    }


# Which job of which scheduler ran this session: a requeued Slurm job keeps its id and counts
# its restarts, so the sessions of one job dir can be matched to `sacct` records.
SLURM_FACTS = {
    "job_id": "SLURM_JOB_ID",
    "array_job_id": "SLURM_ARRAY_JOB_ID",
    "array_task_id": "SLURM_ARRAY_TASK_ID",
    "restart_count": "SLURM_RESTART_COUNT",
    "partition": "SLURM_JOB_PARTITION",
    "node": "SLURMD_NODENAME",
}


def scheduler() -> dict[str, str] | None:
    """The Slurm job this process runs in (ids, restart count, partition, node), or None."""
    facts = {key: os.environ[var] for key, var in SLURM_FACTS.items() if var in os.environ}
    if "job_id" not in facts:
        return None
    return {"name": "slurm", "restart_count": "0", **facts}  # Slurm sets it from the 1st requeue


def provenance_shape(data: Any) -> str | None:
    """What is wrong with a loaded ``provenance.json`` (None: nothing): a list of sessions."""
    if not isinstance(data, dict) or not isinstance(data.get("sessions"), list):
        return "expected a JSON object with a list of sessions"
    bad = [i for i, s in enumerate(data["sessions"]) if not isinstance(s, dict)]
    return f"session {bad[0] + 1} is not a JSON object" if bad else None


def sessions(run_dir: Path) -> list[dict[str, Any]]:
    """The recorded sessions of ``run_dir`` ([] without a record); ``UnreadableFile`` if damaged."""
    data = read_json(Path(run_dir) / FILE, provenance_shape)
    return data["sessions"] if data else []


def _read(run_dir: Path) -> dict[str, Any]:
    """The record to add to: a damaged one is kept as ``provenance.json.bak`` and said so, once,
    and the history starts again from this session (never silently replaced)."""
    try:
        return {"sessions": sessions(run_dir)}
    except UnreadableFile as e:
        backup = keep_damaged(Path(run_dir) / FILE)
        log.warning("%s: its sessions are kept in %s; a new record starts here", e, backup)
        return {"sessions": []}


# The run dirs whose session this process opened: only those may be stamped as it ends.
_opened: set[Path] = set()


# An earlier session still "running" when a new one starts in its (locked) dir ended without
# recording how: SIGKILL after a time limit, the OOM killer, a lost node.
DIED = "died"


def start(run_dir: Path, **facts: Any) -> None:
    """Append this session to ``provenance.json``, with run facts only known now (precision).

    The caller owns the run dir, so no earlier session can still be running: one recorded as
    running died without a word, and is marked so."""
    data = _read(run_dir)
    for earlier in data["sessions"]:
        if isinstance(earlier, dict) and earlier.get("status") == "running":
            earlier["status"] = DIED
    data["sessions"].append({**session(), **facts})
    write_json_atomic(run_dir / FILE, data)
    _opened.add(Path(run_dir).resolve())


def opened_here(run_dir: Path) -> bool:
    """True when this process started a session in ``run_dir`` (so training has begun there)."""
    return Path(run_dir).resolve() in _opened


def finish(run_dir: Path, status: str) -> None:
    """Stamp the latest session's end time and outcome."""
    data = _read(run_dir)
    if data["sessions"]:
        data["sessions"][-1].update(ended=_now(), status=status)
        write_json_atomic(run_dir / FILE, data)
