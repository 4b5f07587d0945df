"""eval-extrapolate's plan: a length that cannot fit in memory is refused before any allocation."""

from __future__ import annotations

import pytest

from posexp.commands.extrapolate import plan as plan_mod
from posexp.commands.extrapolate.plan import Settings, forward_bytes, plan_run
from posexp.config import ExtrapolateConfig
from posexp.errors import PosexpError
from posexp.model import ModelConfig
from posexp.rundir import RunDir
from tests.test_rundir import make_run


def settings(lengths: str) -> Settings:
    return Settings(ExtrapolateConfig.from_dict({"lengths": lengths}, prefix="--"), device="cpu")


def test_a_length_that_cannot_fit_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    make_run(tmp_path / "run")
    run = RunDir(tmp_path / "run")
    assert plan_run(run, settings("32,64"), 1).items  # this machine has room for these
    monkeypatch.setattr(plan_mod, "available_memory", lambda device_type: 2**20)  # 1 MiB free
    with pytest.raises(
        PosexpError,
        match=r"^length 65,536 needs about \d+\.\d GiB for one forward pass of '.*run', and cpu "
        r"has 0\.0 GiB free; allowed: shorter --len / --lengths$",
    ):
        plan_run(run, settings("32,65536"), 1)


def test_the_estimate_counts_logits_activations_and_a_bias_block_per_head():
    model = ModelConfig(vocab_size=260, d_model=64, n_layers=2, n_heads=2)
    # Past batch_tokens one window is one row: L tokens of logits (twice: log-softmax) and
    # 8 d_model floats of activations each, plus two 128 x L bias blocks per head, 4 bytes each.
    length = 65536
    assert forward_bytes(length, 8192, model) == 4 * (
        length * (2 * 260 + 8 * 64) + 2 * 2 * 128 * length
    )
    # Short windows are batched up to batch_tokens rows' worth of tokens.
    assert forward_bytes(64, 8192, model) == 4 * (8192 * (2 * 260 + 8 * 64) + 2 * 2 * 128 * 64)
