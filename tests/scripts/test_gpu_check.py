"""scripts/gpu/check.py --smoke: every part runs end to end at toy size on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CHECK = [sys.executable, "-m", "scripts.gpu.check"]


# The parts a CPU can check here. torchrun (a DDP run killed after its middle checkpoint and
# resumed) and deterministic (the same in one process, with train.deterministic=true) train as
# tests/runtime/test_distributed.py and test_deterministic.py do, which hold their resumes to
# the same weights; the parts' own few lines run on a GPU only (45 s of CPU here, in CI).
SMOKE_PARTS = ["train", "eval", "flex", "packing", "ablation"]


def test_smoke_run_writes_every_part(tmp_path):
    # --deterministic: the ablation's jobs run with train.deterministic=true, and say so.
    args = ["--smoke", "--deterministic", "--parts", ",".join(SMOKE_PARTS), "--out", str(tmp_path)]
    proc = subprocess.run(
        [*CHECK, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads((tmp_path / "report.json").read_text())
    parts = report["parts"]
    failed = {k: v.get("error") for k, v in parts.items() if v["status"] != "ok"}
    assert proc.returncode == 0 and not failed, (failed, proc.stderr[-2000:])
    assert list(parts) == SMOKE_PARTS
    # smoke: one bias PE, FoX's model, and FoX's gate kernel alone
    bias_row, fox_row, gate_row = parts["flex"]["result"]["rows"]
    assert (bias_row["pe"], fox_row["pe"], gate_row["pe"]) == ("alibi", "fox", "fox (gate kernel)")
    # CPU: forward only (no flex backward there), so no step times and no gradient check
    for row in (bias_row, fox_row):
        assert row["logits_max_abs_diff"] < 1e-4 and row["generation_equal"], row
        assert not row["flex_trains"] and "step_ms_flex" not in row, row
    assert fox_row["gate_checked"] is False and "flex_off" not in fox_row
    assert gate_row["out_max_abs_diff"] < 1e-4 and "grad_max_abs_diff" not in gate_row, gate_row
    train = parts["train"]["result"]
    assert train["tokens_per_s"] > 0 and 0 < train["mfu"] < 1.5
    assert "flash_attention_for_cpu" in train["sdpa_kernel"] or "math" in train["sdpa_kernel"]
    assert {(r["pe"], r["length"]) for r in parts["eval"]["result"]["rows"]} == {
        ("rope", 64),
        ("alibi:flex", 64),
    }
    packing = parts["packing"]["result"]["rows"]
    assert [r["jobs"] for r in packing] == [1, 2] and packing[0]["vs_one_job"] == 1.0
    ablation = parts["ablation"]["result"]
    # Every row x seed x task the plan lists ran, with the steps it gave them.
    planned = {(j["task"], j["heads"], j["seed"], j["steps"]) for j in ablation["plan"]["jobs"]}
    ran = {(r["task"], r["heads"], r["seed"], r["steps"]) for r in ablation["rows"]}
    assert planned == ran == {(t, h, 0, 4) for t in ("lm", "mt") for h in (1, 2)}
    assert ablation["completed"] == ablation["expected"] == 4 and not ablation["cut_at_deadline"]
    assert all(r["status"] == "completed" and r["ppl"] > 1 for r in ablation["rows"])
    assert all(r["bleu"] is not None for r in ablation["rows"] if r["task"] == "mt")
    assert ablation["deterministic"] is True
    assert all(r["deterministic"] is True for r in ablation["rows"])  # from each provenance
    assert [(x["task"], x["heads"]) for x in ablation["table"]] == [
        ("lm", 1),
        ("lm", 2),
        ("mt", 1),
        ("mt", 2),
    ]
    for task in ("lm", "mt"):  # posexp report's figures, next to gpu_check's report
        assert (tmp_path / "head_ablation" / task / "report_heads.png").is_file()
    md = (tmp_path / "report.md").read_text()
    assert "SMOKE RUN" in md and md.count("## ") == len(SMOKE_PARTS) and "FAILED" not in md
    assert "train.deterministic=true. 4 of 4 jobs" in md
    assert "Head ablation plan: 4 jobs (heads 1, 2 x seeds 0 x lm, mt) on CPU" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_the_full_check_refuses_with_one_line():
    proc = subprocess.run(CHECK, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: no CUDA GPU here; run with --smoke for the CPU check"
