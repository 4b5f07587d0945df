"""The Python standard library's own sources as a code corpus: one module (``.py`` file) a document.

Code is a long-range corpus: a name is imported or defined near a module's top and used hundreds
of lines later, so a model that reads far back should predict it better.

Source: the ``.py`` files of the running interpreter's standard library
(``sysconfig.get_paths()["stdlib"]``), or of the folder ``root`` names. Licence: the Python
Software Foundation License. The files ship with the user's own Python and are read where they
are; posexp redistributes none of them.

Which files (the rule, applied to each path relative to the root): every ``*.py`` file, walked in
sorted order, except those below a directory named ``test``, ``tests`` or ``idle_test`` (CPython's
test suites: ``test/``, ``idlelib/idle_test``, ``lib2to3/tests``, ``unittest/test``,
``ctypes/test``, ``tkinter/test``, ``distutils/tests``), ``site-packages`` or ``dist-packages``
(third-party packages installed into this Python), ``pydoc_data`` (generated help text, not
code), ``__pycache__``, or a hidden directory (a name starting with a dot). A file that is not
UTF-8, holds only whitespace, or has fewer than ``min_chars`` characters is left out.

A document is the file's whole text as Python reads it (``Path.read_text``, UTF-8), kept whole: no
splitting, stripping or cleaning.

Split rule (fixed, no module in two splits): h = the first 8 bytes of BLAKE2b of the file's path
relative to the root (POSIX separators, UTF-8), read as a little-endian integer; the file goes to
val if h % 10 == 8, to test if h % 10 == 9, else to train. The path, not the content, decides, so
a module stays in its split across Python versions that change its text. Within each split,
documents are in the sorted order of their relative paths.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path
from typing import Any

from posexp import checks
from posexp.data.registry import SPLITS, Corpus, register_dataset
from posexp.errors import PosexpError

EXCLUDED_DIRS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "pydoc_data", "__pycache__"}
)
PERIOD = 10


def stdlib_root() -> Path:
    """The running interpreter's standard library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def excluded(relative: str) -> bool:
    """Whether the file at POSIX path ``relative`` (to the root) falls under the exclusion rule."""
    parts = relative.split("/")
    return not parts[-1].endswith(".py") or any(
        d in EXCLUDED_DIRS or d.startswith(".") for d in parts[:-1]
    )


def module_files(root: Path) -> list[str]:
    """POSIX paths, relative to ``root``, of the ``.py`` files the rule keeps, sorted."""
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        # Pruned in place, so os.walk never enters an excluded tree (site-packages is large).
        dirs[:] = sorted(d for d in dirs if d not in EXCLUDED_DIRS and not d.startswith("."))
        base = Path(folder).relative_to(root).as_posix()
        for name in files:
            relative = name if base == "." else f"{base}/{name}"
            if not excluded(relative):
                found.append(relative)
    return sorted(found)


def split_of(relative: str) -> str:
    """The split of the module at POSIX path ``relative`` (the hash rule in the module docstring)."""
    h = int.from_bytes(hashlib.blake2b(relative.encode("utf-8"), digest_size=8).digest(), "little")
    r = h % PERIOD
    return "val" if r == PERIOD - 2 else "test" if r == PERIOD - 1 else "train"


def read_module(path: Path) -> str | None:
    """A source file's text, or None when it is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def resolve_root(root: str | None) -> Path:
    """The folder ``data.root`` names (the running Python's standard library when null), checked."""
    if root is None:
        return stdlib_root()
    path = checks.user_path("data.root", root).expanduser()
    if not path.is_dir():
        raise PosexpError(
            f"data.root {root!r} is not a folder; give a Python standard library folder "
            f"(null: this Python's, {stdlib_root()})"
        )
    return path


def check_pystdlib(params: dict[str, Any], seq_len: int | None) -> None:
    """The settings of data=pystdlib a signature cannot check (where the config is built)."""
    checks.integer("data.min_chars", params.get("min_chars", 1), low=1)
    checks.path("data.root", params.get("root"))


def check_pystdlib_inputs(params: dict[str, Any]) -> None:
    """The folder data=pystdlib reads exists."""
    resolve_root(params.get("root"))


@register_dataset("pystdlib", kind="lm", check=check_pystdlib, check_inputs=check_pystdlib_inputs)
def load_pystdlib(root: str | None = None, min_chars: int = 1) -> Corpus:
    """The standard library's modules, one document each, split by the hash of their paths."""
    checks.integer("data.min_chars", min_chars, low=1)
    folder = resolve_root(root)
    splits: dict[str, list[str]] = {s: [] for s in SPLITS}
    for relative in module_files(folder):
        text = read_module(folder / relative)
        if text is None or not text.strip() or len(text) < min_chars:
            continue
        splits[split_of(relative)].append(text)
    empty = [s for s in SPLITS if not splits[s]]
    if empty:
        raise PosexpError(
            f"data=pystdlib found no module for the {'/'.join(empty)} split in {str(folder)!r} "
            f"(data.min_chars={min_chars}); allowed: a standard library folder with more "
            "modules, or a smaller data.min_chars"
        )
    return Corpus(splits=splits, kind="lm")
