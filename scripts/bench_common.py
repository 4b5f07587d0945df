"""What the benchmarks share: the repository root, a child benchmark's command and environment,
a process's memory from /proc, and the header naming the machine every figure was measured on
(CPU model, generation flags, GPU), since a speed figure means nothing without its machine."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# CPU flags that decide which kernels win (bf16 and AVX-512 matmuls, AMX tiles), as /proc/cpuinfo
# names them; the header lists the ones this CPU has.
SPEED_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_bf16",
    "amx_tile",
)


def cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """The ``SPEED_FLAGS`` this CPU has (``cpuinfo``: /proc/cpuinfo's text; read here if None;
    an empty list where there is none, e.g. macOS)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    found = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.M)
    have = set(found.group(1).split()) if found else set()
    return [flag for flag in SPEED_FLAGS if flag in have]


def machine_header(device: str = "cpu") -> str:
    """One line naming the machine: CPU model (with family and model numbers), the speed flags
    it has, usable cores, torch's threads and version, and the GPU where ``device`` is one."""
    import torch

    from posexp.runtime.hardware import usable_cores
    from posexp.runtime.precision import cpu_name

    flags = ", ".join(cpu_flags()) or "none of " + ", ".join(SPEED_FLAGS[:2])
    line = (
        f"machine: {cpu_name()}; flags {flags}; {usable_cores()} cores, "
        f"{torch.get_num_threads()} threads; torch {torch.__version__}"
    )
    if device.startswith("cuda") and torch.cuda.is_available():
        line += f"; GPU {torch.cuda.get_device_name(torch.device(device))}"
    return line


def module_command(module: str, *args: str) -> list[str]:
    """``python -m scripts.<module> ARGS`` with this interpreter (a benchmark's fresh child)."""
    return [sys.executable, "-m", f"scripts.{module}", *args]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child run from ``ROOT``: the repository first on PYTHONPATH (so
    ``scripts`` and ``posexp`` import), then whatever it held (packages carried beside it)."""
    paths = (str(ROOT), os.environ.get("PYTHONPATH", ""))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in paths if x), **extra}


def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (``VmRSS``: resident now, ``VmHWM``: its peak)."""
    text = Path("/proc/self/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    if found is None:
        raise ValueError(f"/proc/self/status has no {field}")
    return int(found.group(1))
