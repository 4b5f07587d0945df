"""train.precision: what auto picks (detection forced both ways), bf16 training that keeps fp32
weights, optimizer state and loss, and an exact resume in bf16."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import torch

from posexp.commands.train import run_training
from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.runtime import precision
from tests.helpers import TINY, run_config, train_killed_halfway, weights_sha256

CPU = torch.device("cpu")


@pytest.fixture
def measured(monkeypatch):
    """Replace the matmul timing with a fixed speedup; count the measurements."""
    calls = []

    def fake(speedup, fp32="torch"):
        def measure(width, tokens=2048, reps=5):
            calls.append(width)
            return speedup, fp32

        monkeypatch.setattr(precision, "matmul_speedup", measure)
        return calls

    return fake


def test_auto_keeps_fp32_on_a_cpu_without_native_bf16(monkeypatch, measured):
    monkeypatch.setattr(precision, "cpu_bf16_feature", lambda: None)
    calls = measured(9.0)  # even a (fake) fast bf16 is not tried without the feature
    chosen, why = precision.resolve_precision("auto", CPU)
    assert chosen == "fp32" and "no native bf16" in why and calls == []


@pytest.mark.parametrize(("speedup", "expected"), [(1.6, "bf16"), (1.15, "bf16"), (0.6, "fp32")])
def test_auto_on_a_cpu_with_native_bf16_takes_bf16_only_where_it_is_faster(
    monkeypatch, measured, tmp_path, speedup, expected
):
    monkeypatch.setattr(precision, "cpu_bf16_feature", lambda: "avx512_bf16")
    calls = measured(speedup)
    chosen, why = precision.resolve_precision("auto", CPU, 256, tmp_path)
    assert chosen == expected and f"{speedup:.2f}x" in why and "avx512_bf16" in why
    # The verdict is cached per CPU, torch and thread count: a second run does not re-measure.
    assert precision.resolve_precision("auto", CPU, 256, tmp_path)[0] == expected
    assert calls == [256]
    precision.resolve_precision("auto", CPU, 512, tmp_path)  # another width is measured anew
    assert calls == [256, 512]


@pytest.mark.parametrize(
    ("fp32", "onednn", "named"),
    [
        ("onednn", True, "fp32 on oneDNN, the faster fp32 kernel here:"),
        ("torch", True, "fp32 on torch's BLAS, the faster fp32 kernel here:"),
        ("torch", False, "fp32 on torch's BLAS:"),  # the only fp32 kernel this torch has
    ],
)
def test_auto_names_the_fp32_kernel_bf16_was_measured_against(
    monkeypatch, measured, tmp_path, fp32, onednn, named
):
    from posexp.kernels import onednn_linear

    monkeypatch.setattr(precision, "cpu_bf16_feature", lambda: "avx512_bf16")
    monkeypatch.setattr(onednn_linear, "available", lambda: onednn)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    calls = measured(1.5, fp32)
    expected = (
        f"auto: this CPU has avx512_bf16; on 2 threads, a bf16 matmul of width 256 ran at 1.50x "
        f"{named} at least the 1.15x auto asks of bf16"
    )
    assert precision.resolve_precision("auto", CPU, 256, tmp_path) == ("bf16", expected)
    # Read back from the cache, the line names the same kernel.
    assert precision.resolve_precision("auto", CPU, 256, tmp_path) == ("bf16", expected)
    assert calls == [256]


def test_a_corrupt_cache_entry_is_measured_again(monkeypatch, measured, tmp_path):
    monkeypatch.setattr(precision, "cpu_bf16_feature", lambda: "amx")
    calls = measured(2.0)
    precision.resolve_precision("auto", CPU, 128, tmp_path)
    (entry,) = (tmp_path / "precision").glob("*.json")
    entry.write_text("{not json")
    assert precision.resolve_precision("auto", CPU, 128, tmp_path)[0] == "bf16"
    assert len(calls) == 2 and json.loads(entry.read_text())["speedup"] == 2.0


def test_explicit_choices_and_their_limits():
    assert precision.resolve_precision("fp32", CPU)[0] == "fp32"
    assert precision.resolve_precision("bf16", CPU)[0] == "bf16"
    with pytest.raises(PosexpError, match=r"^train.precision=bf16 runs on cpu or cuda, not mps"):
        precision.resolve_precision("bf16", torch.device("mps"))
    with pytest.raises(PosexpError, match=r"^unknown train.precision 'fp16'; allowed: auto, bf16"):
        precision.resolve_precision("fp16", CPU)


def test_a_bad_precision_is_refused_where_the_config_is_built():
    with pytest.raises(PosexpError, match=r"^unknown train.precision 'half'"):
        run_config(*TINY, "train.precision=half")


def test_a_resume_keeps_the_precision_its_checkpoint_recorded(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_feature", lambda: None)
    assert precision.run_precision("auto", CPU, 64, None, "bf16", resuming=True)[0] == "bf16"
    # Nothing recorded: chosen as for a new run (fp32 on a CPU without bf16 support).
    assert precision.run_precision("auto", CPU, 64, None, None, resuming=True)[0] == "fp32"
    # Named on purpose, another precision wins (the log says why).
    assert precision.run_precision("fp32", CPU, 64, None, "bf16", resuming=True)[0] == "fp32"
    assert precision.recorded_precision({"precision": "bf16"}, CPU) == "bf16"
    assert precision.recorded_precision({}, torch.device("cuda")) == "fp32"


def test_the_cpu_feature_is_read_from_the_cpu(monkeypatch):
    precision.cpu_bf16_feature.cache_clear()
    monkeypatch.setattr(precision.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert precision.cpu_bf16_feature() is None
    precision.cpu_bf16_feature.cache_clear()
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert precision.cpu_bf16_feature() == "avx512_bf16"
    precision.cpu_bf16_feature.cache_clear()
    monkeypatch.setattr(precision.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(precision.platform, "system", lambda: "Linux")
    monkeypatch.setattr(precision, "_linux_cpu_flags", lambda: {"fp", "asimd", "bf16"})
    assert precision.cpu_bf16_feature() == "bf16"
    precision.cpu_bf16_feature.cache_clear()


def test_matmul_speedup_is_a_real_measurement():
    speedup, fp32 = precision.matmul_speedup(32, tokens=64, reps=3)
    assert math.isfinite(speedup) and speedup > 0 and fp32 in ("torch", "onednn")


def test_bf16_autocast_computes_the_loss_in_fp32_from_fp32_weights():
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=2, train_length=16))
    x = torch.randint(0, 50, (2, 16))
    with precision.autocast("bf16", CPU)():
        out = model(x, x)
    assert out["logits"].dtype == torch.bfloat16 and out["loss"].dtype == torch.float32
    out["loss"].backward()
    assert all(
        p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters()
    )


@pytest.mark.parametrize("chosen", ["bf16", "fp32"])
def test_a_resume_in_the_same_precision_is_bitwise_exact(tmp_path, cache, monkeypatch, chosen):
    cfg = run_config(*TINY, f"train.precision={chosen}", f"cache_dir={cache}")
    run_training(cfg, tmp_path / "full")
    train_killed_halfway(cfg, tmp_path / "cut", monkeypatch)
    run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    assert weights_sha256(tmp_path / "full") == weights_sha256(tmp_path / "cut")
    meta = json.loads((tmp_path / "cut" / "checkpoint" / "meta.json").read_text())
    assert meta["precision"] == chosen and meta["config"]["train"]["precision"] == chosen
    state = torch.load(tmp_path / "cut" / "checkpoint" / "state.pt", weights_only=True)
    moments = [s["exp_avg"] for s in state["optimizer"]["state"].values()]
    assert moments and all(m.dtype == torch.float32 for m in moments)  # AdamW's state stays fp32


def test_jobs_starting_together_measure_once_and_agree(tmp_path):
    # A parallel sweep's jobs resolve auto at the same moment: the first measures under the
    # cache's lock; the other waits for it and reads its verdict instead of timing alongside it.
    import threading

    first_measuring, release = threading.Event(), threading.Event()
    measured, verdicts = [], {}

    def slow_measure():
        measured.append("first")
        first_measuring.set()
        release.wait()
        return 1.7

    def job(name, measure):
        verdicts[name] = precision.cached_speedup(tmp_path, "kind/x", "key", measure)

    first = threading.Thread(target=job, args=("first", slow_measure))
    first.start()
    first_measuring.wait()
    second = threading.Thread(target=job, args=("second", lambda: measured.append("second") or 0.9))
    second.start()
    second.join(timeout=0.5)
    assert second.is_alive()  # waiting on the lock, not measuring beside the first
    release.set()
    first.join()
    second.join()
    assert measured == ["first"] and verdicts == {"first": 1.7, "second": 1.7}


def test_an_unwritable_cache_only_costs_the_measurement(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    calls = []
    for _ in range(2):
        assert (
            precision.cached_speedup(blocked, "kind/x", "key", lambda: calls.append(1) or 2.0)
            == 2.0
        )
    assert calls == [1, 1]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not JSON: "),
        ('{"key": "key", "speedup": true}', "expected a key and a positive, finite speedup"),
    ],
)
def test_a_damaged_cache_file_is_said_in_one_line_and_measured_again(
    tmp_path, caplog, content, reason
):
    calls = []
    measure = lambda: calls.append(1) or 2.0  # noqa: E731
    precision.cached_speedup(tmp_path, "kernels/x", "key", measure)
    (entry,) = (tmp_path / "kernels").glob("x_*.json")
    entry.write_text(content)
    with caplog.at_level("WARNING", logger="posexp"):
        assert precision.cached_speedup(tmp_path, "kernels/x", "key", measure) == 2.0
        assert precision.cached_speedup(tmp_path, "kernels/x", "key", measure) == 2.0
    said = [r.getMessage() for r in caplog.records if r.name == "posexp"]
    assert len(said) == 1 and len(calls) == 2  # measured again once, then read back
    assert said[0].startswith(f"{str(entry)!r} is unreadable ({reason}")
    assert said[0].endswith(f"; measuring again, its bytes kept in {entry}.bak")
    assert "\n" not in said[0]


@pytest.mark.parametrize("speedup", ["true", "1e999", "0", "-2.0"])
def test_a_cached_speedup_that_is_no_measurement_is_measured_again(tmp_path, speedup):
    calls = []
    measure = lambda: calls.append(1) or 2.0  # noqa: E731
    assert precision.cached_speedup(tmp_path, "kind/x", "key", measure) == 2.0
    (entry,) = (tmp_path / "kind").glob("x_*.json")
    entry.write_text(f'{{"key": "key", "speedup": {speedup}}}')
    assert precision.cached_speedup(tmp_path, "kind/x", "key", measure) == 2.0
    assert len(calls) == 2


@pytest.fixture
def mac(monkeypatch):
    """A Mac (no /proc/cpuinfo, ``platform.processor()`` "arm" for every Apple chip) whose
    ``sysctl`` answers from a dict (a name's output, or an exception to raise); the calls."""
    answers, calls = {}, []

    def run(args, **kwargs):
        calls.append((args, kwargs))
        answer = answers.get(args[-1], "")
        if isinstance(answer, BaseException):
            raise answer
        return subprocess.CompletedProcess(args, 0 if answer else 1, f"{answer}\n", "")

    monkeypatch.setattr(precision, "_cpuinfo", lambda: {})
    monkeypatch.setattr(precision.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(precision.platform, "processor", lambda: "arm")
    monkeypatch.setattr(precision.subprocess, "run", run)
    precision._sysctl.cache_clear()
    yield answers, calls
    precision._sysctl.cache_clear()  # no fake answer outlives the test


def test_a_mac_names_its_cpu_by_its_brand_string(mac):
    answers, calls = mac
    names = []
    for brand in ("Apple M1", "Apple M2 Pro"):  # both "arm" to platform.processor()
        answers["machdep.cpu.brand_string"] = brand
        precision._sysctl.cache_clear()  # a new process on another Mac
        names.append(precision.cpu_name())
    assert names == ["Apple M1", "Apple M2 Pro"]
    args, kwargs = calls[0]
    assert args == ["sysctl", "-n", "machdep.cpu.brand_string"] and kwargs["timeout"] <= 5
    assert precision.cpu_name() == "Apple M2 Pro" and len(calls) == 2  # asked once a process


@pytest.mark.parametrize(
    "answer",
    [
        "",  # sysctl failed (no such name): a non-zero exit, nothing printed
        FileNotFoundError("sysctl"),
        subprocess.TimeoutExpired(["sysctl"], 2),
    ],
)
def test_a_mac_whose_sysctl_fails_or_hangs_falls_back_to_the_processor(mac, answer):
    answers, _ = mac
    answers["machdep.cpu.brand_string"] = answer
    assert precision.cpu_name() == "arm"
