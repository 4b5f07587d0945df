"""Training precision: fp32, or bf16 autocast where the hardware makes it faster.

``train.precision=auto`` picks bf16 on a CUDA GPU that supports it. On a CPU it first reads
whether the CPU computes bf16 natively (x86 ``avx512_bf16`` or AMX, Arm ``bf16``): without that,
bf16 is emulated and always slower. With it, the flag alone does not say bf16 is faster: on a
Xeon model 207 without AMX, bf16 matmuls measured 0.53-0.70x fp32's rate (2 cores), while
another CPU with the same flag ran a bf16 training step up to 1.8x faster. So ``auto`` times one bf16 and one fp32 matmul of the
model's width on this CPU, picks bf16 only if it is clearly faster, and caches the verdict per
CPU, torch version and thread count, so every run on one machine makes the same choice.

Autocast only changes the compute dtype of matmul-like ops: weights, gradients and AdamW's state
stay fp32, and the model computes its loss from fp32 logits.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posexp.config import PRECISIONS
from posexp.errors import PosexpError, UnreadableFile, choose
from posexp.store.files import exclusive_lock, keep_damaged, read_json, write_json_atomic

log = logging.getLogger("posexp")

Autocast = Callable[[], Any]
# bf16 must beat fp32 by this much for auto to take it: a CPU near parity gains nothing, and a
# verdict near the threshold could flip with noise.
BF16_MIN_SPEEDUP = 1.15


@functools.cache
def cpu_bf16_feature() -> str | None:
    """The CPU feature that gives native bf16 dot products (``amx``, ``avx512_bf16``, ``bf16``),
    or None; read from the CPU itself, never assumed from its model name."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i386", "i686"):
        cpu = getattr(torch, "cpu", None)
        if getattr(cpu, "_is_amx_tile_supported", lambda: False)():
            return "amx"
        if getattr(cpu, "_is_avx512_bf16_supported", lambda: False)():
            return "avx512_bf16"
        return None
    if machine in ("arm64", "aarch64"):
        if platform.system() == "Darwin":  # Apple M2 and later report FEAT_BF16
            return "bf16" if _sysctl("hw.optional.arm.FEAT_BF16") == "1" else None
        return "bf16" if "bf16" in _linux_cpu_flags() else None
    return None


@functools.cache  # asked for every cache key: a sysctl that hangs costs its timeout once
def _sysctl(name: str) -> str:
    """macOS's ``sysctl -n name``, stripped; "" where it fails, hangs or is missing."""
    try:
        done = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=2, check=False
        )
    except (OSError, subprocess.SubprocessError):  # SubprocessError: the timeout
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _cpuinfo() -> dict[str, str]:
    """The first CPU's /proc/cpuinfo fields, keys lowercased ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def _linux_cpu_flags() -> set[str]:
    """Every flag /proc/cpuinfo lists (x86 ``flags``, Arm ``Features``); empty elsewhere."""
    info = _cpuinfo()
    return set((info.get("flags") or info.get("features") or "").split())


def matmul_speedup(
    width: int, tokens: int | None = None, reps: int = 5, inner: int = 3
) -> tuple[float, str]:
    """Measured bf16 / fp32 rate of a (tokens x width) @ (width x 4·width) matmul, the shape of
    the model's MLP, and the fp32 kernel it was measured against (``torch`` or ``onednn``): the
    median over ``reps`` interleaved rounds, each timing ``inner`` products of each dtype, fp32
    by the faster of torch's BLAS and oneDNN (``train.linear``). Milliseconds-long single
    products were too noisy (thread wake-up) to decide on, so each timing spans several."""
    from posexp.kernels import onednn_linear

    if tokens is None:  # about a GFLOP per product, whatever the width
        tokens = max(512, min(8192, 2**27 // (width * width)))
    g = torch.Generator().manual_seed(0)  # the run's random stream is not touched
    a = torch.randn(tokens, width, generator=g)
    b = torch.randn(4 * width, width, generator=g)  # (out, in), as a linear layer keeps it
    kernels = {"torch": ("torch", a, b), "bf16": ("torch", a.bfloat16(), b.bfloat16())}
    if onednn_linear.available():
        kernels["onednn"] = ("onednn", a, b)
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for rep in range(reps + 1):
        for name, (kernel, x, y) in kernels.items():
            start = time.perf_counter()
            for _ in range(inner):
                onednn_linear.linear(x, y, kernel)
            if rep:  # the first round only warms up (oneDNN builds its kernels then)
                times[name].append(time.perf_counter() - start)
    median = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    fp32 = min((name for name in median if name != "bf16"), key=median.__getitem__)
    return median[fp32] / median["bf16"], fp32


# The /proc/cpuinfo numbers that tell CPUs apart where their names do not: one marketing name
# ("AMD EPYC") covers several x86 families, and an Arm part number means nothing without its
# implementer.
CPU_NUMBERS = (
    ("cpu family", "family"),
    ("model", "model"),
    ("cpu implementer", "implementer"),
    ("cpu part", "part"),
)


def cpu_name() -> str:
    """The CPU as the OS names it (x86 ``model name``) with its numbers (x86 family and model,
    Arm implementer and part): ``AMD EPYC family 26 model 2``; on macOS its brand string."""
    fields = _cpuinfo()
    named = [fields["model name"]] if fields.get("model name") else []
    named += [f"{label} {fields[key]}" for key, label in CPU_NUMBERS if fields.get(key)]
    if not named and platform.system() == "Darwin":
        # platform.processor() is "arm" for every Apple chip; the brand string names it
        # ("Apple M2 Pro"), and an Intel Mac's its model ("Intel(R) Core(TM) i9-9880H ...").
        named = [_sysctl("machdep.cpu.brand_string")]
    return " ".join(named).strip() or platform.processor() or platform.machine()


def cpu_bf16_speedup(width: int, cache_dir: Path | None) -> tuple[float, str | None]:
    """bf16's measured speedup over fp32 for this model width on this CPU and the fp32 kernel it
    was measured against, cached per CPU, torch version, thread count and width so that runs on
    one machine agree."""
    threads = torch.get_num_threads()
    # v4 records the fp32 kernel (v3 did not; v2 timed torch's BLAS alone; v1 single products).
    key = f"v4|{cpu_name()}|{cpu_bf16_feature()}|{torch.__version__}|{threads}|{width}"
    return cached_measurement(cache_dir, "precision/cpu_bf16", key, lambda: matmul_speedup(width))


def cached_speedup(
    cache_dir: Path | None, name: str, key: str, measure: Callable[[], float]
) -> float:
    """``measure()``'s speedup, cached as ``cached_measurement`` caches it."""
    return cached_measurement(cache_dir, name, key, lambda: (measure(), None))[0]


def cached_measurement(
    cache_dir: Path | None,
    name: str,
    key: str,
    measure: Callable[[], tuple[float, str | None]],
    field: str = "speedup",
) -> tuple[float, str | None]:
    """``measure()``'s speedup (or other positive measure, stored as ``field``) and what it was
    measured against (None: nothing to name), cached under ``cache_dir/name_<hash of key>.json``
    so that every run on one machine makes the same choice: jobs starting together (a parallel
    sweep) take turns under a lock, so one measures and the others read its verdict. A damaged
    cache is kept as .bak and measured again; where the cache cannot be written, it only costs
    the measurement."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = cache_dir / f"{name}_{digest}.json" if cache_dir else None
    with contextlib.ExitStack() as held:
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                held.enter_context(exclusive_lock(path.with_suffix(".lock")))
            except OSError:
                path = None  # an unwritable cache: measure, keep nothing
        if path is not None:
            try:
                cached = read_json(path, functools.partial(_cache_shape, field=field))
                if cached is not None and cached["key"] == key:
                    return float(cached[field]), cached.get("against")
            except UnreadableFile as e:
                backup = None
                with contextlib.suppress(OSError):
                    backup = keep_damaged(path)
                kept = f", its bytes kept in {backup}" if backup else ""
                log.warning("%s; measuring again%s", e, kept)
        speedup, against = measure()
        if path is not None:
            record = {"key": key, field: speedup} | ({"against": against} if against else {})
            with contextlib.suppress(OSError):
                write_json_atomic(path, record)
        return speedup, against


def _cache_shape(data: Any, field: str = "speedup") -> str | None:
    """A cached verdict: its key, a positive ``field``, and what it was measured against if any."""
    speedup = data.get(field) if isinstance(data, dict) else None
    ok = (
        isinstance(data, dict)
        and isinstance(data.get("key"), str)
        and isinstance(speedup, (int, float))
        and not isinstance(speedup, bool)  # JSON true is no measurement
        and 0 < speedup < math.inf
        and isinstance(data.get("against", ""), str)
    )
    return None if ok else f"expected a key and a positive, finite {field}"


def resolve_precision(
    choice: str, device: torch.device, width: int = 128, cache_dir: Path | None = None
) -> tuple[str, str]:
    """``fp32`` or ``bf16`` for this device, and why (for the run's log and provenance)."""
    choose("train.precision", choice, PRECISIONS)
    if choice == "fp32":
        return "fp32", "train.precision=fp32"
    if choice == "bf16":
        if device.type not in ("cuda", "cpu"):
            raise PosexpError(
                f"train.precision=bf16 runs on cpu or cuda, not {device.type}; "
                "allowed here: auto, fp32"
            )
        return "bf16", "train.precision=bf16"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.cuda.is_bf16_supported():
            return "bf16", f"auto: {name} supports bf16"
        return "fp32", f"auto: {name} has no bf16"
    if device.type != "cpu":
        return "fp32", f"auto: fp32 on {device.type}"
    feature = cpu_bf16_feature()
    if not feature:
        return "fp32", "auto: this CPU has no native bf16 (no avx512_bf16, AMX or Arm bf16)"
    speedup, against = cpu_bf16_speedup(width, cache_dir)
    threads = torch.get_num_threads()
    verdict = "bf16" if speedup >= BF16_MIN_SPEEDUP else "fp32"
    return verdict, (
        f"auto: this CPU has {feature}; on {threads} thread{'s' if threads != 1 else ''}, a bf16 "
        f"matmul of width {width} ran at {speedup:.2f}x fp32{_fp32_kernel(against)}: "
        f"{'at least' if verdict == 'bf16' else 'below'} the {BF16_MIN_SPEEDUP:.2f}x auto asks "
        f"of bf16"
    )


def _fp32_kernel(against: str | None) -> str:
    """The fp32 kernel bf16 was measured against, as the log names it (no parentheses: the log
    line wraps the reason in its own)."""
    from posexp.kernels import onednn_linear

    named = {"torch": "torch's BLAS", "onednn": "oneDNN"}.get(against or "")
    if named is None:
        return ""
    # Where oneDNN's op is missing, torch's BLAS was the only fp32 kernel timed.
    return f" on {named}" + (", the faster fp32 kernel here" if onednn_linear.available() else "")


def autocast(precision: str, device: torch.device) -> Autocast:
    """A factory of the context every forward pass runs in: bf16 autocast, or nothing."""
    if precision == "bf16" and device.type in ("cuda", "cpu"):
        return functools.partial(torch.autocast, device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def run_precision(
    choice: str,
    device: torch.device,
    width: int,
    cache_dir: Path | None,
    recorded: str | None = None,
    resuming: bool = False,
) -> tuple[str, str]:
    """A run's precision and why: a resume keeps the one its checkpoint recorded (an exact
    resume needs the same arithmetic), unless ``train.precision`` names another on purpose."""
    if resuming and choice == "auto" and recorded in ("fp32", "bf16"):
        return recorded, "the precision this run was trained in (resume)"
    return resolve_precision(choice, device, width, cache_dir)


def recorded_precision(meta: dict[str, Any], device: torch.device) -> str:
    """The precision a saved run trained in (its checkpoint's meta.json): evaluations measure the
    model in the arithmetic it was trained with; fp32, its parameters' own, where none is recorded
    (a checkpoint made by hand)."""
    recorded = meta.get("precision")
    return recorded if recorded in ("fp32", "bf16") else "fp32"
