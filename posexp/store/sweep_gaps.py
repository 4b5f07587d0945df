"""What a folder of runs is missing, in lines to say: links to runs that lead nowhere, and the
jobs of a sweep that have no dir (deleted by hand, or not started yet).

A listing built from the dirs that are there cannot see the ones that are not: a sweep of four
jobs with one deleted read "3 runs: 3 completed". Hydra's ``multirun.yaml`` says what the
sweep was launched with, so the number of its jobs is known; a dangling link is found where
the walk meets it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

SWEEP_RECORD = "multirun.yaml"


def dangling_links(root: Path) -> list[Path]:
    """Every symlink below ``root`` whose target does not exist, by path."""
    found = []
    for here, dirs, files in os.walk(root):  # links are not followed: each is met once
        for name in [*dirs, *files]:
            path = Path(here) / name
            if path.is_symlink() and not path.exists():
                found.append(path)
    return sorted(found)


def sweep_size(root: Path) -> int | None:
    """The number of jobs the sweep at ``root`` was launched with (its overrides' values
    multiplied, with the sweeper's own params), or None where that cannot be told."""
    import yaml
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        hydra = yaml.safe_load((root / SWEEP_RECORD).read_text())["hydra"]
        overrides = list(hydra["overrides"]["task"])
        params = (hydra.get("sweeper") or {}).get("params") or {}
        overrides += [f"{k}={v}" for k, v in params.items()]
        parsed = OverridesParser.create().parse_overrides([str(o) for o in overrides])
    except Exception:  # noqa: BLE001  no record, or one Hydra's grammar refuses: unknown
        return None
    sizes: list[int] = []
    for override in parsed:
        if not override.is_sweep_override():
            continue
        try:
            sizes.append(len(list(override.sweep_string_iterator())))
        except Exception:  # noqa: BLE001  an interval (an optimiser's), not a grid
            return None
    return math.prod(sizes)


def gaps(root: Path | str) -> list[str]:
    """The lines that say what the folder ``root`` (a sweep, a study folder, ``outputs``) is
    missing: its dangling links, and each sweep in it with fewer run dirs than jobs; none for a
    whole one."""
    from posexp.errors import PosexpError
    from posexp.store.rundir import find_runs

    root = Path(root)
    if not root.is_dir():
        return []
    lines = [
        f"{link}: a link to {os.readlink(link)!r}, which does not exist: not listed"
        for link in dangling_links(root)
    ]
    for here, dirs, files in os.walk(root):
        dirs.sort()
        if SWEEP_RECORD not in files or (size := sweep_size(Path(here))) is None:
            continue
        try:
            found = len(find_runs(here))
        except PosexpError:  # no run dir at all
            found = 0
        if found < size:
            lines.append(
                f"{here}: {size - found} of the sweep's {size} jobs have no run dir (deleted, "
                f"or not started yet): not listed"
            )
    return lines


def said(lines: list[str], out: Any = None) -> None:
    """Print ``lines`` on stderr (or ``out``), one each."""
    import sys

    for line in lines:
        print(line, file=out or sys.stderr, flush=True)
