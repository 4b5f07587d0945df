"""`posexp eval-extrapolate` on synthetic-task runs: accuracy per test size, method and depth.

A task run is scored on ``data.test_examples`` fixed test instances per size (``data.test_lengths``,
or ``--lengths`` in the task's unit), and per key depth for passkey. A method's factor follows
the row's token count over the longest training row, as lengths in tokens do for text runs.
Records carry ``metric: accuracy`` with ``accuracy`` (exact match), ``loss`` and ``ppl`` of the
answer tokens, ``examples`` and ``depth``.
"""

from __future__ import annotations

from typing import Any

from posexp.config import RunConfig

PROTOCOL = "exact_match"


def task_data(cfg: RunConfig) -> Any:
    """The run's synthetic task (``SyntheticData``), or None for text runs."""
    if cfg.data.name != "synthetic":
        return None
    from posexp.data.synthetic import make_data

    return make_data(**cfg.data.params)


def panel(record: dict[str, Any]) -> str:
    """What a plot panel / table row group shows: the protocol, and the key depth if any."""
    depth = record.get("depth")
    return record["protocol"] if depth is None else f"key at depth {depth:g}"


def plot_accuracy(records: list[dict[str, Any]], train_sizes: tuple[int, int], unit: str,
                  title: str) -> Any:
    """Exact-match accuracy against size, one line per method, one panel per key depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.tasks.extrapolate_outputs import DASHES, MARKERS

    panels = list(dict.fromkeys(panel(r) for r in records))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + 2.2, 4.6),
                             squeeze=False, layout="constrained", sharey=True)
    lengths = sorted({r["length"] for r in records})
    for ax, name in zip(axes[0], panels, strict=True):
        methods = list(dict.fromkeys(r["method"] for r in records if panel(r) == name))
        for i, method in enumerate(methods):
            pts = sorted((r["length"], r["accuracy"]) for r in records if panel(r) == name
                         and r["method"] == method and r["accuracy"] is not None)
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=MARKERS[i % len(MARKERS)],
                        linestyle=DASHES[i % len(DASHES)], markersize=8 - 1.5 * (i % 4), label=method)
        ax.axvspan(train_sizes[0], train_sizes[1], color="grey", alpha=0.12,
                   label=f"training sizes ({train_sizes[0]}–{train_sizes[1]})")
        ax.set_xticks(lengths, [f"{n:,}" for n in lengths], rotation=45 if len(lengths) > 8 else 0)
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel(f"test size ({unit})")
        ax.set_ylabel("exact-match accuracy")
        ax.set_title(f"test accuracy, {name}", fontsize=10)
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig
