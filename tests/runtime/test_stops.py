"""Stops of eval-extrapolate and report: SIGTERM as Ctrl-C, held back, echoed; and training's
stop watchdog: a second signal, or a step outlasting the grace period, ends the process
even while the main thread is stuck in one call (here a read nobody answers until then)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from posexp.runtime import stops
from posexp.runtime.stops import GracefulStop


@pytest.fixture
def sigint_seen(monkeypatch):
    """The signals this process's own SIGINT handler (the one before a command's) receives."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    yield seen
    signal.signal(signal.SIGINT, previous)


def test_a_stop_inside_held_comes_at_its_end():
    # Cut short, an import or a file write is left half done (a run's cells then lost).
    done = []
    with stops.stops_as_interrupt():
        with pytest.raises(stops.Terminated):
            with stops.held():
                signal.raise_signal(signal.SIGTERM)
                done.append("the rest of the block")
        assert done == ["the rest of the block"]
        assert isinstance(stops.stopped(), stops.Terminated)
    assert stops.stopped() is None


def test_the_first_stops_echo_is_dropped_even_once_the_command_is_over(sigint_seen, monkeypatch):
    # `timeout -s INT` signals the process, then its group: the echo, late, was a second stop
    # (or a KeyboardInterrupt traceback as the interpreter exited).
    with pytest.raises(KeyboardInterrupt):
        with stops.stops_as_interrupt():
            signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGINT)  # the echo, within ECHO_S of the stop
    assert sigint_seen == []
    monkeypatch.setattr(stops, "ECHO_S", 0)  # a later Ctrl-C: handed on as before
    signal.raise_signal(signal.SIGINT)
    assert sigint_seen == [signal.SIGINT]


# Training: the stop watchdog.


@pytest.fixture
def stuck():
    """A read that returns only when ``release`` is called: a step that never ends by itself."""
    r, w = os.pipe()
    yield (lambda: os.read(r, 1)), (lambda: os.write(w, b"x"))
    os.close(r)
    os.close(w)


def test_a_first_signal_only_asks_and_the_loop_stops_after_its_step(stuck):
    wait, release = stuck
    exits = []
    with GracefulStop(grace_s=None, exit_now=exits.append) as stop:
        stop.begin()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signum == signal.SIGTERM  # the flag the loop reads after the step
    assert exits == []  # the process goes on to checkpoint; nothing ended it


def test_a_second_signal_ends_a_step_that_never_returns(stuck):
    wait, release = stuck
    exits, forced = [], []

    def exit_now(code):
        exits.append(code)
        release()  # stands for the end of the process

    with GracefulStop(None, lambda s, why: forced.append((s, why)), exit_now) as stop:
        stop.begin()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        wait()
    assert exits == [128 + signal.SIGINT]
    assert forced == [(signal.SIGINT, "a second stop signal, SIGINT")]


def test_one_signal_sent_to_the_process_and_its_group_counts_once():
    # `timeout -s INT` signals the child, then its process group: two SIGINTs microseconds apart.
    exits, forced = [], []
    with GracefulStop(None, lambda s, why: forced.append(why), exits.append) as stop:
        stop.begin()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    # Leaving the context closes the wakeup fd: the watchdog has read both signals by then.
    assert (exits, forced, stop.signum) == ([], [], signal.SIGINT)


def test_the_same_signal_after_the_echo_window_is_a_second_request(stuck):
    wait, release = stuck
    exits, forced = [], []

    def exit_now(code):
        exits.append(code)
        release()

    with GracefulStop(None, lambda s, why: forced.append(why), exit_now, echo_s=0.0) as stop:
        stop.begin()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        wait()
    assert (exits, forced) == ([128 + signal.SIGINT], ["a second stop signal, SIGINT"])


def test_a_step_outlasting_the_grace_period_is_ended_with_the_first_signal(stuck):
    wait, release = stuck
    exits, forced = [], []

    def exit_now(code):
        exits.append(code)
        release()

    with GracefulStop(0.05, lambda s, why: forced.append(why), exit_now) as stop:
        stop.begin()
        os.kill(os.getpid(), signal.SIGTERM)
        wait()
    assert exits == [128 + signal.SIGTERM]
    assert forced == ["SIGTERM 0.05 s ago and the step had not ended"]


def test_the_handler_there_before_gets_the_signal_when_the_stop_is_forced(stuck):
    # submitit's time-limit handler requeues the job from it: a forced stop must not skip it.
    wait, release = stuck
    handed = []
    previous = signal.signal(signal.SIGUSR2, lambda s, f: handed.append(s))
    try:
        with GracefulStop(0.05, exit_now=lambda code: release()) as stop:
            stop.begin()
            os.kill(os.getpid(), signal.SIGUSR2)
            wait()
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert handed == [signal.SIGUSR2]


def test_ctrl_c_before_the_loop_interrupts_at_once():
    with pytest.raises(KeyboardInterrupt), GracefulStop(grace_s=None):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10**6):  # bytecodes: the handler runs between two of them
            pass


def test_ctrl_c_after_a_stop_signal_before_the_loop_is_a_second_signal(stuck):
    # SIGTERM while the run is being set up, then Ctrl-C before the first step: the second
    # signal ends the process through the watchdog, not as a KeyboardInterrupt (the message
    # would otherwise depend on whether the loop had begun by then).
    wait, release = stuck
    exits, forced = [], []

    def exit_now(code):
        exits.append(code)
        release()

    try:
        with GracefulStop(None, lambda s, why: forced.append(why), exit_now):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10**6):  # bytecodes: the handler runs between two of them
                pass
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):
                pass
            wait()
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C after SIGTERM interrupted as a first Ctrl-C does")
    assert exits == [128 + signal.SIGINT]
    assert forced == ["a second stop signal, SIGINT"]


def test_handlers_and_the_wakeup_fd_are_given_back():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)}
    with GracefulStop():
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before
    assert signal.set_wakeup_fd(-1) == -1  # none left set


# Commands: a long call the stop can interrupt.


def test_a_stop_interrupts_a_call_that_never_returns_by_itself(stuck):
    # One long torch call (a forward over a million tokens) kept eval-extrapolate deaf to
    # SIGTERM for minutes: the call runs off the main thread, which takes the stop at once.
    wait, release = stuck
    where = []

    def long_call():
        where.append(threading.current_thread() is threading.main_thread())
        os.kill(os.getpid(), signal.SIGTERM)
        return wait()

    with stops.stops_as_interrupt():
        with pytest.raises(stops.Terminated):
            stops.interruptible(long_call)
    # Still running: the command must end with os._exit (an exit tearing down torch's threads
    # under the call aborted with "terminate called without an active exception").
    assert stops.still_running()
    release()
    assert where == [False]
    deadline = time.monotonic() + 30
    while stops.still_running() and time.monotonic() < deadline:
        time.sleep(0.01)  # polling for the thread's end, not an assertion
    assert not stops.still_running()


def test_an_interruptible_call_returns_its_value_and_raises_its_error():
    with stops.stops_as_interrupt():
        assert stops.interruptible(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            stops.interruptible(lambda: 1 / 0)
    assert stops.interruptible(lambda: threading.current_thread().name) == "MainThread"


def test_sigusr2_stops_a_command_as_sigterm_does():
    # One set of stop signals for training and the commands: submitit's warning before a time
    # limit keeps the cells scored, as it keeps a training's step.
    assert signal.SIGUSR2 in stops.STOP_SIGNALS
    with stops.stops_as_interrupt():
        with pytest.raises(stops.Terminated) as caught:
            signal.raise_signal(signal.SIGUSR2)
    assert caught.value.signum == signal.SIGUSR2
