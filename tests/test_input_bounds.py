"""Values with a meaningful range are refused where the config is built, before any run dir."""

from __future__ import annotations

import re

import pytest

from posexp.errors import PosexpError
from tests.helpers import run_config

CASES = {
    # numpy refuses a negative seed and torch one past 2**64 - 1: a traceback, a dir left behind.
    ("seed=-1",): "seed must be in [0, 2**63 - 1] (what torch and numpy both accept), got -1",
    (
        "seed=100000000000000000000",
    ): "seed must be in [0, 2**63 - 1] (what torch and numpy both accept), got 100000000000000000000",
    # Was allowed up to 2**32 - 1: the BPE trainer then reserved ~70 GB and panicked.
    (
        "tokenizer=bpe",
        "tokenizer.vocab_size=1000000000",
    ): "tokenizer.vocab_size must be an integer in [260, 1048576], got 1000000000",
    (
        "tokenizer=bpe",
        "tokenizer.vocab_size=100",
    ): "tokenizer.vocab_size must be an integer in [260, 1048576], got 100",
    # Checked only when the model was built (rope), or never (sinusoidal: a NaN loss).
    ("pe.base=0.5",): "pe.base must be a finite number > 1, got 0.5",
    ("pe=sinusoidal", "pe.base=-3"): "pe.base must be a finite number > 1, got -3",
    # torch spawns that many threads and the OS refuses: a traceback from TensorBoard's writer.
    ("train.threads=100000",): "train.threads must be at most 1024 (or null), got 100000",
}


@pytest.mark.parametrize("overrides", list(CASES), ids=" ".join)
def test_out_of_range_values_are_refused_by_the_config(overrides):
    with pytest.raises(PosexpError, match=f"^{re.escape(CASES[overrides])}$"):
        run_config(*overrides)


def test_the_ends_of_each_range_are_accepted():
    assert run_config("seed=0").seed == 0
    assert run_config("seed=9223372036854775807").seed == 2**63 - 1
    assert run_config("tokenizer=bpe", "tokenizer.vocab_size=1048576").tokenizer.params == {
        "vocab_size": 2**20
    }
    assert run_config("train.threads=1024").train.threads == 1024
    assert run_config("pe=sinusoidal", "pe.base=1.5").pe.params["base"] == 1.5
