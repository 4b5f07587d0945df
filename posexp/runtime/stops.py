"""Stop signals, in one place: a training's graceful stop (finish the step, checkpoint, exit) and
the stops of the commands that keep what they finished (eval-extrapolate, report).

A graceful stop on SIGTERM, SIGINT and the time-limit signal: finish the step, checkpoint,
exit; a second signal (or a step that does not end within the grace period) exits at once.

Slurm, Kubernetes and ``kill`` send SIGTERM first (Slurm at a job's time limit, after
``scancel``, on preemption), and submitit asks Slurm for SIGUSR2 shortly before the limit. A
training that dies on them loses every step since its last periodic checkpoint. Inside
``GracefulStop`` the signal only sets a flag; the training loop reads it after each step (under
torchrun at logging steps, where the ranks agree on it), writes a checkpoint at that step and
raises ``StopRequested``. Whoever listened to the signal before (submitit's handler, which
requeues the job; Python's Ctrl-C handler) then gets it; with nobody, the process exits with
128 + the signal number (143 for SIGTERM, 140 for SIGUSR2).

Python runs signal handlers only between bytecodes, so a handler waits for a long torch call
(a step at 100k tokens takes hours on a CPU) to return. The C-level handler still writes each
signal's number to a wakeup fd at once: a watchdog thread reads it there, and on a second
signal, or when the step has not ended ``grace_s`` after the first, it ends the process itself
(``on_force`` says what is kept, then ``os._exit``), whatever the main thread is doing.

The same signal again within ``ECHO_S`` of the first is the first one echoed, not a second
request: ``timeout -s INT`` and some wrappers and schedulers signal the process and then its
process group, so one stop arrives twice microseconds apart (and, counted as two, had a run
without a checkpoint removed). A person pressing Ctrl-C twice on purpose is slower than that.


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
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module: torch only where training needs it
    import torch

# The signals that ask any posexp command to stop: SIGTERM (Slurm at a time limit, ``kill``),
# SIGUSR2 (submitit's warning before the limit) and SIGINT (Ctrl-C).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGUSR2", "SIGINT") if hasattr(signal, name)
)
ECHO_S = 0.5  # the same signal again this soon after the first is one sender's echo


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGUSR2 (a Slurm time limit, ``kill``) in a command that keeps what it
    finished, as Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum


_received: list[int] = []  # each stop of the command running
_first: list[tuple[int, float]] = [(0, -ECHO_S)]  # the last command's first stop, and when


def as_stop(signum: int) -> KeyboardInterrupt:
    """The exception a stop signal unwinds with: Ctrl-C's for SIGINT, else ``Terminated``."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


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


_abandoned: list[
    threading.Event
] = []  # calls a stop left running (``interruptible``): set when done


def still_running() -> bool:
    """True when a call a stop interrupted still runs in its thread: the process must then end
    with ``os._exit`` (a normal exit would tear down torch's threads under it and abort)."""
    return not all(done.is_set() for done in _abandoned)


def interruptible(
    fn: Callable[..., Any], *args: Any, tick: Callable[[], None] | None = None
) -> Any:
    """``fn(*args)``, where a stop can interrupt it: in a thread of its own, the main thread
    waiting in short waits between which Python runs the stop's handler (and ``tick``, which
    can say that the call still runs: a prompt's forward shows no step for minutes).

    A handler runs only between two bytecodes of the main thread, so one long torch call (a
    forward over a million tokens takes minutes) would keep the command deaf to stops until it
    returns. The thread is left to finish on its own (a daemon: it does not hold the process
    back) while the command keeps what it finished. Outside ``stops_as_interrupt``, or off the
    main thread, ``fn`` simply runs here."""
    if threading.current_thread() is not threading.main_thread() or not any(
        signal.getsignal(sig) is stop_on_signal for sig in STOP_SIGNALS
    ):
        return fn(*args)
    torch_module = sys.modules.get("torch")  # grad mode is per thread: carried into the worker
    grad = torch_module.is_grad_enabled() if torch_module is not None else None
    outcome: list[Any] = []
    finished = threading.Event()  # not Thread.is_alive: a join cut by a signal can mark the
    # thread stopped while it still runs

    def run() -> None:
        try:
            if grad is not None:
                torch_module.set_grad_enabled(grad)
            outcome.append((True, fn(*args)))
        except BaseException as e:  # handed to the main thread, which raises it
            outcome.append((False, e))
        finally:
            finished.set()

    try:  # from the start: a stop may come while the thread starts
        threading.Thread(target=run, name="posexp-interruptible", daemon=True).start()
        while not finished.wait(0.1):  # the stop's handler raises here
            if tick is not None:
                tick()
    except BaseException:
        _abandoned.append(finished)
        raise
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


@contextlib.contextmanager
def stops_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGUSR2 raise ``Terminated`` and SIGINT KeyboardInterrupt inside the block,
    each stop remembered (also usable as a decorator); then as before."""
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


# Training: a graceful stop.

log = logging.getLogger("posexp")

# Slurm's KillWait (SIGTERM to SIGKILL) is 30 s by default: a stop that waits longer is killed
# anyway, without a word.
DEFAULT_GRACE_S = 20.0


class StopRequested(BaseException):
    """Raised by the training loop after the checkpoint of the step a stop signal arrived in.

    A BaseException, like KeyboardInterrupt: no ``except Exception`` on the way up may record it
    as a failure."""

    def __init__(self, signum: int, step: int, previous: Any) -> None:
        super().__init__(f"{signal.Signals(signum).name} at step {step}")
        self.signum, self.step, self.previous = signum, step, previous

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process the signal ended."""
        return 128 + self.signum

    def forward(self) -> None:
        """Hand the signal to the handler that was there before (submitit requeues the job
        from it), then exit with ``exit_code`` unless that handler ended the process."""
        if callable(self.previous):
            self.previous(self.signum, None)
        raise SystemExit(self.exit_code)


class GracefulStop:
    """Context manager: stop signals set a flag instead of ending the process; a second one, or
    ``grace_s`` seconds without reaching a step's end, ends it at once through ``on_force``."""

    def __init__(
        self,
        grace_s: float | None = DEFAULT_GRACE_S,
        on_force: Callable[[int, str], None] | None = None,
        exit_now: Callable[[int], Any] = os._exit,
        echo_s: float = ECHO_S,
    ) -> None:
        self.signum: int | None = None
        self.echo_s = echo_s
        self.previous: dict[int, Any] = {}
        self.grace_s, self.on_force, self.exit_now = grace_s, on_force, exit_now
        self.saving = threading.Event()  # a checkpoint is being written: the grace waits for it
        self.started = False  # set by the loop (begin): Ctrl-C before it interrupts at once
        self._socks: tuple[socket.socket, socket.socket] | None = None
        self._old_fd = -1
        self._watchdog: threading.Thread | None = None

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is not threading.main_thread():  # handlers live there only
            return self
        for sig in STOP_SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._socks = (reader, writer)
        self._old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._watchdog = threading.Thread(target=self._watch, name="posexp-stop", daemon=True)
        self._watchdog.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._socks is not None:
            signal.set_wakeup_fd(self._old_fd)
            self._socks[1].close()  # the watchdog's read returns: it ends
            if self._watchdog is not None:
                self._watchdog.join(timeout=5)
            self._socks[0].close()
            self._socks = None
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def begin(self) -> None:
        """The training loop starts: from now on Ctrl-C, too, waits for the step's end."""
        self.started = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # The Python-level handler (main thread, between bytecodes): the watchdog counts and
        # speaks; this only makes sure the flag is up when the loop looks. Ctrl-C before the
        # first step has nothing to wait for: it interrupts at once, as Python's own handler,
        # unless a stop signal came first (then the watchdog ends the process: a second signal).
        if signum == signal.SIGINT and not self.started and self.signum is None:
            raise KeyboardInterrupt
        if self.signum is None:
            self.signum = signum

    @contextlib.contextmanager
    def checkpointing(self) -> Iterator[None]:
        """A checkpoint write: the grace period does not end inside it (a second signal does)."""
        self.saving.set()
        try:
            yield
        finally:
            self.saving.clear()

    def _watch(self) -> None:
        """Read signal numbers from the wakeup fd until the context ends (a thread)."""
        assert self._socks is not None
        reader, first_at, first_signum = self._socks[0], None, None
        while True:
            timeout = None
            if first_at is not None and self.grace_s is not None:
                timeout = (
                    1.0 if self.saving.is_set() else first_at + self.grace_s - time.monotonic()
                )
            reader.settimeout(None if timeout is None else max(timeout, 0.0))
            try:
                data = reader.recv(64)
            except TimeoutError:
                if not self.saving.is_set():
                    assert self.signum is not None and self.grace_s is not None
                    name = signal.Signals(self.signum).name
                    self._force(
                        self.signum, f"{name} {self.grace_s:g} s ago and the step had not ended"
                    )
                    return
                continue
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum not in STOP_SIGNALS:
                    continue
                if first_at is None:
                    first_at, first_signum = time.monotonic(), signum
                    if signum == signal.SIGINT and not self.started:
                        # A KeyboardInterrupt in the main thread (``_handle``). The flag stays
                        # down: raised here first (the main thread busy in native code), it
                        # would make that Ctrl-C wait for a loop that has not begun.
                        continue
                    self.signum = self.signum or signum
                    from posexp.runtime import distributed

                    if distributed.is_main():  # every torchrun rank gets it; one line says so
                        log.warning(
                            "received %s: stopping after this step, with a checkpoint "
                            "(a second signal stops at once)",
                            signal.Signals(signum).name,
                        )
                elif signum == first_signum and time.monotonic() - first_at < self.echo_s:
                    continue  # the first signal again, from the same sender (ECHO_S)
                else:
                    self._force(signum, f"a second stop signal, {signal.Signals(signum).name}")
                    return

    def _force(self, signum: int, why: str) -> None:
        """End the process now: hand the first signal on (submitit requeues the job from it),
        let ``on_force`` record what is kept, exit with 128 + ``signum``."""
        try:
            first = self.signum or signum
            previous = self.previous.get(first)
            if callable(previous) and previous is not signal.default_int_handler:
                with contextlib.suppress(BaseException):  # submitit's handler ends in sys.exit
                    previous(first, None)
            if self.on_force is not None:
                self.on_force(signum, why)
        finally:
            for handler in logging.getLogger().handlers + log.handlers:
                with contextlib.suppress(Exception):
                    handler.flush()
            self.exit_now(128 + signum)

    def requested(self, device: torch.device) -> int | None:
        """The stop signal, if one arrived on any rank (a collective under torchrun, so every
        rank stops after the same step)."""
        from posexp.runtime import distributed

        return distributed.global_max(self.signum or 0, device) or None

    def stop(self, signum: int, step: int) -> StopRequested:
        """The exception to raise for ``signum`` at ``step``."""
        return StopRequested(signum, step, self.previous.get(signum))
