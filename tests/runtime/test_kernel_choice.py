"""attention.causal: which kernel trains causal attention without a bias, chosen by measurement,
cached per machine, refused where it cannot run, and kept across a resume."""

from __future__ import annotations

import json

import pytest
import torch

from posexp.commands.train import run_training
from posexp.errors import PosexpError
from posexp.runtime import kernel_choice
from posexp.runtime.kernel_choice import resolve_causal_kernel, resolve_linear_kernel
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


@pytest.mark.parametrize(("threads", "said"), [(1, "1 thread:"), (2, "2 threads:")])
def test_the_log_reasons_name_what_was_timed_without_parentheses(
    measured, linear_measured, tmp_path, monkeypatch, threads, said
):
    # train.py logs each reason inside parentheses of its own: a reason must hold none.
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    measured(1.6)
    linear_measured(0.9)
    _, why = resolve_causal_kernel("auto", "bf16", CPU, SHAPE, tmp_path)
    assert why == (
        "auto: matmul; in bf16 on this CPU the matmul kernel ran causal attention's forward and "
        "backward at 1.60x SDPA's speed for batch 16, 4 heads, 256 tokens, 32-dim heads, "
        f"{said} at least the 1.10x auto asks"
    )
    _, why = resolve_linear_kernel("auto", "fp32", CPU, False, LINEAR_SHAPE, tmp_path)
    assert why.endswith(f"d_model 128, MLP 512, {said} below the 1.10x auto asks")
    assert "(" not in why and ")" not in why


def test_cpus_of_one_name_but_other_families_do_not_share_measurements(
    measured, linear_measured, tmp_path, monkeypatch
):
    from posexp.runtime import precision

    def cpu(family, model="2"):
        fields = {"model name": "AMD EPYC", "cpu family": family, "model": model}
        monkeypatch.setattr(precision, "_cpuinfo", lambda: fields)

    calls, linear_calls = measured(1.6), linear_measured(2.0)
    for family in ("25", "26", "25"):
        cpu(family)
        resolve_causal_kernel("auto", "bf16", CPU, SHAPE, tmp_path)
        resolve_linear_kernel("auto", "fp32", CPU, False, LINEAR_SHAPE, tmp_path)
    assert len(calls) == len(linear_calls) == 2  # each family measured once, then read back
    assert precision.cpu_name() == "AMD EPYC family 25 model 2"
    arm = {"cpu implementer": "0x41", "cpu part": "0xd0c"}  # Linux on Arm: no model name
    monkeypatch.setattr(precision, "_cpuinfo", lambda: arm)
    assert precision.cpu_name() == "implementer 0x41 part 0xd0c"


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
        (["train.linear=fast"], "unknown train.linear 'fast'; allowed: auto, onednn, torch"),
        (
            ["train.linear=onednn", "train.precision=bf16"],
            "train.linear=onednn is a kernel for fp32 on a CPU, uncompiled, and "
            "train.precision=bf16; allowed: train.linear=auto or torch",
        ),
        (
            ["train.linear=onednn", "device=cuda"],
            "train.linear=onednn is a kernel for fp32 on a CPU, uncompiled, and device=cuda; "
            "allowed: train.linear=auto or torch",
        ),
        (
            ["train.linear=onednn", "train.compile=true"],
            "train.linear=onednn is a kernel for fp32 on a CPU, uncompiled, and "
            "train.compile=true; allowed: train.linear=auto or torch",
        ),
    ],
)
def test_bad_settings_are_refused_where_the_config_is_built(overrides, message):
    with pytest.raises(PosexpError) as e:
        run_config(*overrides)
    assert str(e.value) == message


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
    assert meta["kernels"]["causal"] == "matmul"
    assert not {"attention", "causal_kernel", "linear_kernel"} & set(meta["model"])
    sessions = json.loads((tmp_path / "cut" / "provenance.json").read_text())["sessions"]
    assert [s["causal_kernel"] for s in sessions] == ["matmul", "matmul"]
    assert sessions[-1]["causal_kernel_reason"] == "the kernel this run trained with (resume)"
    assert len(calls) == 1  # the second run of the same shape read the cache


# ---- train.linear: the linear layers' kernel in fp32 on a CPU --------------------------------

LINEAR_SHAPE = (4096, 128, 512)


@pytest.fixture
def linear_measured(monkeypatch):
    """Replace the linear kernels' timing with a fixed speedup; count the measurements."""
    calls = []

    def fake(speedup):
        def measure(*shape):
            calls.append(shape)
            return speedup

        monkeypatch.setattr(kernel_choice.onednn_linear, "measure_speedup", measure)
        monkeypatch.setattr(kernel_choice.onednn_linear, "available", lambda: True)
        return calls

    return fake


@pytest.mark.parametrize(
    ("speedup", "expected"), [(2.2, "onednn"), (1.1, "onednn"), (1.0, "torch")]
)
def test_linear_auto_takes_onednn_in_fp32_on_a_cpu_where_it_measured_faster(
    linear_measured, tmp_path, speedup, expected
):
    calls = linear_measured(speedup)
    chosen, why = resolve_linear_kernel("auto", "fp32", CPU, False, LINEAR_SHAPE, tmp_path)
    assert chosen == expected and f"{speedup:.2f}x torch's speed for 4096 rows" in why
    assert "d_model 128, MLP 512" in why and "((" not in why and "))" not in why
    assert resolve_linear_kernel("auto", "fp32", CPU, False, LINEAR_SHAPE, tmp_path)[0] == expected
    assert calls == [LINEAR_SHAPE]  # cached per CPU, torch, threads and shape


def test_linear_auto_keeps_torch_without_measuring_where_onednn_does_not_apply(
    linear_measured, monkeypatch
):
    calls = linear_measured(9.0)
    cuda = torch.device("cuda")
    assert resolve_linear_kernel("auto", "bf16", CPU, False, LINEAR_SHAPE) == (
        "torch",
        "auto: torch for bf16 on cpu",
    )
    assert resolve_linear_kernel("auto", "fp32", cuda, False, LINEAR_SHAPE)[1] == (
        "auto: torch for fp32 on cuda"
    )
    assert resolve_linear_kernel("auto", "fp32", CPU, True, LINEAR_SHAPE)[1] == (
        "auto: torch for fp32 on cpu, compiled"
    )
    # A resumed run keeps its recorded kernel; runs from before train.linear trained on torch.
    resumed = resolve_linear_kernel(
        "auto", "fp32", CPU, False, LINEAR_SHAPE, recorded="onednn", resuming=True
    )
    assert resumed == ("onednn", "the kernel this run trained with (resume)")
    # ... where oneDNN runs: resumed in bf16 or compiled, the layers are torch's, and say so.
    for precision, compiled in (("bf16", False), ("fp32", True)):
        chosen = resolve_linear_kernel(
            "auto", precision, CPU, compiled, LINEAR_SHAPE, recorded="onednn", resuming=True
        )
        assert chosen[0] == "torch" and chosen[1].startswith("auto: torch for ")
    assert resolve_linear_kernel("auto", "fp32", CPU, False, LINEAR_SHAPE, resuming=True)[0] == (
        "torch"
    )
    assert resolve_linear_kernel("onednn", "fp32", CPU, False, LINEAR_SHAPE)[0] == "onednn"
    monkeypatch.setattr(kernel_choice.onednn_linear, "available", lambda: False)
    chosen, why = resolve_linear_kernel("auto", "fp32", CPU, False, LINEAR_SHAPE)
    assert chosen == "torch" and "has no oneDNN linear op here" in why
    resumed = resolve_linear_kernel(
        "auto", "fp32", CPU, False, LINEAR_SHAPE, recorded="onednn", resuming=True
    )
    assert resumed[0] == "torch" and "has no oneDNN linear op here" in resumed[1]
    assert calls == []


def test_a_torch_without_onednns_op_refuses_an_explicit_onednn(monkeypatch):
    from posexp.kernels import onednn_linear

    monkeypatch.setattr(onednn_linear, "available", lambda: False)
    with pytest.raises(PosexpError, match=r"train.linear=onednn needs oneDNN's linear op"):
        run_config("train.linear=onednn", "train.precision=fp32")
    assert run_config("train.linear=auto").train.linear == "auto"


def test_a_saved_config_of_a_kernel_that_cannot_run_here_loads_anywhere():
    # A run trained on oneDNN reads back on a machine where it could not run (here: none).
    from posexp.config import RunConfig

    config = run_config("train.linear=onednn", "train.precision=fp32").to_dict()
    config["device"] = "cuda"
    assert RunConfig.from_saved(config).train.linear == "onednn"


def test_one_resolver_call_gives_the_model_its_kernels_and_a_resume_keeps_them(measured, tmp_path):
    from posexp.kernels.choice import KernelChoice
    from posexp.runtime.build import model_config

    measured(2.0)  # auto would take the matmul kernel in bf16
    cfg = run_config(
        *TINY,
        "train.precision=bf16",
        "attention.causal=auto",
        "train.linear=auto",
        f"cache_dir={tmp_path}",
    )
    mcfg = model_config(cfg, vocab_size=50)
    chosen = kernel_choice.resolve_run_kernels(cfg, mcfg, CPU, {})
    assert chosen.precision == "bf16"
    assert chosen.kernels == KernelChoice(cfg.attention.backend, "matmul", "torch")
    assert chosen.facts()["causal_kernel"] == "matmul" == chosen.attention
    # A resume reads what the checkpoint recorded beside the model, whatever auto says now.
    measured(0.5)
    saved = {
        "precision": "bf16",
        "kernels": {"bias": "auto", "causal": "matmul", "linear": "torch"},
    }
    resumed = kernel_choice.resolve_run_kernels(cfg.replace(resume="somewhere"), mcfg, CPU, saved)
    assert resumed.kernels.causal == "matmul"
    assert resumed.attention_reason == "the kernel this run trained with (resume)"
    # Evaluation runs on the recorded kernels; a meta without them, on the defaults.
    assert kernel_choice.evaluation_kernels(saved) == KernelChoice("auto", "matmul", "torch")
    assert kernel_choice.evaluation_kernels({}) == KernelChoice()
