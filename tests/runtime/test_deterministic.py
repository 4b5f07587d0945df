"""train.deterministic: torch's deterministic kernels for a run, a bit-for-bit resume with them,
the setting recorded in provenance, and its bad values and missing kernels in one line."""

from __future__ import annotations

import json

import pytest
import torch

from posexp.commands import train as train_module
from posexp.commands.train import run_training
from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.runtime import device
from tests.helpers import TINY, run_config, train_killed_halfway, weights_sha256


@pytest.fixture(autouse=True)
def _restore(monkeypatch):
    """Deterministic mode is process-wide: every test leaves it as it found it."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:]


def test_off_by_default_and_a_non_bool_is_one_line():
    assert run_config().train.deterministic is False
    assert run_config("train.deterministic=true").train.deterministic is True
    d = run_config().to_dict()
    d["train"]["deterministic"] = "yes"
    with pytest.raises(PosexpError) as e:
        RunConfig.from_dict(d)
    assert str(e.value) == "train.deterministic must be true or false, got 'yes'"


def test_on_sets_every_switch_and_off_sets_them_back(monkeypatch):
    torch.backends.cudnn.benchmark = True
    device.set_deterministic(True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert device.os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    device.set_deterministic(False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic
    # A deterministic setting the user chose is kept.
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    device.set_deterministic(True)
    assert device.os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_a_deterministic_run_resumed_halfway_ends_bit_identical(tmp_path, cache, monkeypatch):
    cfg = run_config(*TINY, "train.deterministic=true", f"cache_dir={cache}")
    run_training(cfg, tmp_path / "full")
    assert torch.are_deterministic_algorithms_enabled()  # the run switched them on
    train_killed_halfway(cfg, tmp_path / "cut", monkeypatch)
    torch.use_deterministic_algorithms(False)  # the resume must set it again itself
    run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    assert torch.are_deterministic_algorithms_enabled()
    assert weights_sha256(tmp_path / "full") == weights_sha256(tmp_path / "cut")
    sessions = json.loads((tmp_path / "cut" / "provenance.json").read_text())["sessions"]
    assert [s["deterministic"] for s in sessions] == [True, True]
    meta = json.loads((tmp_path / "cut" / "checkpoint" / "meta.json").read_text())
    assert meta["config"]["train"]["deterministic"] is True


def test_an_op_without_a_deterministic_kernel_is_one_line(tmp_path, cache, monkeypatch):
    def fit(self, stop=None):
        raise RuntimeError(
            "scatter_add_cuda_kernel does not have a deterministic implementation, but you set "
            "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for "
            "this operation, or ..."
        )

    monkeypatch.setattr(train_module.Trainer, "fit", fit)
    cfg = run_config(*TINY, "train.deterministic=true", f"cache_dir={cache}")
    with pytest.raises(PosexpError) as e:
        run_training(cfg, tmp_path / "run")
    assert str(e.value) == (
        "train.deterministic=true: scatter_add_cuda_kernel has no deterministic kernel; "
        "set train.deterministic=false for this run"
    )
