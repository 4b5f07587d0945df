"""Translation decoding speed: prompts batched across lengths (what `posexp` does) against
batches that hold one prompt length each, alone and with several processes sharing the device.

    python -m scripts.bench_decode                                   # CPU, a small model
    python -m scripts.bench_decode --device cuda --procs 1,12        # the head ablation's model
    python -m scripts.bench_decode --smoke                           # toy size (the tests)

What is measured: `generate_ids` (the code behind `val/bleu` and the test BLEU) on an untrained
model of the head ablation's shape (d_model 512, 6 layers, BPE 4096 by default), beam 4, batch
64, for ``--prompts`` prompts whose lengths follow KJV verse sources in BPE tokens (log-normal,
median 30, cut to 4..120; seeded). An untrained model rarely ends early, so each prompt decodes
to ``--new`` tokens: the same work in both modes, and more than a trained model does. Modes:

* ``ragged``: sorted by length, batches of 64 with rows of different lengths together;
* ``by_length``: one call per distinct length, so no batch mixes lengths (posexp before this
  script: a batch then holds a few prompts, and the device takes a step per token per batch).

With ``--procs N`` each point runs in N processes started together (the head ablation packs
many jobs on one GPU): seconds are each process's own, the mean over processes is reported.
Both modes run in every process, alternating, ``--rounds`` times; the ratio is by_length over
ragged seconds, measured in the same processes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scripts.bench_common import ROOT, machine_header, module_command


def prompt_lengths(n: int, seed: int, cap: int) -> list[int]:
    """``n`` prompt lengths like BPE-4096 KJV verse sources: log-normal around 30 tokens."""
    import random

    rng = random.Random(seed)
    return [min(cap, max(4, round(rng.lognormvariate(3.4, 0.45)))) for _ in range(n)]


def worker(args: argparse.Namespace) -> dict[str, float]:
    """Time both modes in this process; the seconds of each, and the decoding steps."""
    import contextlib

    import torch

    from posexp.model import GPT, ModelConfig
    from posexp.model.generation import generate_ids

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = ModelConfig(
        vocab_size=args.vocab,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        pe="sinusoidal",
        train_length=args.seq_len,
    )
    model = GPT(cfg).to(args.device).eval()
    g = torch.Generator().manual_seed(1)
    lengths = prompt_lengths(args.prompts, 2, args.seq_len // 2)
    prompts = [torch.randint(4, args.vocab, (n,), generator=g).tolist() for n in lengths]

    def autocast() -> contextlib.AbstractContextManager:
        if args.device == "cpu":
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=torch.bfloat16)

    steps = {"ragged": 0, "by_length": 0}

    def run(mode: str) -> float:
        counted = [0]

        def count(n: int) -> None:
            counted[0] += 1

        groups = (
            [prompts]
            if mode == "ragged"
            else [[p for p in prompts if len(p) == n] for n in sorted(set(lengths))]
        )
        if args.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for group in groups:
            generate_ids(
                model,
                group,
                args.new,
                eos_id=None,
                batch_size=args.batch,
                device=args.device,
                autocast=autocast,
                beam_size=args.beam,
                on_step=count,
            )
        if args.device == "cuda":
            torch.cuda.synchronize()
        steps[mode] = counted[0]
        return time.perf_counter() - start

    run("ragged")  # warm-up: allocator, kernels
    times: dict[str, list[float]] = {"ragged": [], "by_length": []}
    for _ in range(args.rounds):
        for mode in ("by_length", "ragged"):
            times[mode].append(run(mode))
    return {
        "ragged_s": statistics.median(times["ragged"]),
        "by_length_s": statistics.median(times["by_length"]),
        "ragged_steps": steps["ragged"],
        "by_length_steps": steps["by_length"],
        "lengths": len(set(lengths)),
    }


def point(args: argparse.Namespace, procs: int) -> dict[str, float]:
    """Both modes in ``procs`` processes started together; each measure's mean over them."""
    cmd = module_command("bench_decode", "--worker", *sys.argv[1:])
    started = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(procs)
    ]
    results = []
    for p in started:
        out, _ = p.communicate()
        if p.returncode:
            raise SystemExit(f"a worker exited {p.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    mean = {k: statistics.mean(r[k] for r in results) for k in results[0]}
    return {"procs": procs, **mean, "by_length_over_ragged": mean["by_length_s"] / mean["ragged_s"]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--procs", default="1", help="comma-separated process counts")
    p.add_argument("--prompts", type=int, default=500, help="prompts (the ablation: 100 + 400)")
    p.add_argument("--new", type=int, default=40, help="new tokens per prompt")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: torch's)")
    p.add_argument("--smoke", action="store_true", help="toy sizes, for the tests")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        args.prompts, args.new, args.d_model, args.layers = 24, 4, 32, 1
        args.heads, args.vocab, args.seq_len, args.batch, args.rounds = 2, 64, 64, 8, 1
    return args


def main() -> int:
    """Run every point and print the table."""
    args = parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    print(machine_header(args.device))
    print(
        f"decode: {args.prompts} prompts, {args.new} new tokens each, beam {args.beam}, "
        f"batch {args.batch}, d_model {args.d_model}, {args.layers} layers, {args.heads} heads, "
        f"vocab {args.vocab}, {args.device}"
    )
    print("| processes | ragged s | steps | by length s | steps | by length / ragged |")
    print("|---:|---:|---:|---:|---:|---:|", flush=True)
    rows = []
    for n in args.procs.split(","):
        r = point(args, int(n))
        rows.append(r)
        print(
            f"| {r['procs']} | {r['ragged_s']:.2f} | {r['ragged_steps']:.0f} | "
            f"{r['by_length_s']:.2f} | {r['by_length_steps']:.0f} | "
            f"{r['by_length_over_ragged']:.2f} |",
            flush=True,
        )
    if args.json:
        from posexp.store.files import write_json_atomic

        write_json_atomic(args.json, {"args": vars(args) | {"json": str(args.json)}, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
