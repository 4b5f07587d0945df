"""posexp/objectives/lm.py: a split too short to score is refused when training starts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from posexp.errors import PosexpError
from posexp.objectives.lm import LanguageModeling
from tests.helpers import TINY, run_config


def data(train: int, val: int, test: int) -> SimpleNamespace:
    return SimpleNamespace(
        tokens={
            name: np.arange(n, dtype=np.uint16) % 50
            for name, n in (("train", train), ("val", val), ("test", test))
        }
    )


def test_a_test_split_shorter_than_one_window_is_refused_at_the_start():
    cfg = run_config(*TINY)  # train.seq_len=32
    cpu = torch.device("cpu")
    LanguageModeling(cfg, data(1000, 100, 33), cpu, None)  # one window of 32 + its target
    with pytest.raises(PosexpError, match=r"^the test split has 12 tokens, too short for one"):
        LanguageModeling(cfg, data(1000, 100, 12), cpu, None)
    with pytest.raises(PosexpError, match=r"^the val split has 12 tokens"):
        LanguageModeling(cfg, data(1000, 12, 100), cpu, None)
    with pytest.raises(PosexpError, match=r"^the train split has 20 tokens"):
        LanguageModeling(cfg, data(20, 100, 100), cpu, None)
