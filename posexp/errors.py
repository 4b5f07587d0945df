"""User-facing errors: one line, non-zero exit, no traceback."""


def first_line(e: BaseException) -> str:
    """An exception's first line of text, or its type when it has none (a zero-byte file)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class PosexpError(Exception):
    """An error caused by the user's input; the CLI prints its message as one line and exits 2."""


def choose(kind: str, value: object, allowed: "list[str] | tuple[str, ...] | dict") -> None:
    """Raise PosexpError unless `value` is one of `allowed`, naming both."""
    if value not in allowed:
        raise PosexpError(
            f"unknown {kind} {value!r}; allowed: {', '.join(sorted(map(str, allowed)))}"
        )


class Abort(BaseException):  # noqa: N818  (not an Exception on purpose)
    """A user error leaving a single run: BaseException so Hydra's job runner does not wrap it."""


class JobFailed(Exception):  # noqa: N818  (an outcome, handed back as the job's result)
    """A sweep job that failed and recorded why in its results.json. Its task returns the record
    instead of raising, so Hydra runs the sweep's end (the summary naming every failed job)
    rather than stopping at the first failure with its own line."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.results = {"status": "failed", "error": error}


class UnreadableFile(PosexpError):
    """A file posexp wrote that cannot be read back (cut short, damaged, of the wrong shape)."""

    def __init__(self, path: "object", reason: str) -> None:
        super().__init__(f"{str(path)!r} is unreadable ({reason})")
        self.path, self.reason = path, reason
