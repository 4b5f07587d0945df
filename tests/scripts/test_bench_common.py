"""scripts/bench_common.py: the machine header names the CPU and its speed flags, children run
as modules from the repository root."""

from __future__ import annotations

import sys

from scripts import bench_common

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx512_vnni
"""
ZEN3 = ZEN4.replace(" avx512f avx512_bf16 avx512_vnni", "")


def test_the_flags_that_decide_kernels_are_listed_in_a_fixed_order():
    assert bench_common.cpu_flags(ZEN4) == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert bench_common.cpu_flags(ZEN3) == ["avx2", "fma"]
    assert bench_common.cpu_flags("no flags line") == []


def test_the_header_names_this_machines_cpu_and_flags(monkeypatch):
    from posexp.runtime import precision

    monkeypatch.setattr(
        precision,
        "_cpuinfo",
        lambda: {"model name": "AMD EPYC 9R14", "cpu family": "25", "model": "17"},
    )
    monkeypatch.setattr(bench_common, "cpu_flags", lambda: ["avx2", "avx512_bf16"])
    line = bench_common.machine_header()
    assert line.startswith("machine: AMD EPYC 9R14 family 25 model 17; flags avx2, avx512_bf16;")
    assert "GPU" not in line  # a CPU run names no GPU


def test_a_child_is_this_interpreter_running_a_scripts_module_with_the_root_on_its_path():
    assert bench_common.module_command("bench_eval", "--child", "rope", "64") == [
        sys.executable,
        "-m",
        "scripts.bench_eval",
        "--child",
        "rope",
        "64",
    ]
    env = bench_common.child_env(OMP_NUM_THREADS="1")
    assert env["PYTHONPATH"].split(":")[0] == str(bench_common.ROOT)
    assert env["OMP_NUM_THREADS"] == "1"
    assert bench_common.status_kib("VmRSS") > 0
