"""Passkey retrieval end to end (experiment=passkey), through the real `posexp` commands.

    python -m scripts.passkey                      # seeds 0, 1, 2 in outputs/passkey/<time>/seed<N>
    python -m scripts.passkey --seeds 0 --methods pi,yarn --factor 4 --finetune-steps 300

1. ``lm``: a RoPE language model on the KJV Bible at L0 = 128 tokens;
2. ``passkey``: that model trained further on passkey rows of at most L0 tokens
   (``posexp train experiment=passkey parent=<lm>``), trained to a criterion: after
   ``--passkey-steps`` it is scored at L0 at every key depth, and while the worst depth is below
   ``--retrieval-target`` it trains ``--extend-steps`` more (``resume=``), up to
   ``--passkey-max-steps`` (the step at which a seed learns retrieval varies: 4,000 to 12,000);
3. zero-shot: ``posexp eval-extrapolate`` of the passkey run at 1x, 2x, 4x and 8x L0 with
   none / pi / ntk / yarn and the training-free self_extend / rerope / logn (the preset's
   ``extrapolate.method``), at key depths 0, 0.5 and 1;
4. ``ft_<method>``: a short ``posexp finetune`` of the passkey run with each method at
   ``--factor`` on passkey rows from the shortest up to factor x L0 (``none``: the same
   fine-tune without a method, the baseline), then its evaluation with the baked-in method;
5. ``posexp report``: the length x method table over the seeds (mean ± std, n) and the
   depth x length heat maps.

Steps 1-4 run for each seed in ``<out>/seed<N>/``; the report covers them all. Every step is a
plain command (printed before it runs), so any of them can be rerun by hand, and rerunning the
script skips the runs that finished and the cells already measured (a stopped script picks up
where it stopped). ``--methods`` takes method specs: ``none,yarn,yarn(beta_fast=8)`` fine-tunes
YaRN twice, the second in ``ft_yarn_beta_fast=8``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

L0 = 128  # training length of the language model and the passkey rows (configs/experiment/passkey.yaml)


def finished(run: Path) -> bool:
    """True when ``run`` completed training."""
    from posexp.store.rundir import RunDir

    return RunDir(run).status() == "completed"


def run_dir_name(spec: str) -> str:
    """A fine-tune's folder for a method spec: ``yarn(beta_fast=8)`` -> ``ft_yarn_beta_fast=8``."""
    return "ft_" + re.sub(r"[^\w.=-]+", "_", spec).strip("_")


def run_posexp(args: tuple[str, ...]) -> int:
    """`posexp ARGS` as its own process; its exit status."""
    return subprocess.run([sys.executable, "-m", "posexp", *args]).returncode


def posexp(*args: str) -> None:
    """Run one posexp command, echoing it; stop the script if it fails."""
    print("$ posexp " + shlex.join(args), flush=True)
    if run_posexp(args):
        sys.exit(f"stopped: `posexp {shlex.join(args)}` failed")


def main() -> None:
    """Parse options and run the five steps."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the runs (default outputs/passkey/<time>)",
    )
    p.add_argument("--lm-steps", type=int, default=1000, help="steps of the KJV language model")
    p.add_argument("--passkey-steps", type=int, default=4000, help="steps on passkey rows at L0")
    p.add_argument(
        "--retrieval-target",
        type=float,
        default=0.9,
        help="accuracy at L0 every key depth must reach before the passkey stage stops",
    )
    p.add_argument("--extend-steps", type=int, default=2000, help="steps per extension")
    p.add_argument(
        "--passkey-max-steps", type=int, default=16000, help="no extension past this step"
    )
    p.add_argument("--finetune-steps", type=int, default=600, help="steps of each long fine-tune")
    p.add_argument(
        "--finetune-lr",
        type=float,
        default=1e-4,
        help="peak learning rate of each fine-tune (min lr a tenth of it)",
    )
    p.add_argument("--factor", type=int, default=2, help="fine-tune length as a multiple of L0")
    p.add_argument(
        "--methods",
        default="none,pi,ntk,yarn",
        help="method specs to fine-tune with, e.g. none,yarn,'yarn(beta_fast=8)'",
    )
    p.add_argument("--model", default="small", help="model size (configs/model)")
    p.add_argument("--examples", type=int, default=50, help="test instances per length and depth")
    p.add_argument(
        "--seeds",
        default="0,1,2",
        help="comma-separated seeds, one full pipeline each (the test instances stay the same)",
    )
    p.add_argument("--device", default="auto")
    a = p.parse_args()
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds takes comma-separated integers, got {a.seeds!r}")
    if not seeds:
        p.error("--seeds needs at least one seed")
    from posexp.errors import PosexpError
    from posexp.extension.spec import parse_specs

    try:  # checked before anything trains: a bad spec is one line
        a.specs = parse_specs(a.methods, "--methods", baked=False) or []
    except PosexpError as e:
        p.error(str(e))
    out = a.out or Path("outputs/passkey") / time.strftime("%Y-%m-%d_%H-%M-%S")
    for seed in seeds:
        pipeline(a, seed, out / f"seed{seed}")
    posexp("report", str(out), "--no-eval", "--device", a.device)


def pipeline(a: argparse.Namespace, seed: int, out: Path) -> None:
    """Steps 1-4 for one seed in ``out``, skipping what already finished."""
    common = [f"device={a.device}", f"model={a.model}", f"seed={seed}"]
    train_once(
        out / "lm",
        "train",
        "data=kjv",
        "pe=rope",
        f"train.seq_len={L0}",
        "train.batch_size=32",
        f"train.max_steps={a.lm_steps}",
        "train.eval_interval=250",
        "train.checkpoint_interval=500",
        *common,
    )
    train_once(
        out / "passkey",
        "train",
        "experiment=passkey",
        f"parent={out / 'lm'}",
        f"train.max_steps={a.passkey_steps}",
        # The preset's 100 warmup steps, or a tenth of a shorter run (a warmup must end).
        f"train.warmup_steps={min(100, a.passkey_steps // 10)}",
        f"data.test_examples={a.examples}",
        *common,
    )
    train_to_criterion(a, out)
    evaluate(out / "passkey", "--device", a.device)
    # A gentle fine-tune by default (lr 1e-4, batch 8, 600 steps): enough for no method, NTK and
    # YaRN; PI moves the model furthest and needs lr 1e-3 or 1,800 steps (docs/results/passkey.md).
    # Rows from the shortest passkey size (76 prompt tokens) up to factor x L0 keep the skill in view.
    longest = a.factor * L0
    for spec in a.specs:
        run = out / run_dir_name(spec.label)
        extension = [f"extension={spec.label}"]
        if spec.name != "none" and spec.factor is None:
            extension.append(f"extension.factor={a.factor}")
        train_once(
            run,
            "finetune",
            "--run",
            str(out / "passkey"),
            *extension,
            f"data.train_lengths=[76,{longest - 6}]",
            f"train.seq_len={longest}",
            "train.batch_size=8",
            f"train.lr={a.finetune_lr:g}",
            f"train.min_lr={a.finetune_lr / 10:g}",
            f"train.warmup_steps={min(50, a.finetune_steps // 10)}",
            f"train.max_steps={a.finetune_steps}",
            "train.eval_interval=100",
            f"train.checkpoint_interval={a.finetune_steps}",
            *common,
        )
        evaluate(run, "--method", "none" if spec.name == "none" else "baked", "--device", a.device)


def train_to_criterion(a: argparse.Namespace, out: Path) -> None:
    """Extend the passkey run until every key depth reaches the target at L0 (or the cap)."""
    import json

    run = out / "passkey"
    while True:
        step = json.loads((run / "results.json").read_text())["step"]
        worst = l0_retrieval(run, a.device)
        print(f"# {run}: step {step}, worst depth at L0 {worst:.2f}", flush=True)
        if worst >= a.retrieval_target or step >= a.passkey_max_steps:
            return
        stale = sorted(p.name for p in out.glob("ft_*"))
        if stale:
            sys.exit(
                f"stopped: {run} needs more steps, but {', '.join(stale)} were fine-tuned from "
                "its current weights; move them aside and rerun"
            )
        target = min(step + a.extend_steps, a.passkey_max_steps)
        posexp("train", f"resume={run}", f"train.max_steps={target}")


def l0_retrieval(run: Path, device: str) -> float:
    """The lowest accuracy over key depths at L0 (no method) of the run's current weights
    (scored unless already measured on them)."""
    import csv

    evaluate(run, "--lengths", str(L0 - 6), "--method", "none", "--device", device)
    rows = csv.DictReader((run / "eval" / "extrapolate.csv").open())
    scores = [
        float(r["accuracy"]) for r in rows if r["method"] == "none" and int(r["length"]) == L0 - 6
    ]
    return min(scores)


def train_once(run: Path, *args: str) -> None:
    """Train ``run`` with ``args``; resume it if a checkpoint is there; skip it if completed."""
    from posexp.store.rundir import RunDir

    if finished(run):
        print(f"# {run}: completed, skipped", flush=True)
    elif RunDir(run).has_checkpoint():
        posexp("train", f"resume={run}")
    else:
        posexp(*args, f"hydra.run.dir={run}")


def evaluate(run: Path, *args: str) -> None:
    """``posexp eval-extrapolate`` of ``run``: it scores only the cells not yet measured on the
    run's current weights (nothing at all on a rerun of the script)."""
    posexp("eval-extrapolate", "--run", str(run), *args)


if __name__ == "__main__":
    main()
