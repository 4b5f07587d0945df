"""The report's passkey view: retrieval accuracy by context length, method and key depth.

For a folder holding a passkey run (``experiment=passkey``) and its fine-tunes (scripts/passkey.py):
a table with one row per method, zero-shot on the passkey run and after each fine-tune (its
baked-in method), and one column per length as a multiple of L0; cells are accuracy averaged
over key depths. A figure holds one depth × length heat map per row of the table.
"""

from __future__ import annotations

from typing import Any

from posexp.commands.report.jobs import Job
from posexp.commands.report.view import ReportContext, fmt, md_table, register_report_view
from posexp.commands.report.views.tasks import task_of

Cell = dict[tuple[float, int], float]  # (depth, size) -> accuracy


def passkey_jobs(jobs: list[Job]) -> list[Job]:
    """Jobs of the passkey task with accuracy records."""
    return [
        j
        for j in jobs
        if j.extrapolate
        and task_of(j) == "passkey"
        and any(r.get("metric") == "accuracy" for r in j.extrapolate)
    ]


def is_finetune(job: Job) -> bool:
    """True for a `posexp finetune` run (it records the parent's training length)."""
    return bool(job.config and job.config.parent and job.config.train_length)


def rows_of(jobs: list[Job]) -> dict[str, Cell]:
    """Row label -> accuracies: zero-shot methods of un-fine-tuned runs, baked methods of
    fine-tunes, and ``none`` for a fine-tune without a method (the baseline)."""
    out: dict[str, Cell] = {}
    for job in sorted(jobs, key=lambda j: (is_finetune(j), j.name)):  # zero-shot rows first
        tuned = is_finetune(job)
        # A fine-tune is reported with the method it was trained with: its baked-in one, or
        # none when it has none.
        trained_with = next(
            (r["method"] for r in job.extrapolate if r["method"].startswith("baked:")), "none"
        )
        for r in job.extrapolate:
            if r.get("accuracy") is None or r.get("depth") is None:
                continue
            method = r["method"]
            if tuned and method != trained_with:
                continue
            label = f"{method.split(':')[-1]} + fine-tune" if tuned else f"{method} (zero-shot)"
            out.setdefault(label, {})[(float(r["depth"]), int(r["length"]))] = float(r["accuracy"])
    return out


def heat_maps(
    ctx: ReportContext, rows: dict[str, Cell], row_tokens: dict[int, int], l0: int
) -> Any:
    """One depth × length accuracy heat map per table row, values written in the cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(rows)
    cols = min(4, n)
    grid = (n + cols - 1) // cols
    fig, axes = plt.subplots(
        grid,
        cols,
        figsize=(3.6 * cols + 1.2, 3.0 * grid + 0.8),
        squeeze=False,
        layout="constrained",
    )
    image = None
    for ax, (label, cell) in zip(axes.flat, rows.items(), strict=False):
        depths = sorted({d for d, _ in cell})
        sizes = sorted({s for _, s in cell})
        values = [[cell.get((d, s), float("nan")) for s in sizes] for d in depths]
        image = ax.imshow(values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for i, row in enumerate(values):
            for j, v in enumerate(row):
                ax.text(
                    j,
                    i,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if v < 0.6 else "black",
                )
        ax.set_xticks(range(len(sizes)), [f"{row_tokens[s] / l0:.3g}×" for s in sizes])
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
        ax.set_xlabel(f"context (× L0 = {l0})")
        ax.set_ylabel("key depth")
        ax.set_title(label, fontsize=10)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="retrieval accuracy")
    fig.suptitle("Passkey retrieval accuracy by key depth and context length", fontsize=11)
    return ctx.save_figure(fig, "report_passkey.png")


def render(ctx: ReportContext) -> str:
    """The section's Markdown (and its CSV and heat maps)."""
    from posexp.data.synthetic import make_data

    jobs = passkey_jobs(ctx.jobs)
    rows = rows_of(jobs)
    untuned = [j for j in jobs if not is_finetune(j)]
    task = make_data(**(untuned or jobs)[0].config.data.params)
    l0 = task.longest_train_row()
    sizes = sorted({s for cell in rows.values() for _, s in cell})
    row_tokens = {s: task.task.row_tokens(s) for s in sizes}
    table = []
    csv = []
    for label, cell in rows.items():
        means = []
        for s in sizes:
            values = [v for (d, n), v in cell.items() if n == s]
            means.append(sum(values) / len(values) if values else None)
            csv += [
                {"row": label, "length": row_tokens[s], "depth": d, "accuracy": v}
                for (d, n), v in sorted(cell.items())
                if n == s
            ]
        table.append([label, *(fmt(m) for m in means)])
    header = ["method", *(f"{row_tokens[s]:,} ({row_tokens[s] / l0:.3g}×)" for s in sizes)]
    path = ctx.write_csv("report_passkey.csv", csv, ["row", "length", "depth", "accuracy"])
    png = heat_maps(ctx, rows, row_tokens, l0)
    return "\n".join(
        [
            "## Passkey retrieval",
            "",
            f"Accuracy of the 5-digit key, averaged over key depths; rows of L0 = {l0} "
            f"tokens during training; zero-shot rows apply the method at evaluation only, "
            f"fine-tune rows continued training on longer rows with it baked in "
            f"(none + fine-tune: the same fine-tune without a method).",
            "",
            md_table(header, table, ["l", *"r" * len(sizes)]),
            "",
            f"![passkey heat maps]({png.name})",
            "",
            f"Data: `{path.name}`.",
        ]
    )


register_report_view("passkey", lambda jobs: bool(passkey_jobs(jobs)), render, order=13)
