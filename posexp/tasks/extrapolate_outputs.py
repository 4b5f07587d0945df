"""What `posexp eval-extrapolate` writes: JSON/CSV records, plots, TensorBoard, a terminal table."""

from __future__ import annotations

import io
import math
import shutil
from pathlib import Path
from typing import Any

from posexp.files import (
    save_figure_atomic,
    staged_dir,
    write_csv_atomic,
    write_json_atomic,
)
from posexp.rundir import RunDir
from posexp.tasks.extrapolate_plan import (
    FIELDS,
    PROTOCOLS,
    TB_METHODS_DIR,
    TB_SUFFIX,
    RunPlan,
    RunResult,
)
from posexp.tasks.extrapolate_tasks import panel, plot_accuracy

# ---- outputs -------------------------------------------------------------------------------


def write_outputs(plan: RunPlan, records: list[dict[str, Any]], per_position: dict[str, Any]) -> list[Path]:
    """JSON, CSV, two PNGs and TensorBoard scalars for one run."""
    names = ["extrapolate.json", "extrapolate.csv", "per_position.json", "extrapolate.png",
             "per_position.png"]
    model = plan.meta["model"]
    title = (f"pe={plan.pe}, d_model {model['d_model']}, {model['n_layers']} layers, "
             f"{model['n_heads']} heads, trained at {plan.train_length:,} tokens\n{plan.run_dir.name}")
    if plan.task is not None:  # a task run: accuracy records and their plot, no token positions
        task = plan.task
        title = (f"{task.task.name}, pe={plan.pe}, {model['n_layers']} layers, {model['n_heads']} "
                 f"heads, trained on sizes {task.train_lengths[0]}–{task.train_lengths[1]}\n"
                 f"{plan.run_dir.name}")
        with staged_dir(plan.run.eval_dir) as out:
            write_json_atomic(out / names[0], records)
            write_csv_atomic(out / names[1], records, FIELDS)
            png = save_figure_atomic(plot_accuracy(records, task.train_lengths, task.task.unit, title),
                                     out / names[3])
        write_tensorboard(plan.run_dir, records, {"extrapolate/accuracy_plot": png})
        return [plan.run.eval_dir / name for name in (names[0], names[1], names[3])]
    # One evaluation's files are swapped in together, so JSON, CSV and plots always agree.
    with staged_dir(plan.run.eval_dir) as out:
        write_json_atomic(out / names[0], records)
        write_csv_atomic(out / names[1], records, FIELDS)
        write_json_atomic(out / names[2], per_position)
        ppl_png = save_figure_atomic(plot_ppl(records, plan.train_length, title), out / names[3])
        pos_png = save_figure_atomic(plot_per_position(per_position, title), out / names[4])
    files = [plan.run.eval_dir / name for name in names]
    write_tensorboard(plan.run_dir, records, {"extrapolate/ppl_plot": ppl_png,
                                              "extrapolate/per_position_loss": pos_png})
    return files


# Markers and dashes cycle independently of colours, so lines that coincide (ntk and
# dynamic_ntk under non-overlapping windows) stay visible.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")


def plain_log_axes(ax: Any, lengths: list[int]) -> None:
    """Log axes with the lengths themselves as x ticks and plain numbers on y."""
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        LogLocator,
        NullFormatter,
        NullLocator,
    )

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{n:,}" for n in lengths])
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0), numticks=12))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_ppl(records: list[dict[str, Any]], train_length: int, title: str) -> Any:
    """ppl against length (log-log, plain ticks), one line per method, one panel per protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protocols = [p for p in PROTOCOLS if any(r["protocol"] == p for r in records)]
    fig, axes = plt.subplots(1, len(protocols), figsize=(6 * len(protocols) + 2.2, 4.8),
                             squeeze=False, layout="constrained")
    lengths = sorted({r["length"] for r in records})
    for ax, protocol in zip(axes[0], protocols, strict=True):
        methods = list(dict.fromkeys(r["method"] for r in records if r["protocol"] == protocol))
        for i, method in enumerate(methods):
            pts = sorted((r["length"], r["ppl"]) for r in records
                         if r["protocol"] == protocol and r["method"] == method and r["ppl"] is not None)
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=MARKERS[i % len(MARKERS)],
                        linestyle=DASHES[i % len(DASHES)], markersize=8 - 1.5 * (i % 4), label=method)
        ax.axvline(train_length, color="grey", linestyle=":", linewidth=1,
                   label=f"training length ({train_length:,})")
        plain_log_axes(ax, lengths)
        ax.set_xlabel("evaluation length (tokens)")
        ax.set_ylabel("test perplexity (log scale)")
        ax.set_title(f"test perplexity, {protocol} windows", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def smooth(values: list[float], width: int = 5) -> list[float]:
    """Centred moving average (shorter windows at the ends), to read a trend through bucket noise."""
    half = width // 2
    return [sum(values[max(0, i - half) : i + half + 1]) / len(values[max(0, i - half) : i + half + 1])
            for i in range(len(values))]


def plot_per_position(per_position: dict[str, Any], title: str) -> Any:
    """Mean loss by position bucket at the longest length: raw buckets faint, a moving average bold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.2, 4.6), layout="constrained")
    for i, (method, curve) in enumerate(per_position["methods"].items()):
        xs = [(a + b - 1) / 2 for a, b in zip(curve["start"], curve["end"], strict=True)]
        pts = [(x, y) for x, y in zip(xs, curve["loss"], strict=True) if y is not None]
        if not pts:
            continue
        x, y = zip(*pts, strict=True)
        (line,) = ax.plot(x, smooth(list(y)), linestyle=DASHES[i % len(DASHES)], linewidth=1.8,
                          label=f"{method} ({curve['protocol']})")
        ax.plot(x, y, color=line.get_color(), linewidth=0.6, alpha=0.3)
    ax.axvline(per_position["train_length"], color="grey", linestyle=":", linewidth=1,
               label=f"training length ({per_position['train_length']:,})")
    ax.set_xlabel("position in the window (tokens)")
    ax.set_ylabel("mean loss (nats/token)")
    ax.set_title(f"loss by position at length {per_position['length']:,} (faint: per bucket; "
                 "bold: 5-bucket moving average)", fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def write_tensorboard(run_dir: Path, records: list[dict[str, Any]], images: dict[str, bytes]) -> None:
    """Per method, ``extrapolate/<protocol>/ppl`` against length, as its own TensorBoard run.

    Each method writes into ``<run>/extrapolate/<method>/``, so TensorBoard draws the methods of
    one card in different colours and names them in its run list and tooltips; the plots go into
    the run itself (an event file with suffix ``.extrapolate``). A new evaluation replaces both,
    so curves never duplicate.
    """
    from matplotlib.image import imread
    from torch.utils.tensorboard import SummaryWriter

    for old in run_dir.glob(f"events.out.tfevents.*{TB_SUFFIX}"):
        old.unlink()
    shutil.rmtree(run_dir / TB_METHODS_DIR, ignore_errors=True)
    for method in dict.fromkeys(r["method"] for r in records):
        points = sorted((r for r in records if r["method"] == method and r["ppl"] is not None
                         and math.isfinite(r["ppl"])), key=lambda r: r["length"])
        if not points:
            continue  # no card for a method with no number (e.g. past a learned table)
        writer = SummaryWriter(str(run_dir / TB_METHODS_DIR / method.replace(":", "-")))
        try:
            for r in points:
                metric = r.get("metric") or "ppl"
                depth = "" if r.get("depth") is None else f"_depth{r['depth']:g}"
                writer.add_scalar(f"extrapolate/{r['protocol']}{depth}/{metric}", r[metric], r["length"])
        finally:
            writer.close()
    writer = SummaryWriter(str(run_dir), filename_suffix=TB_SUFFIX)
    try:
        step = max((r["length"] for r in records), default=0)
        for tag, png in images.items():  # the PNGs already rendered, not a second rendering
            writer.add_image(tag, imread(io.BytesIO(png), format="png")[..., :3], step,
                             dataformats="HWC")
    finally:
        writer.close()


def print_table(result: RunResult, console: Any = None, several: bool = False) -> None:
    """Rows method × protocol, columns lengths, cells ppl (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    lengths = sorted({r["length"] for r in result.records})
    accuracy = any(r.get("metric") == "accuracy" for r in result.records)
    what = "test exact-match accuracy" if accuracy else "test ppl"
    console.print(f"[bold]{result.run_dir if several else result.run_dir.name}[/bold]: {what}, "
                  f"pe={result.pe}, trained at {result.train_length}"
                  + (" tokens (longest row)" if accuracy else ""), soft_wrap=True)
    table = Table()
    table.add_column("method")
    table.add_column("protocol")
    for n in lengths:
        table.add_column(f"{n}" if accuracy else f"{n}\n×{n / result.train_length:g}", justify="right")
    rows: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in result.records:
        rows.setdefault((r["method"], panel(r)), {})[r["length"]] = r
    for (method, protocol), by_len in rows.items():
        cells = (fmt_accuracy(by_len.get(n)) if accuracy else fmt_ppl(by_len.get(n)) for n in lengths)
        table.add_row(method, protocol, *cells)
    console.print(table)
    notes = sorted({r["note"] for r in result.records if r["ppl"] is None and r["note"]})
    for note in notes:
        console.print(f"  —: {note}", soft_wrap=True, highlight=False)
    extra = "" if accuracy else ", per_position.{json,png}"
    console.print(f"  wrote {RunDir(result.run_dir).eval_dir}/extrapolate.{{json,csv,png}}{extra}",
                  soft_wrap=True, highlight=False)


def fmt_accuracy(record: dict[str, Any] | None) -> str:
    """Accuracy with 3 decimals, '—' when missing or not applicable."""
    if record is None or record.get("accuracy") is None:
        return "—"
    return f"{record['accuracy']:.3f}"


def fmt_ppl(record: dict[str, Any] | None) -> str:
    """ppl with 4 significant digits, '—' when missing or not applicable."""
    if record is None or record["ppl"] is None:
        return "—"
    ppl = record["ppl"]
    return f"{ppl:.4g}" if ppl < 1e5 else f"{ppl:.2e}"


