"""Stops of the commands that keep what they finished (eval-extrapolate, report).

Under ``stops_as_interrupt`` SIGTERM (a Slurm time limit, ``kill``) unwinds like Ctrl-C, so
the cells already scored are kept and said. Python runs a signal's handler between any two
bytecodes of the main thread, so its exception can come where it does harm or is lost:

* inside a weakref callback or ``__del__`` (an import takes module locks with one), where
  Python only prints it ("Exception ignored in ...") and goes on. Each stop is remembered,
  so the command acts on it at its next ``raise_if_stopped`` (the loop that waits for worker
  processes), and such a print is left out;
* inside an import or a file write, which it would leave half done (a half-imported
  matplotlib then fails the write of the cells kept at the stop). ``held`` keeps a stop
  back until the end of such a block.

The same signal again within ``ECHO_S`` of the first stop is that one echoed, not a second:
``timeout -s INT`` signals the process and then its group, and the echo, raised while the cells
were being kept, had them all lost.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
ECHO_S = 0.5  # the same signal again this soon after the first is one sender's echo


class Terminated(KeyboardInterrupt):
    """SIGTERM (a Slurm time limit, ``kill``) in a command that keeps what it finished, as Ctrl-C."""

    signum = signal.SIGTERM


_received: list[int] = []  # each stop of the command running
_first: list[tuple[int, float]] = [(0, -ECHO_S)]  # the last command's first stop, and when


def as_stop(signum: int) -> KeyboardInterrupt:
    """The exception a stop signal unwinds with: ``Terminated`` for SIGTERM, else Ctrl-C's."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def echo(signum: int) -> bool:
    """True for the first stop's signal again within ``ECHO_S`` of it."""
    first, when = _first[0]
    return signum == first and time.monotonic() - when < ECHO_S


def stop_on_signal(signum: int, frame: Any) -> None:
    """A SIGTERM or SIGINT handler: remember the stop, then unwind like Ctrl-C (not its echo)."""
    if echo(signum):
        return
    if not _received:
        _first[0] = signum, time.monotonic()
    _received.append(signum)
    raise as_stop(signum)


def stopped() -> KeyboardInterrupt | None:
    """The first stop received under ``stops_as_interrupt``, as its exception; None before one."""
    return as_stop(_received[0]) if _received else None


def raise_if_stopped() -> None:
    """Raise the stop received, if any: its own exception may have been lost (see above)."""
    stop = stopped()
    if stop is not None:
        raise stop


def _quiet_stops(hook: Any) -> Any:
    """``hook`` for what Python cannot raise, less the stops it remembers (acted on later)."""

    def unraisable(info: Any) -> None:
        if not (_received and issubclass(info.exc_type, KeyboardInterrupt)):
            hook(info)

    return unraisable


@contextlib.contextmanager
def stops_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` and SIGINT KeyboardInterrupt inside the block, each stop
    remembered (also usable as a decorator); then as before."""
    _received.clear()
    previous = {sig: signal.signal(sig, stop_on_signal) for sig in STOP_SIGNALS}
    hook = sys.unraisablehook
    sys.unraisablehook = _quiet_stops(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for sig, handler in previous.items():
            # The echo may come late (its sender descheduled), once the command is over.
            late = _received and sig == _received[0] and handler is not None
            signal.signal(sig, _past_echo(handler) if late else handler)
        _received.clear()


def _past_echo(handler: Any) -> Any:
    """A handler that drops the first stop's echo and hands any other signal to ``handler``."""

    def past_echo(signum: int, frame: Any) -> None:
        if not echo(signum):
            signal.signal(signum, handler)
            signal.raise_signal(signum)

    return past_echo


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A stop signal that comes inside the block acts at its end (in the main thread)."""
    came: list[int] = []
    previous: dict[int, Any] = {}

    def hold(signum: int) -> None:
        if not echo(signum):
            came.append(signum)

    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            handler = signal.getsignal(sig)
            if handler is not None and handler != signal.SIG_IGN:  # None: set outside Python
                previous[sig] = signal.signal(sig, lambda signum, frame: hold(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if came:  # to the handler it was meant for, as if it came now
            signal.raise_signal(came[0])
