"""PoSE against full-length fine-tuning on one step budget, through the real `posexp` commands.

    python scripts/pose_vs_full.py --parent outputs/runs/<task run> --out outputs/pose/<name>
    python scripts/pose_vs_full.py --parent <run> --method pi --factor 4 --steps 300 --seeds 0

For each seed, two fine-tunes of ``--parent`` (a synthetic-task run: data=niah_single,
data=ruler, data=passkey, ...) with the same extension method, factor and number of steps:

* ``full_s<seed>``: rows up to factor x L0 (``data.train_lengths`` raised by (factor - 1) x L0),
  trained at ``train.seq_len`` = factor x L0;
* ``pose_s<seed>``: the parent's rows (window L0) with PoSE positions up to factor x L0
  (``train.pose.enabled=true``; Zhu et al. 2023).

Each fine-tune runs as its own process, timed, with its peak resident memory read from the OS
(``wait4``). Most of that is the process itself (Python, torch, the data), so the script also
measures what one training step needs: a fresh process builds the parent's model, resets the
kernel's resident-set high-water mark (``/proc/self/clear_refs``), runs a forward and backward
pass on a batch of the variant's rows (the parent's batch size; PoSE: L0 tokens, full: the
target), and reports the high-water mark's growth (``step MiB``). Then ``posexp eval-extrapolate --method baked`` scores each at the parent's test
lengths, beside the parent zero-shot with the same method. ``<out>/pose_vs_full.md`` and
``.csv``: the score at each length (mean ± sample std over seeds, averaged over tasks and
depths), wall time and peak memory per variant. A rerun skips what finished.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from subprocess import Popen


def run(args: list[str], threads: int) -> tuple[float, float]:
    """`posexp ARGS` as its own process: (seconds, peak resident MiB); stops on failure."""
    print("$ posexp " + shlex.join(args), flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    proc = Popen([sys.executable, "-m", "posexp", *args], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"stopped: `posexp {shlex.join(args)}` exited {proc.returncode}")
    return time.monotonic() - start, usage.ru_maxrss / 1024  # Linux: kilobytes


def step_memory_child(run_dir: str, tokens: int, batch: int) -> None:
    """In a fresh process: print the MiB one training step on (batch, tokens) rows adds to the
    resident-set high-water mark of a process holding the run's model."""
    import torch
    from bench_eval import _status_kib as kib  # this script's folder is on sys.path here

    from posexp.rundir import RunDir

    model = RunDir(Path(run_dir)).load_model("cpu").train()
    x = torch.randint(0, model.cfg.vocab_size, (batch, tokens))
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark starts again here
    base = kib("VmRSS")
    model(x, x)["loss"].backward()
    print(json.dumps({"step_mib": (kib("VmHWM") - base) / 1024}))


def step_memory(run_dir: Path, tokens: int, batch: int, threads: int) -> float:
    """``step_memory_child`` in its own interpreter; its MiB."""
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, __file__, "--step-memory", str(run_dir), str(tokens), str(batch)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["step_mib"])


def finished(run_dir: Path) -> bool:
    """True when ``run_dir`` completed training."""
    from posexp.rundir import RunDir

    return RunDir(run_dir).status() == "completed"


def scores(run_dir: Path, method: str | None, field: str | None = None) -> dict[int, float]:
    """Length -> ``field`` (default: the headline metric) of ``run_dir``'s records of
    ``method`` applied at evaluation (None: the extension the run was fine-tuned with, baked
    in), averaged over tasks and depths."""
    records = json.loads((run_dir / "eval" / "extrapolate.json").read_text())
    by_length: dict[int, list[float]] = {}
    for r in records:
        value = r.get(field or r.get("metric") or "ppl")
        wanted = r["baked"] if method is None else r["method"] == method and not r["baked"]
        if wanted and value is not None:
            by_length.setdefault(int(r["length"]), []).append(float(value))
    return {n: sum(v) / len(v) for n, v in sorted(by_length.items())}


def spread(values: list[float], digits: int) -> str:
    """mean ± sample std (just the mean for one value)."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main() -> None:
    """Parse options, fine-tune both ways per seed, evaluate, write the comparison."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parent", type=Path, help="the synthetic-task run to extend (required)")
    p.add_argument("--out", type=Path, help="folder for the fine-tunes (required)")
    p.add_argument("--method", default="yarn", help="extension method baked into both")
    p.add_argument("--factor", type=float, default=2.0, help="target length / L0")
    p.add_argument("--steps", type=int, default=500, help="fine-tune steps of each")
    p.add_argument("--lr", type=float, default=1e-3, help="fine-tune learning rate")
    p.add_argument("--seeds", default="0,1,2", help="fine-tune seeds")
    p.add_argument("--threads", type=int, default=2, help="torch threads per command")
    p.add_argument("--lengths", default=None, help="sizes to score (default: parent's)")
    p.add_argument("--step-memory", nargs=3, help=argparse.SUPPRESS)  # RUN TOKENS BATCH
    a = p.parse_args()
    if a.step_memory:
        run_dir, tokens, batch = a.step_memory
        step_memory_child(run_dir, int(tokens), int(batch))
        return
    if a.parent is None or a.out is None:
        p.error("--parent and --out are required")

    from posexp.data.synthetic import make_data
    from posexp.rundir import RunDir

    cfg = RunDir.open_run(a.parent, "--parent").config()
    data = make_data(**cfg.data.params)
    l0, (lo, hi) = data.longest_train_row(), data.train_lengths
    target = round(l0 * a.factor)
    lengths = a.lengths or ",".join(str(n) for n in data.test_lengths)
    common = [f"extension={a.method}", f"extension.factor={a.factor:g}"]
    common += [f"train.max_steps={a.steps}", f"train.lr={a.lr:g}", f"train.threads={a.threads}"]
    variants = {
        "full": [f"data.train_lengths=[{lo},{hi + target - l0}]"],
        "pose": ["train.pose.enabled=true"],
    }
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    cost: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    seeds = [int(s) for s in a.seeds.split(",")]
    for seed in seeds:
        for name, extra in variants.items():
            run_dir = a.out / f"{name}_s{seed}"
            stats = run_dir / "cost.json"
            if not (finished(run_dir) and stats.exists()):
                args = ["finetune", "--run", str(a.parent), *common, *extra, f"seed={seed}"]
                seconds, mib = run([*args, f"hydra.run.dir={run_dir}"], a.threads)
                stats.write_text(json.dumps({"seconds": seconds, "peak_mib": mib}))
            c = json.loads(stats.read_text())
            cost[name].append((c["seconds"], c["peak_mib"]))
            run(
                [
                    "eval-extrapolate",
                    "--run",
                    str(run_dir),
                    "--method",
                    "baked",
                    "--lengths",
                    lengths,
                ],
                a.threads,
            )
            rows.append((name, seed, scores(run_dir, None), scores(run_dir, None, "ppl")))
    run(
        ["eval-extrapolate", "--run", str(a.parent), "--method", a.method, "--lengths", lengths],
        a.threads,
    )
    zero_shot, zero_ppl = scores(a.parent, a.method), scores(a.parent, a.method, "ppl")

    # One training step's memory on each variant's rows (the parent's weights: same shapes).
    batch = cfg.train.batch_size
    step_mib = {
        "full": step_memory(a.parent, target, batch, a.threads),
        "pose": step_memory(a.parent, l0, batch, a.threads),
    }
    sizes = sorted({n for _, _, s, _ in rows for n in s})
    context = {n: data.task.row_tokens(n) for n in sizes}
    at = [f"{context[n]:,} ({context[n] / l0:.3g}×)" for n in sizes]
    header = ["variant", "rows trained (tokens)", *at, *(f"answer ppl, {x}" for x in at)]
    header += ["time (s)", "peak memory (MiB)", f"step MiB (batch {batch})"]
    table = [
        [
            "zero-shot (no fine-tune)",
            "—",
            *(f"{zero_shot.get(n, float('nan')):.2f}" for n in sizes),
            *(f"{zero_ppl.get(n, float('nan')):.2f}" for n in sizes),
            "—",
            "—",
            "—",
        ]
    ]
    widths = {"full": f"up to {target:,}", "pose": f"up to {l0:,}, positions to {target:,}"}
    for name in variants:
        per_seed = [s for v, _, s, _ in rows if v == name]
        ppls = [q for v, _, _, q in rows if v == name]
        cells = [spread([s[n] for s in per_seed if n in s], 2) for n in sizes]
        cells += [spread([q[n] for q in ppls if n in q], 2) for n in sizes]
        secs, mibs = zip(*cost[name], strict=True)
        table.append(
            [
                name,
                widths[name],
                *cells,
                spread(list(secs), 0),
                spread(list(mibs), 0),
                f"{step_mib[name]:.0f}",
            ]
        )
    with open(a.out / "pose_vs_full.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", *(context[n] for n in sizes)])
        w.writerows([name, seed, *(s.get(n) for n in sizes)] for name, seed, s, _ in rows)
    lines = [
        f"{a.method} at factor {a.factor:g} (L0 = {l0}, target {target}), {a.steps} steps each, "
        f"seeds {a.seeds} (n = {len(seeds)}); score (string_match_all) and the answer "
        f"tokens' perplexity, averaged over tasks and depths; mean ± sample std over seeds.",
        "",
        "| " + " | ".join(header) + " |",
        "|---|---|" + "---:|" * (len(header) - 2),
        *("| " + " | ".join(r) + " |" for r in table),
    ]
    (a.out / "pose_vs_full.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
