"""The learning-rate schedule: warmup, cosine decay to min_lr, and the warning when warmup covers
the whole run."""

from __future__ import annotations

import math

import pytest

from posexp.runtime.optim import lr_lambda


def test_warmup_then_cosine_to_the_floor():
    f = lr_lambda(10, 110, 0.1)
    assert f(0) == pytest.approx(0.1)  # (step + 1) / warmup at the first step
    assert f(9) == pytest.approx(1.0)
    # Half-way through the decay the cosine is at its mean: floor + (1 - floor) / 2.
    assert f(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)), abs=0.02)
    assert f(110) == pytest.approx(0.1, abs=1e-6)


def test_resuming_longer_keeps_the_planned_decay_by_default():
    from types import SimpleNamespace

    from posexp.runtime.optim import Schedule, resume_schedule

    saved = Schedule(60, 600)
    train = SimpleNamespace(
        warmup_steps=60, max_steps=700, lr=3e-3, min_lr=3e-4, resume_schedule="keep"
    )
    kept, note = resume_schedule(saved, train, 600)
    assert kept == saved
    f = kept.factor(0.1)
    assert all(f(step) == pytest.approx(0.1) for step in range(600, 700))  # no rise, at min_lr
    assert "kept as the run began" in note and "then stays at train.min_lr=0.0003" in note


def test_stretching_says_how_far_the_lr_rises():
    from types import SimpleNamespace

    from posexp.runtime.optim import Schedule, resume_schedule

    train = SimpleNamespace(
        warmup_steps=60, max_steps=700, lr=3e-3, min_lr=3e-4, resume_schedule="stretch"
    )
    stretched, note = resume_schedule(Schedule(60, 600), train, 600)
    assert stretched == Schedule(60, 700)
    # Closed form: 0.1 + 0.9 * (1 + cos(pi * 540 / 640)) / 2 at step 600, times lr.
    now = 3e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 540 / 640)))
    assert note.endswith(f"the LR goes from 0.0003 to {now:.3g} at step 601")


def test_a_resume_of_the_same_length_changes_nothing():
    from types import SimpleNamespace

    from posexp.runtime.optim import Schedule, resume_schedule

    train = SimpleNamespace(
        warmup_steps=5, max_steps=50, lr=1.0, min_lr=0.1, resume_schedule="keep"
    )
    assert resume_schedule(Schedule(5, 50), train, 20) == (Schedule(5, 50), None)
