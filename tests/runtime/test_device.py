"""The run's device and threads: a resume on another CPU thread count than its checkpoint's is
named in the log, as its weights then leave an uninterrupted run's."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from posexp.commands.train import run_training
from posexp.runtime.device import check_resume_threads
from tests.helpers import TINY, run_config, train_killed_halfway


@pytest.fixture
def threads():
    """Whatever a test sets, torch's thread count comes back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_checkpoint_records_its_threads_and_a_resume_on_others_says_so(
    tmp_path, cache, monkeypatch, caplog, threads
):
    cfg = run_config(*TINY, "train.threads=1", f"cache_dir={cache}")
    run = tmp_path / "cut"
    train_killed_halfway(cfg, run, monkeypatch)
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["threads"] == 1
    with caplog.at_level(logging.WARNING, logger="posexp"):
        resumed = run_config(*TINY, "train.threads=2", f"cache_dir={cache}")
        run_training(resumed.replace(resume=str(run)), run)
    warned = [r.getMessage() for r in caplog.records if "resumes on" in r.getMessage()]
    assert warned == [
        "this run was checkpointed on 1 CPU thread and resumes on 2: its weights will differ in "
        "the last bits from an uninterrupted run's; train.threads=1 resumes exactly"
    ]
    assert json.loads((run / "checkpoint" / "meta.json").read_text())["threads"] == 2


def test_the_same_threads_a_gpu_or_an_unrecorded_count_say_nothing(caplog, threads):
    torch.set_num_threads(1)
    with caplog.at_level(logging.WARNING, logger="posexp"):
        check_resume_threads(1, torch.device("cpu"))
        check_resume_threads(None, torch.device("cpu"))
        check_resume_threads(2, torch.device("cuda"))  # GPU arithmetic is not split by them
    assert caplog.records == []
    check_resume_threads(2, torch.device("cpu"))
    assert [r.levelname for r in caplog.records] == ["WARNING"]
