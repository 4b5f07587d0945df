"""Diagnosis: why T5's bias stops one symbol past the trained sizes on copy and reverse.

    python -m scripts.t5_diagnosis outputs/sweeps/<sweep>/pe=t5,seed=0 [more runs] [--plot out.png]

For each run it prints (1) the learned bias of a T5 run against the query-key distance, next to
the bucket each distance falls in, and (2) for any PE, the teacher-forced accuracy of each answer
token at each test size. In a row ``prompt <sep> answer``, answer token i of reverse is read
from distance 2i + 1 (whatever the size) and of copy from distance n (the size): sizes 1-8 train
reverse at the odd distances up to 15 and copy at the distances up to 8. Where the bias has
learned to pick those distances, the first answer token that needs an untrained one fails, and
with it the whole answer (exact match). ``--plot`` draws (1) per head, as PNG and SVG.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from posexp.commands.extrapolate.tasks import task_data
from posexp.commands.generate import run_tokenizer
from posexp.data.pairs import IGNORE, collate_rows
from posexp.errors import PosexpError
from posexp.objectives.synthetic import encode_examples
from posexp.pe.t5 import relative_buckets
from posexp.runtime.weights import load_model
from posexp.store.rundir import RunDir


def target_distance(task: str, size: int, index: int) -> int:
    """Distance from the query that predicts answer token ``index`` to the prompt token it copies."""
    return 2 * index + 1 if task == "reverse" else size


def trained_distances(task: str, top: int) -> list[int]:
    """Every distance an answer token is read from in training (sizes 1..top)."""
    return sorted({target_distance(task, n, i) for n in range(1, top + 1) for i in range(n)})


@torch.no_grad()
def answer_token_accuracy(model, examples, tokenizer) -> list[float]:
    """Teacher-forced accuracy of each answer token (the end-of-answer token last)."""
    ids = encode_examples(examples, tokenizer)
    x, y = collate_rows(ids, tokenizer, max(len(p) + len(a) + 1 for p, a in ids))
    right = model.eval()(x)["logits"].argmax(-1) == y
    scored = y != IGNORE
    per_row = [right[r][scored[r]] for r in range(len(x))]  # answer tokens of each row, in order
    width = min(len(r) for r in per_row)
    return [sum(float(r[i]) for r in per_row) / len(per_row) for i in range(width)]


def show_bias(name: str, pe, task: str, top: int, longest: int) -> torch.Tensor:
    """Print the learned bias per head at distances 0..longest and how the first distance past
    the trained sizes compares with the trained ones; return the bias (distance x head)."""
    distance = torch.arange(longest + 1)
    buckets = relative_buckets(distance, pe.num_buckets, pe.max_distance)
    bias = pe.table.detach()[buckets]
    print(f"\n{name}: learned bias by distance ({pe.num_buckets} buckets to {pe.max_distance})")
    heads = " ".join(f"{'head ' + str(h):>7}" for h in range(bias.shape[1]))
    print(f"{'distance':>8} {'bucket':>6} {heads}")
    for d in range(longest + 1):
        print(f"{d:>8} {int(buckets[d]):>6} " + " ".join(f"{float(v):>7.2f}" for v in bias[d]))
    trained = trained_distances(task, top)
    first = target_distance(task, top + 1, top)  # the last answer token one size past training
    gap = bias[first] - bias[trained].mean(0)
    print(
        f"bias at distance {first} (first read one size past training) minus the mean at the "
        f"trained answer distances {trained[0]}-{trained[-1]}, per head: "
        + ", ".join(f"{float(v):+.2f}" for v in gap)
    )
    return bias


def plot(curves: dict[str, torch.Tensor], task: str, top: int, out: Path) -> None:
    """The bias against distance, one panel per run, one line per head; trained targets shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(
        len(curves), 1, figsize=(8, 3.6 * len(curves)), squeeze=False, sharex=True
    )
    trained = trained_distances(task, top)
    for ax, (name, bias) in zip(axes[:, 0], curves.items(), strict=True):
        for d in trained:
            ax.axvspan(d - 0.5, d + 0.5, color="0.88", lw=0)
        for h in range(bias.shape[1]):
            ax.plot(range(len(bias)), bias[:, h], marker="o", ms=3, label=f"head {h}")
        ax.axvline(max(trained) + 0.5, color="0.4", ls="--", lw=1)
        ax.set(title=f"T5 bias on {task}: {name}")
        ax.set_ylabel("learned bias (added to the logit)")
        handles, _ = ax.get_legend_handles_labels()
        band = Patch(color="0.88", label=f"distances answers read\nin training (sizes 1-{top})")
        ax.legend(handles=[*handles, band], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    axes[-1, 0].set_xlabel("query - key distance")
    fig.tight_layout()
    fig.savefig(out, dpi=150)
    fig.savefig(out.with_suffix(".svg"))
    print(f"wrote {out} and {out.with_suffix('.svg')}")


def main() -> None:
    """Print the bias table (T5 runs) and per-token accuracy (any run) of each run given."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="runs of data=copy or data=reverse")
    p.add_argument("--plot", type=Path, help="PNG of the bias against distance (T5 runs)")
    a = p.parse_args()
    curves, task, top = {}, "reverse", 8
    for path in a.runs:
        run = RunDir.open(path, "run")
        cfg = run.config()
        data = task_data(cfg)
        task = data.task.name if data is not None else cfg.data.name
        if task not in ("copy", "reverse"):
            raise PosexpError(f"{path!r} is a {task!r} run; this reads copy or reverse runs")
        (tokenizer, _), top = run_tokenizer(cfg), max(data.train_lengths)
        model = load_model(run, "cpu")
        name = Path(path).name
        longest = max(target_distance(task, n, n - 1) for n in data.test_lengths)
        if cfg.pe.name == "t5":
            label = f"{name}, {model.pe.num_buckets} buckets"
            curves[label] = show_bias(name, model.pe, task, top, min(longest, 24))
        print(f"\n{name}: teacher-forced accuracy of answer token i (target distance in brackets)")
        for n in data.test_lengths:
            acc = answer_token_accuracy(
                model, data.examples("test", n, data.test_examples), tokenizer
            )
            cells = [f"{i}[{target_distance(task, n, i)}] {v:.2f}" for i, v in enumerate(acc[:n])]
            print(f"  size {n:>2}: " + "  ".join(cells))
    if a.plot and curves:
        plot(curves, task, top, a.plot)


if __name__ == "__main__":
    try:
        main()
    except PosexpError as e:
        raise SystemExit(f"error: {e}") from None
