"""Checkpoint state: plain types and tensors only, loaded without running code from the file."""

import contextlib
import json
import random
import re
import stat

import numpy as np
import pytest
import torch

from posexp.errors import PosexpError
from posexp.store import checkpoint, files
from posexp.store.checkpoint import (
    load_state,
    load_weights,
    read_meta,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    np.random.randn()  # leaves a cached Gaussian in numpy's state
    model = torch.nn.Linear(2, 1)
    state = trained_state(model, 5)
    state["rng"] = rng_state()
    save_checkpoint(tmp_path, model, {"step": 5}, state)
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


class Cut(BaseException):
    """A kill at one step of the swap."""


def whole_checkpoint_step(run_dir) -> int:
    """The step of the checkpoint a reader finds now (its meta and weights both load)."""
    model = torch.nn.Linear(2, 2)
    load_weights(run_dir, model)
    meta = read_meta(run_dir)
    assert model.weight[0, 0].item() == meta["step"]  # weights and meta of one save
    return meta["step"]


def linear_at(step: int) -> torch.nn.Module:
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.fill_(step)
    return model


def test_a_save_cut_at_any_step_of_the_swap_leaves_a_whole_checkpoint(tmp_path, monkeypatch):
    """Cut every file operation of the swap in turn, also in a save that follows a cut swap; at
    each instant (before every operation) a reader finds a whole checkpoint, and the next save
    after the cut completes."""
    real_replace, real_rmtree = files.os.replace, files.shutil.rmtree
    calls = {"n": 0, "cut_at": None, "checked": 0}

    def guarded(real):
        def op(*args, **kwargs):
            calls["n"] += 1
            if calls["checked_dir"] is not None:
                whole_checkpoint_step(calls["checked_dir"])
                calls["checked"] += 1
            if calls["n"] == calls["cut_at"]:
                raise Cut()
            return real(*args, **kwargs)

        return op

    monkeypatch.setattr(files.os, "replace", guarded(real_replace))
    monkeypatch.setattr(files.shutil, "rmtree", guarded(real_rmtree))
    for first_cut in (None, 1, 2):  # a clean history, or one whose last swap was cut
        for cut_at in range(1, 8):
            run = tmp_path / f"run_{first_cut}_{cut_at}"
            calls.update(n=0, cut_at=None, checked_dir=None)
            save_checkpoint(run, linear_at(1), {"step": 1})
            calls.update(n=0, cut_at=first_cut, checked_dir=run)
            with contextlib.suppress(Cut):
                save_checkpoint(run, linear_at(2), {"step": 2})
            calls.update(n=0, cut_at=cut_at)
            try:
                save_checkpoint(run, linear_at(3), {"step": 3})
            except Cut:
                assert whole_checkpoint_step(run) in (1, 2, 3)
                calls.update(n=0, cut_at=None)
                save_checkpoint(run, linear_at(4), {"step": 4})
                assert whole_checkpoint_step(run) == 4
            else:
                assert whole_checkpoint_step(run) == 3
            assert sorted(p.name for p in run.iterdir()) == ["checkpoint"]
    assert calls["checked"] > 50


@pytest.mark.parametrize(
    "failure",
    [
        OSError(28, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 1216 vs 1104"),
        RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
    ],
)
def test_a_full_disk_is_one_line_and_leaves_the_previous_checkpoint_alone(
    tmp_path, monkeypatch, failure
):
    save_checkpoint(tmp_path, linear_at(1), {"step": 1})

    def full_disk(*args, **kwargs):
        raise failure

    monkeypatch.setattr(checkpoint, "save_model", full_disk)
    with pytest.raises(
        PosexpError,
        match=r"^no space left on device writing '.*checkpoint' "
        r"\(the previous checkpoint is kept\)",
    ):
        save_checkpoint(tmp_path, linear_at(2), {"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no checkpoint.tmp
    assert whole_checkpoint_step(tmp_path) == 1


def test_any_other_write_error_is_not_called_a_full_disk(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(checkpoint, "save_model", broken)
    with pytest.raises(PermissionError):
        save_checkpoint(tmp_path, linear_at(1), {"step": 1})
    assert list(tmp_path.iterdir()) == []


def trained_state(model: torch.nn.Module, step: int) -> dict:
    """What the trainer saves after ``step`` AdamW steps."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    for _ in range(step):
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        scheduler.step()
    return {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": rng_state(),
        "step": step,
        "best_val": 1.0,
        "last_val": 1.5,
    }


def damaged(state: dict, **changes) -> dict:
    return {**state, **changes}


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda s: {}, r"missing optimizer, scheduler, rng, step, best_val, last_val"),
        (lambda s: [1, 2], r"expected a mapping of optimizer, .* found list"),
        (lambda s: damaged(s, step="3"), r"step must be an integer >= 0, found '3'"),
        (lambda s: damaged(s, step=2), r"state.pt is at step 2 but meta.json at step 3"),
        (lambda s: damaged(s, best_val="low"), r"best_val must be a number"),
        (lambda s: damaged(s, rng={"torch": 1}), r"rng must hold"),
        (
            lambda s: damaged(s, scheduler={"last_epoch": 0}),
            r"the scheduler's position does not match step 3",
        ),
        (
            lambda s: damaged(s, optimizer={"state": {}}),
            r"the optimizer state is not an optimizer's state dict",
        ),
        (
            lambda s: damaged(s, optimizer=trained_state(torch.nn.Linear(2, 3), 3)["optimizer"]),
            r"the optimizer's exp_avg of parameter 0 has shape \(3, 2\), the parameter \(1, 2\)",
        ),
    ],
)
def test_a_damaged_state_is_refused_naming_the_file(tmp_path, damage, message):
    model = torch.nn.Linear(2, 1)
    good = trained_state(model, 3)
    save_checkpoint(tmp_path, model, {"step": 3}, good)
    assert load_state(tmp_path, list(model.parameters()))["step"] == 3
    torch.save(damage(good), tmp_path / "checkpoint" / "state.pt")
    with pytest.raises(PosexpError, match=rf"^corrupt checkpoint '.*state.pt': {message}"):
        load_state(tmp_path, list(model.parameters()))


def test_a_zero_byte_state_is_refused_in_one_line(tmp_path):
    save_checkpoint(tmp_path, torch.nn.Linear(2, 1), {"step": 0}, {"step": 0})
    (tmp_path / "checkpoint" / "state.pt").write_bytes(b"")
    with pytest.raises(PosexpError, match=r"^corrupt checkpoint '.*state.pt': \w+") as e:
        load_state(tmp_path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "meta, message",
    [
        ("[1, 2]", r"expected a mapping, found list"),
        ('{"step": "3"}', r"step must be an integer >= 0, found '3'"),
        ('{"step": -1}', r"step must be an integer >= 0, found -1"),
        ('{"step": 3, "model": "gpt"}', r"model must be a mapping, found str"),
        ('{"step": 3, "config": [1]}', r"config must be a mapping, found list"),
        ("{not json", r"not JSON: Expecting property name"),
        ("", r"empty"),
    ],
)
def test_a_damaged_meta_is_refused_naming_the_file(tmp_path, meta, message):
    save_checkpoint(tmp_path, linear_at(3), {"step": 3})
    (tmp_path / "checkpoint" / "meta.json").write_text(meta)
    with pytest.raises(PosexpError, match=rf"^corrupt checkpoint '.*meta.json': {message}"):
        read_meta(tmp_path)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda c: (c / "model.safetensors").write_bytes(b""), r"model.safetensors is cut short"),
        (
            lambda c: (c / "model.safetensors").write_bytes(
                (c / "model.safetensors").read_bytes()[:-4]
            ),
            r"model.safetensors is cut short: [\d,]+ bytes of [\d,]+",
        ),
        (lambda c: (c / "model.safetensors").unlink(), r"model.safetensors is missing"),
        (
            lambda c: (c / "state.pt").write_bytes((c / "state.pt").read_bytes()[:300]),
            r"state.pt is cut short \(300 bytes\)",
        ),
        (lambda c: (c / "meta.json").write_text("{cut"), r"corrupt checkpoint '.*meta.json'"),
    ],
)
def test_a_damaged_checkpoint_is_found_without_loading_it(tmp_path, damage, message):
    from posexp.store.checkpoint import checkpoint_problem

    model = torch.nn.Linear(2, 1)
    save_checkpoint(tmp_path, model, {"step": 3}, trained_state(model, 3))
    assert checkpoint_problem(tmp_path) is None
    assert checkpoint_problem(tmp_path / "never-trained") is None  # no checkpoint: no problem
    damage(tmp_path / "checkpoint")
    assert re.search(message, checkpoint_problem(tmp_path))
