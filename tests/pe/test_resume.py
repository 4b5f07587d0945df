"""Encodings with per-layer parameters or attention of their own resume bit for bit."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import load_file

from posexp.commands import train as train_module
from posexp.commands.train import run_training
from posexp.pe import PE_REGISTRY, PositionalEncoding
from tests.helpers import TINY, run_config

# Every encoding whose layers differ from the model-level one (``layer``) or that attends itself.
PES = sorted(
    name
    for name, cls in PE_REGISTRY.items()
    if cls.kind == "attention" or cls.layer is not PositionalEncoding.layer
)


class Stop(Exception):
    pass


def weights_sha256(run_dir) -> str:
    weights = load_file(str(run_dir / "checkpoint" / "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(
            name.encode() + weights[name].contiguous().view(torch.uint8).numpy().tobytes()
        )
    return digest.hexdigest()


def test_the_new_encodings_are_covered():
    assert "fox" in PES


# Variants whose state differs: PaTH with FoX's gate, in bf16 (its keys stay fp32).
VARIANTS = [[f"pe={pe}"] for pe in PES] + [
    ["pe=path", "pe.forget_gate=true", "train.precision=bf16"]
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=" ".join)
def test_a_resume_ends_bit_identical(tmp_path, cache, monkeypatch, overrides):
    cfg = run_config(*TINY, *overrides, f"cache_dir={cache}")
    run_training(cfg, tmp_path / "full")
    save = train_module.Trainer.save

    def save_then_stop(self):
        save(self)
        if self.step == 3:
            raise Stop  # killed right after the middle checkpoint

    monkeypatch.setattr(train_module.Trainer, "save", save_then_stop)
    with pytest.raises(Stop):
        run_training(cfg, tmp_path / "cut")
    monkeypatch.undo()
    run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    assert weights_sha256(tmp_path / "full") == weights_sha256(tmp_path / "cut")
