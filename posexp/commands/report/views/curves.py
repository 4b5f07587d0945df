"""The report's training curves: training and validation loss against step, per setting.

Read back from each run's TensorBoard event files (what training logged anyway, so a report
needs no second record), grouped by the run's label without its seed: a line is the mean over
seeds at the steps they share, its band one seed std either side.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from posexp.commands.report.jobs import Job, natural_order
from posexp.commands.report.stats import mean_std
from posexp.commands.report.view import ReportContext, register_report_view
from posexp.commands.report.views.findings import job_pe, pe_colors
from posexp.pe.base import PEDisplay
from posexp.results.figures import figure_title, legend_below, panel_title

CURVES = (("train/loss", "training loss"), ("val/loss", "validation loss"))
# What the last report read from each run's event files, so that a second one reads only what
# changed: run -> its event files (name, size, mtime) and the curves they held.
CURVES_NOTE = ".report_curves.json"


def event_files(job: Job) -> list[Path]:
    """The run's TensorBoard event files (training writes them into the run dir)."""
    return sorted(job.path.glob("events.out.tfevents.*"))


def scalars(job: Job) -> dict[str, dict[int, float]]:
    """tag -> step -> value of the curves' tags in the run's event files ({} when unreadable)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # TensorBoard's reader logs each file it moves to at INFO, and warns of "out of order"
    # steps where a resumed run logged again from its checkpoint's step (its purge, by design):
    # chatter in a report's output.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    try:
        acc = EventAccumulator(str(job.path), size_guidance={"scalars": 0})
        acc.Reload()
        tags = set(acc.Tags().get("scalars", []))
        return {
            tag: {e.step: e.value for e in acc.Scalars(tag)}  # a resumed step: the last write
            for tag, _ in CURVES
            if tag in tags
        }
    except Exception:  # noqa: BLE001  a damaged event file: the run has no curve, said below
        return {}


def read_curves(ctx: ReportContext, jobs: list[Job]) -> list[dict[str, dict[int, float]]]:
    """Each job's ``scalars``, read from its event files unless the last report read the same
    files (by name, size and modification time): those come from its note, ``CURVES_NOTE``."""
    from posexp.errors import PosexpError
    from posexp.store.files import read_json, write_json_atomic

    note_path = ctx.target / CURVES_NOTE
    try:
        last = read_json(note_path) or {}
    except PosexpError:  # a damaged note only costs a second read
        last = {}
    note, out = {}, []
    for job in jobs:
        stats = [[f.name, *_size_and_time(f)] for f in event_files(job)]
        key = str(job.path)
        kept = last.get(key)
        if kept and kept.get("files") == stats:
            data = {tag: {int(k): v for k, v in points} for tag, points in kept["data"].items()}
        else:
            data = scalars(job)
        points = {tag: [[k, v] for k, v in sorted(p.items())] for tag, p in data.items()}
        note[key] = {"files": stats, "data": points}
        out.append(data)
    if note != last:
        try:
            write_json_atomic(note_path, note)
        except OSError:  # a read-only sweep: the next report reads the events again
            pass
    return out


def _size_and_time(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def group_curves(
    ctx: ReportContext, jobs: list[Job]
) -> tuple[dict[str, dict[str, list[dict[int, float]]]], list[str]]:
    """label -> tag -> one step->value curve per seed, and the jobs whose curves are unreadable."""
    groups: dict[str, dict[str, list[dict[int, float]]]] = {}
    unreadable = []
    for job, data in zip(jobs, read_curves(ctx, jobs), strict=True):
        if not data:
            unreadable.append(job.name)
            continue
        label = ctx.label(job, exclude=("seed",))
        for tag, points in data.items():
            groups.setdefault(label, {}).setdefault(tag, []).append(points)
    # Legend and CSV in the order of the settings' values, numbers by size: h1, h4, h16.
    return dict(sorted(groups.items(), key=lambda kv: natural_order(kv[0]))), unreadable


def seed_mean(curves: list[dict[int, float]]) -> list[tuple[int, float, float, int]]:
    """(step, mean, std, n) at the steps every seed logged."""
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    out = []
    for step in steps:
        values = [c[step] for c in curves if math.isfinite(c[step])]
        if values:
            mean, std = mean_std(values)
            out.append((step, mean, std, len(values)))
    return out


def line_pes(ctx: ReportContext, jobs: list[Job]) -> dict[str, tuple[PEDisplay, str]]:
    """Per line, the encoding it stands for and its other varying settings ('' for none), where
    every line is one encoding (a sweep over pe, alone or beside other settings); {} otherwise."""
    pes: dict[str, set[tuple[PEDisplay, str]]] = {}
    for job in jobs:
        if job.config:
            # a fine-tune: what it changed from its parent
            tuned = ctx.lineage().get(str(getattr(job, "path", "")))
            rest = tuned or ctx.rest(job, ("seed", "pe"))
            key = (job_pe(job), rest)
            pes.setdefault(ctx.label(job, exclude=("seed",)), set()).add(key)
    one = {label: next(iter(v)) for label, v in pes.items() if len(v) == 1}
    return one if len(one) == len(pes) and len({pe for pe, _ in one.values()}) > 1 else {}


LINE_STYLES = ("-", "--", ":", "-.")


def curves_plot(
    ctx: ReportContext,
    groups: dict[str, dict[str, list[dict[int, float]]]],
    pes: dict[str, tuple[PEDisplay, str]] | None = None,
) -> Path:
    """Two panels (training, validation loss against step), one line per setting. Where each
    line is one encoding (``pes``), it takes the encoding's colour and order in every figure of
    the report, and a line style per value of the other settings (a pe × task sweep)."""
    pes = pes if pes and set(pes) == set(groups) else {}
    shared = pe_colors(ctx) if pes else {}
    rests = sorted({rest for _, rest in pes.values()}, key=natural_order)
    style = {rest: LINE_STYLES[i % len(LINE_STYLES)] for i, rest in enumerate(rests)}
    ordered = (
        sorted(
            groups.items(), key=lambda kv: (pes[kv[0]][0].sort_key, natural_order(pes[kv[0]][1]))
        )
        if pes
        else list(groups.items())
    )

    def line_label(label: str) -> str:
        if not pes:
            return label
        pe, rest = pes[label]
        return f"{pe.label} · {rest}" if rest else pe.label

    def draw() -> Any:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained")
        colors = [*plt.get_cmap("tab10").colors, *plt.get_cmap("tab20").colors[1::2]]
        for ax, (tag, name) in zip(axes, CURVES, strict=True):
            for i, (label, by_tag) in enumerate(ordered):
                if tag not in by_tag:
                    continue
                points = seed_mean(by_tag[tag])
                if not points:
                    continue
                steps, means, stds, ns = zip(*points, strict=True)
                color = shared.get(pes[label][0]) if pes else colors[i % len(colors)]
                n = max(ns)
                marker = "o" if tag == "val/loss" and len(steps) <= 40 else None
                ax.plot(
                    steps,
                    means,
                    color=color,
                    linestyle=style[pes[label][1]] if pes else "-",
                    marker=marker,
                    markersize=3,
                    linewidth=1.4,
                    label=line_label(label) + (f" (n = {n})" if n > 1 else ""),
                )
                if n > 1:
                    lo = [m - s for m, s in zip(means, stds, strict=True)]
                    hi = [m + s for m, s in zip(means, stds, strict=True)]
                    ax.fill_between(steps, lo, hi, color=color, alpha=0.15, linewidth=0)
            panel_title(ax, f"{name} (nats/token)")
            ax.set_xlabel("training step")
            ax.grid(True, alpha=0.3)
            legend_below(
                ax,
                columns=2 if len(groups) > 4 else 1,
                handle_length=4.0 if len(rests) > 1 else 2.0,
            )
        axes[0].set_ylabel("loss (nats/token)")
        several = any(len(c) > 1 for by_tag in groups.values() for c in by_tag.values())
        figure_title(
            fig,
            "Loss against training step"
            + ("; lines: seed mean, bands: ± one seed std" if several else ""),
        )
        return fig

    shown = repr(
        [
            (
                line_label(label),
                shared.get(pes[label][0]) if pes else i,
                style.get(pes[label][1]) if pes else "-",
                by_tag,
            )
            for i, (label, by_tag) in enumerate(ordered)
        ]
    )
    return ctx.figure("report_curves.png", shown, draw)


def render(ctx: ReportContext) -> str:
    """The curves' figure and CSV, and which runs have none."""
    jobs = [j for j in ctx.jobs if event_files(j)]
    groups, unreadable = group_curves(ctx, jobs)
    rows = [
        {"setting": label, "curve": tag, "step": step, "mean": mean, "std": std, "n": n}
        for label, by_tag in groups.items()
        for tag, curves in by_tag.items()
        for step, mean, std, n in seed_mean(curves)
    ]
    md = ["## Training curves", ""]
    if not rows:
        return "\n".join([*md, "No run logged a loss curve."])
    plot = curves_plot(ctx, groups, line_pes(ctx, jobs))
    ctx.write_csv("report_curves.csv", rows, ["setting", "curve", "step", "mean", "std", "n"])
    md += [
        "Training and validation loss (nats/token) against step, read from each run's "
        "TensorBoard events; a line per setting: the mean over its seeds at the steps they "
        "share (the legend gives n), the band one seed std either side. Validation starts at "
        "step 0, the untrained model.",
        "",
        f"![loss curves]({plot.name})",
        "",
        "Points: [report_curves.csv](report_curves.csv).",
    ]
    every = [j.name for j in jobs if j.flat_config.get("data.loss_on") == "all"]
    if every:  # the val loss of a task or translation run counts answer/target tokens only
        md += [
            "",
            f"{len(every)} of {len(jobs)} runs train on every token (`data.loss_on=all`) while "
            "their validation loss counts the answer (or target) tokens only: their two curves "
            "measure different tokens, so the gap between them is no generalization gap.",
        ]
    if unreadable:
        md += ["", f"No readable curve: {', '.join(f'`{n}`' for n in unreadable)}."]
    return "\n".join(md)


def detect(jobs: list[Any]) -> bool:
    """Any job with TensorBoard events (every trained run has them)."""
    return any(event_files(j) for j in jobs if hasattr(j, "path"))


register_report_view("curves", detect, render, order=5)
