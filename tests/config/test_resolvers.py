"""The resolvers the YAML files use: a sweep job's dir is named after what the sweep varies."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from posexp.cli.overrides import sweep_keys
from posexp.config.resolvers import SWEEP_ENV, job_dir


def root(task: list[str], preset: dict | None = None, exclude: list[str] | None = None):
    return OmegaConf.create(
        {
            "hydra": {
                "overrides": {"task": task},
                "sweeper": {"params": preset},
                "job": {"config": {"override_dirname": {"exclude_keys": exclude or []}}},
            }
        }
    )


def test_the_command_line_says_what_sweeps():
    keys = sweep_keys(["-m", "heads=1,2", "model=tiny", "seed=range(3)", "pe=choice(rope,alibi)"])
    assert keys == {"swept": ["heads", "seed", "pe"], "fixed": ["model"]}


def test_a_job_dir_keeps_only_the_swept_keys(monkeypatch):
    task = ["heads=4", "model=tiny", "train.betas=[0.9,0.95]", "pe=rope", "device=cpu"]
    full = "heads=4,model=tiny,pe=rope,train.betas=[0.9,0.95]"
    monkeypatch.setenv(SWEEP_ENV, json.dumps({"swept": ["heads"], "fixed": ["model", "pe"]}))
    # The preset sweeps pe and seed; the command line fixed pe, so only heads (and no seed
    # override in this job) remains; device is excluded from names as before.
    cfg = root(task, {"pe": "rope,alibi", "seed": "0,1,2"}, ["device"])
    assert job_dir(full, _root_=cfg) == "heads=4"
    monkeypatch.setenv(SWEEP_ENV, json.dumps({"swept": [], "fixed": ["model"]}))
    assert job_dir(full, _root_=root([*task, "seed=1"], {"pe": "rope,alibi", "seed": "0,1,2"})) == (
        "pe=rope,seed=1"
    )


@pytest.mark.parametrize("env", [None, "not json"])
def test_without_the_cli_a_job_dir_is_every_override(monkeypatch, env):
    if env is None:
        monkeypatch.delenv(SWEEP_ENV, raising=False)
    else:
        monkeypatch.setenv(SWEEP_ENV, env)
    assert job_dir("heads=4,model=tiny", _root_=root(["heads=4", "model=tiny"])) == (
        "heads=4,model=tiny"
    )
    long = ",".join(f"k{i}=v{i}" for i in range(40))
    name = job_dir(long)
    assert len(name) == 120 and name == job_dir(long)  # shortened, with a stable hash
