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
