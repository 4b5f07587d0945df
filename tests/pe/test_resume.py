"""Encodings with per-layer parameters or attention of their own resume bit for bit."""

from __future__ import annotations

import pytest

from posexp.commands.train import run_training
from posexp.pe import PE_REGISTRY, PositionalEncoding
from tests.helpers import TINY, run_config, train_killed_halfway, weights_sha256

# Every encoding whose layers differ from the model-level one (``layer``) or that attends itself.
PES = sorted(
    name
    for name, cls in PE_REGISTRY.items()
    if cls.kind == "attention" or cls.layer is not PositionalEncoding.layer
)


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
    train_killed_halfway(cfg, tmp_path / "cut", monkeypatch)
    run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    assert weights_sha256(tmp_path / "full") == weights_sha256(tmp_path / "cut")


@pytest.mark.parametrize(
    "pe, kernel_shown",
    [("stick_breaking", "own"), ("path", "own"), ("cope", "own"), ("fox", "matmul")],
)
def test_a_run_records_the_attention_it_trained_on(tmp_path, cache, monkeypatch, pe, kernel_shown):
    # attention.causal=matmul in bf16: FoX adds its gate on that kernel; the encodings that
    # compute attention themselves do not take it, and their run says so.
    from posexp.store import provenance

    cfg = run_config(
        *TINY,
        f"pe={pe}",
        "train.precision=bf16",
        "attention.causal=matmul",
        f"cache_dir={cache}",
    )
    run_training(cfg, tmp_path / "run")
    (session,) = provenance.sessions(tmp_path / "run")
    assert session["causal_kernel"] == kernel_shown
    if kernel_shown == "own":
        assert f"pe={pe} computes its attention itself" in session["causal_kernel_reason"]
    assert PE_REGISTRY[pe].uses_causal_kernel({}) is (kernel_shown != "own")
