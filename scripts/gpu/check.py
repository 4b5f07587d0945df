"""Every GPU claim of the docs (docs/performance.md), measured in one command; writes outputs/gpu_check/report.{md,json}.

    python -m scripts.gpu.check --parts train,eval,flex,packing,torchrun,deterministic  # ~5 min
    python -m scripts.gpu.check --parts ablation   # the head ablation: one 9-minute call, H200
    python -m scripts.gpu.check --parts flex,ablation --flex-pes fox --budget 540  # FoX, then it
    python -m scripts.gpu.check                    # all of it: about 16 minutes
    python -m scripts.gpu.check --smoke            # every part at toy size on the CPU (CI)
    python -m scripts.gpu.check --dry-run          # the ablation's plan only, nothing trained

Parts, in order (each one's failure is recorded and the others still run; exit 1 if any failed):

1. train: tokens/s and MFU of model=base (d_model 768, 12 layers, 12 heads, seq 1024) with bf16
   autocast, fused AdamW and torch.compile, against the bf16 matmul rate measured in the same
   run; the SDPA kernel that ran, read from the profiler (cuDNN's on an H200 with torch 2.11).
2. eval: `eval-extrapolate`'s forward pass (scripts/bench_eval.py, one fresh process per point):
   tokens/s and peak GPU memory at 4096 and 16384 tokens for rope, alibi and t5.
   The bias PEs run through FlexAttention and through the chunked SDPA path, side by side.
3. flex: FlexAttention's logits, gradients and cached generation against SDPA with an explicit
   bias, for every bias PE (scripts/flex_parity.py).
4. packing: N tiny jobs sharing one GPU through the joblib launcher with
   placement.jobs_per_gpu=N (N = 1, 4, 8): aggregate tokens/s against one job.
5. torchrun: `torchrun --nproc_per_node=<GPUs>` training (NCCL with 2+ GPUs), killed after its
   middle checkpoint and resumed, against the same run uninterrupted.
6. deterministic: train.deterministic=true on the ablation's model, killed after its middle
   checkpoint and resumed, against the same run uninterrupted (bitwise equal?), and its
   tokens/s against train.deterministic=false: what bit-for-bit reproducibility costs.
7. ablation: Vaswani et al.'s Table 3 rows (A), heads 1, 4, 16, 32 at d_model 512 x seeds 0, 1,
   2 x two tasks (a language model, PPL; translation, BLEU and PPL): every job kind's first
   steps measured, a plan (scripts/gpu/plan.py) of how many jobs share the GPU and how many
   steps each gets in the time left, the jobs run packed, `posexp report` per task with its
   figures, and the realized times beside the plan's (scripts/gpu/ablation.py).

--dry-run prints the ablation's plan and writes OUT/plan.json without training: from a GPU's
own measurement where there is one, from a simulated H200 where not (or --measured FILE);
with --smoke it measures toy steps on the CPU. Ratios are always against a baseline measured
in the same run. With --smoke every part runs at toy size on the CPU (gloo for torchrun), so
the script cannot rot unseen.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from posexp.store.files import write_json_atomic, write_text_atomic
from scripts.gpu.ablation import REPORT_RESERVE_S, assumptions, measure, part_ablation
from scripts.gpu.common import FULL, ROOT, SMOKE, Check
from scripts.gpu.parts import (
    part_deterministic,
    part_eval,
    part_flex,
    part_packing,
    part_torchrun,
    part_train,
)
from scripts.gpu.plan import Measurement, PlanError, plan, render_plan, simulated_h200

PARTS = {
    "train": part_train,
    "eval": part_eval,
    "flex": part_flex,
    "packing": part_packing,
    "torchrun": part_torchrun,
    "deterministic": part_deterministic,
    "ablation": part_ablation,
}
# Seconds on a GPU: the other parts together, and the ablation (a 9-minute call less the
# interpreter's start and a minute's slack).
OTHER_PARTS_S, ABLATION_S = 420.0, 480.0


def default_budget(chosen: list[str], smoke: bool) -> float:
    """Seconds for the chosen parts: 1800 for --smoke, whose parts share a CPU with whatever
    else runs; on a GPU, OTHER_PARTS_S for the others and ABLATION_S for the ablation."""
    if smoke:
        return 1800.0
    return (OTHER_PARTS_S if set(chosen) - {"ablation"} else 0.0) + (
        ABLATION_S if "ablation" in chosen else 0.0
    )


def dry_run(check: Check, measured: str | None) -> int:
    """Print the ablation's plan (and write OUT/plan.json, plan.md); train nothing."""
    import torch

    s = check.sizes
    if measured == "simulated":
        m = simulated_h200(list(s.ablation_heads))
    elif measured:
        path = Path(measured)
        if not path.is_file():
            raise PlanError(f"--measured {measured!r}: no such file; or --measured simulated")
        try:
            m = Measurement.from_dict(json.loads(path.read_text()))
        except json.JSONDecodeError as e:
            raise PlanError(f"--measured {measured!r}: not JSON ({e})") from None
    elif check.smoke or torch.cuda.is_available():
        m, _ = measure(check)  # this machine's own first steps
    else:
        m = simulated_h200(list(s.ablation_heads))
    # A measurement made now has spent its time already; a given one says what it would.
    spent = 0.0 if not (measured or m.simulated) else m.prep_s
    budget = check.left() - spent - REPORT_RESERVE_S
    p = plan(
        m, budget, list(s.ablation_heads), list(s.ablation_seeds), assumptions(check, check.assume)
    )
    text = render_plan(p)
    print(text, end="")
    check.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(check.out / "plan.json", p.to_dict())
    write_text_atomic(check.out / "plan.md", text)
    return 0


def parse_args() -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--smoke", action="store_true", help="toy sizes on the CPU (for CI)")
    p.add_argument("--out", type=Path, default=ROOT / "outputs" / "gpu_check")
    p.add_argument(
        "--work", type=Path, default=None, help="scratch dir for the parts' runs (default OUT/work)"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds for all chosen parts together (default on a GPU: {OTHER_PARTS_S:.0f} for "
        f"the parts other than the ablation, plus {ABLATION_S:.0f} for the ablation; 1800 for "
        "--smoke, whose parts share a CPU with whatever else runs)",
    )
    p.add_argument("--parts", default=",".join(PARTS), help=f"subset of {','.join(PARTS)}")
    p.add_argument(
        "--dry-run", action="store_true", help="print the ablation's plan only; train nothing"
    )
    p.add_argument(
        "--measured",
        default=None,
        help="with --dry-run: a measurement JSON (a report.json's ablation plan.measurement), "
        "or 'simulated' for the built-in H200 estimate",
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="the ablation's jobs with train.deterministic=true (recorded in the report)",
    )
    p.add_argument(
        "--flex-pes",
        default=None,
        help="the flex part's encodings, comma-separated (default: every one with a kernel)",
    )
    p.add_argument(
        "--assume",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one of the ablation plan's assumptions (scripts/gpu/plan.py Assumptions)",
    )
    return p.parse_args()


def main() -> int:
    """Run the parts in order within the time budget; write the report after each."""
    import torch

    args = parse_args()
    chosen = [x for x in args.parts.split(",") if x]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        print(f"error: unknown part {unknown[0]!r}; allowed: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if args.measured and not args.dry_run:
        print("error: --measured is for --dry-run only", file=sys.stderr)
        return 2
    if not args.smoke and not args.dry_run and not torch.cuda.is_available():
        print("error: no CUDA GPU here; run with --smoke for the CPU check", file=sys.stderr)
        return 2
    budget = args.budget
    if budget is None:
        budget = default_budget(["ablation"] if args.dry_run else chosen, args.smoke)
    check = Check(
        SMOKE if args.smoke else FULL, args.out, budget, args.smoke, args.work, args.deterministic
    )
    check.assume = args.assume
    check.flex_pes = tuple(args.flex_pes.split(",")) if args.flex_pes else None
    if args.smoke:
        torch.set_num_threads(1)
    if args.dry_run:
        try:
            return dry_run(check, args.measured)
        except PlanError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    failed = 0
    for name in chosen:
        start = time.perf_counter()
        print(f"[gpu_check] {name} …", file=sys.stderr, flush=True)
        try:
            result = PARTS[name](check)
            entry = {"status": "failed" if "incomplete" in result else "ok", "result": result}
            if "incomplete" in result:
                entry["error"] = result["incomplete"]
        except Exception as e:  # one part's failure must not lose the others' figures
            entry = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        failed += entry["status"] != "ok"
        entry["seconds"] = time.perf_counter() - start
        check.report["parts"][name] = entry
        check.save()
        print(
            f"[gpu_check] {name}: {entry['status']} in {entry['seconds']:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    print(f"report: {args.out / 'report.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
