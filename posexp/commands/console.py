"""The console the commands print their tables and lines on (rich).

On a terminal it is rich's own. Piped or logged, rich pads every line of a table to the table's
width, and breaks a wrapped line after a space, so each line would end in spaces that a file, a
diff or ``grep ' $'`` sees; there the console writes each line without them.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


class TrimmedLines:
    """A text stream that writes each line to ``out`` without its trailing spaces."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.partial = ""  # the text after the last newline, trimmed once its line ends

    @property
    def encoding(self) -> str:
        """The encoding of the stream it writes to (rich chooses its characters by it)."""
        return getattr(self.out, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        """False: it stands for a stream that is not a terminal."""
        return False

    def write(self, text: str) -> int:
        """Write the lines ``text`` ends, trimmed; keep the line it leaves open."""
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            self.out.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        """Write an open line as it is (a print without a newline ends there) and flush."""
        if self.partial:
            self.out.write(self.partial)
            self.partial = ""
        self.out.flush()


def stdout_console(width: int | None = None) -> Any:
    """A rich Console on stdout: the terminal's own; piped, one of ``width`` columns (rich's
    width by default) whose lines end at their last character."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        return console
    return Console(file=TrimmedLines(sys.stdout), width=width or console.width)
