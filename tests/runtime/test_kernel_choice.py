"""attention.causal: which kernel trains causal attention without a bias, chosen by measurement,
cached per machine, refused where it cannot run, and kept across a resume."""

from __future__ import annotations

import json

import pytest
import torch

from posexp.commands.train import run_training
from posexp.errors import PosexpError
from posexp.runtime import kernel_choice
from posexp.runtime.kernel_choice import resolve_causal_kernel
from tests.helpers import TINY, run_config, train_killed_halfway, weights_sha256

CPU = torch.device("cpu")
SHAPE = (16, 4, 256, 32)


@pytest.fixture
def measured(monkeypatch):
    """Replace the kernel timing with a fixed speedup; count the measurements."""
    calls = []

    def fake(speedup):
        def measure(*shape):
            calls.append(shape[:4])
            return speedup

        monkeypatch.setattr(kernel_choice, "measure_speedup", measure)
        return calls

    return fake


@pytest.mark.parametrize(("speedup", "expected"), [(1.6, "matmul"), (1.1, "matmul"), (0.9, "sdpa")])
def test_auto_takes_the_matmul_kernel_in_bf16_on_a_cpu_only_where_it_measured_faster(
    measured, tmp_path, speedup, expected
):
    calls = measured(speedup)
    chosen, why = resolve_causal_kernel("auto", "bf16", CPU, SHAPE, tmp_path)
    assert chosen == expected and f"{speedup:.2f}x SDPA's speed" in why and "256 tokens" in why
    assert resolve_causal_kernel("auto", "bf16", CPU, SHAPE, tmp_path)[0] == expected
    assert calls == [SHAPE]  # cached per CPU, torch, threads and shape
    resolve_causal_kernel("auto", "bf16", CPU, (8, 4, 256, 32), tmp_path)
    assert calls == [SHAPE, (8, 4, 256, 32)]


def test_auto_keeps_sdpa_without_measuring_where_the_matmul_kernel_cannot_win(measured):
    calls = measured(9.0)
    assert resolve_causal_kernel("auto", "fp32", CPU, SHAPE) == ("sdpa", "auto: sdpa for fp32")
    chosen, why = resolve_causal_kernel("auto", "bf16", torch.device("cuda"), SHAPE)
    assert chosen == "sdpa" and why == "auto: sdpa for bf16 on cuda"
    chosen, why = resolve_causal_kernel("auto", "bf16", CPU, (64, 8, 1024, 16))
    assert chosen == "sdpa" and "64x8x1024x1024 weights a layer is over" in why
    assert calls == []


def test_explicit_choices_and_a_resume_keep_their_kernel(measured):
    calls = measured(0.5)
    assert resolve_causal_kernel("matmul", "bf16", CPU, SHAPE)[0] == "matmul"
    assert resolve_causal_kernel("sdpa", "bf16", CPU, SHAPE)[0] == "sdpa"
    # A resume trains on with the kernel its checkpoint recorded, whatever auto would say now.
    resumed = resolve_causal_kernel("auto", "bf16", CPU, SHAPE, recorded="matmul", resuming=True)
    assert resumed == ("matmul", "the kernel this run trained with (resume)")
    # Runs from before attention.causal trained on SDPA.
    assert resolve_causal_kernel("auto", "bf16", CPU, SHAPE, resuming=True)[0] == "sdpa"
    assert calls == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["attention.causal=fast"], "unknown attention.causal 'fast'; allowed: auto, matmul, sdpa"),
        (
            ["attention.causal=matmul", "train.precision=fp32"],
            "attention.causal=matmul is a bf16 kernel, and train.precision=fp32; allowed: "
            "attention.causal=auto or sdpa, or train.precision=bf16",
        ),
    ],
)
def test_bad_settings_are_refused_where_the_config_is_built(overrides, message):
    with pytest.raises(PosexpError) as e:
        run_config(*overrides)
    assert str(e.value) == message


def test_a_config_saved_before_attention_causal_means_auto():
    from posexp.config.sections import AttentionConfig

    assert AttentionConfig.from_dict({"backend": "auto"}).causal == "auto"


def test_a_bf16_run_on_the_matmul_kernel_records_it_and_resumes_bitwise(
    tmp_path, monkeypatch, measured
):
    calls = measured(2.0)
    cache = tmp_path / "cache"  # its own: no verdict of another test's is read
    cfg = run_config(*TINY, "train.precision=bf16", "attention.causal=auto", f"cache_dir={cache}")
    run_training(cfg, tmp_path / "full")
    train_killed_halfway(cfg, tmp_path / "cut", monkeypatch)
    measured(0.5)  # auto would now say sdpa: the resume keeps what the run trained with
    run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    assert weights_sha256(tmp_path / "full") == weights_sha256(tmp_path / "cut")
    meta = json.loads((tmp_path / "cut" / "checkpoint" / "meta.json").read_text())
    assert meta["model"]["causal_kernel"] == "matmul"
    sessions = json.loads((tmp_path / "cut" / "provenance.json").read_text())["sessions"]
    assert [s["causal_kernel"] for s in sessions] == ["matmul", "matmul"]
    assert sessions[-1]["causal_kernel_reason"] == "the kernel this run trained with (resume)"
    assert len(calls) == 1  # the second run of the same shape read the cache
