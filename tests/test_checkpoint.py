"""Checkpoint state: plain types and tensors only, loaded without running code from the file."""

import json
import random
import stat

import numpy as np
import pytest
import torch

from posexp.checkpoint import load_state, rng_state, save_checkpoint, set_rng_state
from posexp.errors import PosexpError


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    np.random.randn()  # leaves a cached Gaussian in numpy's state
    model = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path, model, {"step": 5}, {"rng": rng_state(), "step": 5})
    expected = draws()
    state = load_state(tmp_path)  # weights_only=True inside
    set_rng_state(state["rng"])
    assert draws() == expected and state["step"] == 5


class Payload:
    def __reduce__(self):
        return (print, ("this would run on load",))


def test_a_state_file_that_needs_code_to_load_is_refused(tmp_path):
    save_checkpoint(tmp_path, torch.nn.Linear(2, 2), {"step": 1}, {"step": 1})
    torch.save({"step": 1, "evil": Payload()}, tmp_path / "checkpoint" / "state.pt")
    with pytest.raises(PosexpError, match=r"^corrupt checkpoint .*state.pt"):
        load_state(tmp_path)


def test_every_checkpoint_file_has_the_same_permissions(tmp_path):
    save_checkpoint(tmp_path, torch.nn.Linear(2, 2), {"step": 1}, {"step": 1})
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "checkpoint").iterdir()}
    assert len(set(modes.values())) == 1, modes
    assert json.loads((tmp_path / "checkpoint" / "meta.json").read_text())["step"] == 1
