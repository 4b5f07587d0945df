"""Stops of eval-extrapolate and report: SIGTERM as Ctrl-C, held back, echoed."""

from __future__ import annotations

import signal

import pytest

from posexp import stops


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
