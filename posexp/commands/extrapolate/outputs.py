"""What `posexp eval-extrapolate` writes: JSON/CSV records, plots, TensorBoard, a terminal table."""

from __future__ import annotations

import io
import math
import shutil
from pathlib import Path
from typing import Any

from posexp.commands.extrapolate.plan import (
    FIELDS,
    RunPlan,
    RunResult,
)
from posexp.commands.extrapolate.plots import panel, plot_accuracy, plot_per_position, plot_ppl
from posexp.files import (
    save_figure_atomic,
    staged_dir,
    write_csv_atomic,
    write_json_atomic,
)
from posexp.rundir import RunDir

# ---- outputs -------------------------------------------------------------------------------


def write_outputs(
    plan: RunPlan, records: list[dict[str, Any]], per_position: dict[str, Any]
) -> list[Path]:
    """JSON, CSV, two PNGs and TensorBoard scalars for one run."""
    names = [
        "extrapolate.json",
        "extrapolate.csv",
        "per_position.json",
        "extrapolate.png",
        "per_position.png",
    ]
    model = plan.meta["model"]
    title = (
        f"pe={plan.pe}, d_model {model['d_model']}, {model['n_layers']} layers, "
        f"{model['n_heads']} heads, trained at {plan.train_length:,} tokens"
    )
    if plan.task is not None:  # a task run: accuracy records and their plot, no token positions
        task = plan.task
        title = (
            f"{task.task.name}, pe={plan.pe}, {model['n_layers']} layers, {model['n_heads']} "
            f"heads, trained on sizes {task.train_lengths[0]}–{task.train_lengths[1]}"
        )
        with staged_dir(plan.run.eval_dir) as out:
            write_json_atomic(out / names[0], records)
            write_csv_atomic(out / names[1], records, csv_fields(records))
            png = save_figure_atomic(
                plot_accuracy(records, task.train_lengths, task.task.unit, title), out / names[3]
            )
            write_tensorboard(out, records, {"extrapolate/accuracy_plot": png})
        remove_legacy_tensorboard(plan.run_dir)
        return [plan.run.eval_dir / name for name in (names[0], names[1], names[3])]
    # One evaluation's files are swapped in together, so JSON, CSV and plots always agree.
    with staged_dir(plan.run.eval_dir) as out:
        write_json_atomic(out / names[0], records)
        write_csv_atomic(out / names[1], records, csv_fields(records))
        write_json_atomic(out / names[2], per_position)
        ppl_png = save_figure_atomic(plot_ppl(records, plan.train_length, title), out / names[3])
        pos_png = save_figure_atomic(plot_per_position(per_position, title), out / names[4])
        write_tensorboard(
            out,
            records,
            {"extrapolate/ppl_plot": ppl_png, "extrapolate/per_position_loss": pos_png},
        )
    remove_legacy_tensorboard(plan.run_dir)
    return [plan.run.eval_dir / name for name in names]


def write_tensorboard(
    folder: Path, records: list[dict[str, Any]], images: dict[str, bytes]
) -> None:
    """Per method, ``extrapolate/<protocol>/ppl`` against length, as its own TensorBoard run.

    ``folder`` is the evaluation's staged ``eval/`` folder: each method writes into
    ``eval/<method>/``, so TensorBoard draws the methods of one card in different colours and
    names them in its run list and tooltips, and the plots go into ``eval/`` itself. Being part
    of the one staged set, the curves are swapped in with the JSON they come from, and a new
    evaluation replaces them whole, so they never duplicate or disagree with the records.
    """
    from matplotlib.image import imread
    from torch.utils.tensorboard import SummaryWriter

    for method in dict.fromkeys(r["method"] for r in records):
        points = sorted(
            (
                r
                for r in records
                if r["method"] == method and r["ppl"] is not None and math.isfinite(r["ppl"])
            ),
            key=lambda r: r["length"],
        )
        if not points:
            continue  # no card for a method with no number (e.g. past a learned table)
        writer = SummaryWriter(str(folder / method.replace(":", "-")))
        try:
            for r in points:
                metric = r.get("metric") or "ppl"
                depth = "" if r.get("depth") is None else f"_depth{r['depth']:g}"
                writer.add_scalar(
                    f"extrapolate/{r['protocol']}{depth}/{metric}", r[metric], r["length"]
                )
        finally:
            writer.close()
    writer = SummaryWriter(str(folder))
    try:
        step = max((r["length"] for r in records), default=0)
        # The measured numbers as a table: the charts' default smoothing (0.6) draws values
        # between the few lengths that were never measured; the Text tab shows them exactly.
        writer.add_text("extrapolate/table", markdown_table(records), step)
        for tag, png in images.items():  # the PNGs already rendered, not a second rendering
            writer.add_image(
                tag, imread(io.BytesIO(png), format="png")[..., :3], step, dataformats="HWC"
            )
    finally:
        writer.close()


def remove_legacy_tensorboard(run_dir: Path) -> None:
    """Drop the TensorBoard files earlier versions wrote outside ``eval/`` (their curves
    would stand beside the new ones)."""
    for old in run_dir.glob("events.out.tfevents.*.extrapolate"):
        old.unlink(missing_ok=True)
    shutil.rmtree(run_dir / "extrapolate", ignore_errors=True)


# Columns only some evaluations fill (task runs, passkey depths, sliding windows): left out of a
# CSV where no record has a value, so a language model's CSV has no empty task columns.
OPTIONAL_FIELDS = ("stride", "accuracy", "examples", "depth", "compile_seconds")


def csv_fields(records: list[dict[str, Any]]) -> list[str]:
    """FIELDS, without the optional ones no record fills."""
    return [
        f
        for f in FIELDS
        if f not in OPTIONAL_FIELDS or any(r.get(f) not in (None, "") for r in records)
    ]


def print_table(result: RunResult, console: Any = None, several: bool = False) -> None:
    """Rows method × protocol, columns lengths, cells ppl (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    lengths = sorted({r["length"] for r in result.records})
    accuracy = any(r.get("metric") == "accuracy" for r in result.records)
    what = "test exact-match accuracy" if accuracy else "test ppl"
    precision = next((r["precision"] for r in result.records if r.get("precision")), None)
    console.print(
        f"[bold]{result.run_dir if several else result.run_dir.name}[/bold]: {what}, "
        f"pe={result.pe}, trained at {result.train_length}"
        + (" tokens (longest row)" if accuracy else "")
        + (f", {precision} as trained" if precision else ""),
        soft_wrap=True,
    )
    table = Table()
    table.add_column("method")
    table.add_column("protocol")
    for n in lengths:
        table.add_column(
            f"{n}" if accuracy else f"{n}\n×{n / result.train_length:g}", justify="right"
        )
    for (method, protocol), by_len in table_rows(result.records).items():
        cells = (
            fmt_accuracy(by_len.get(n)) if accuracy else fmt_ppl(by_len.get(n)) for n in lengths
        )
        table.add_row(method, protocol, *cells)
    console.print(table)
    notes = sorted({r["note"] for r in result.records if r["ppl"] is None and r["note"]})
    for note in notes:
        console.print(f"  —: {note}", soft_wrap=True, highlight=False)
    extra = "" if accuracy else ", per_position.{json,png}"
    console.print(
        f"  wrote {RunDir(result.run_dir).eval_dir}/extrapolate.{{json,csv,png}}{extra}",
        soft_wrap=True,
        highlight=False,
    )


def table_rows(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """(method, protocol or key depth) -> length -> record: the rows of the eval tables."""
    rows: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in records:
        rows.setdefault((r["method"], panel(r)), {})[r["length"]] = r
    return rows


def markdown_table(records: list[dict[str, Any]]) -> str:
    """Rows method × protocol, columns lengths, cells ppl (or accuracy), as Markdown."""
    lengths = sorted({r["length"] for r in records})
    accuracy = any(r.get("metric") == "accuracy" for r in records)
    rows = table_rows(records)
    what = "exact-match accuracy" if accuracy else "perplexity"
    lines = [
        f"Measured {what} by evaluation length (exact values; the charts are smoothed).",
        "",
        "| method | protocol | " + " | ".join(f"{n:,}" for n in lengths) + " |",
        "|---|---|" + "---:|" * len(lengths),
    ]
    for (method, protocol), by_len in rows.items():
        fmt = fmt_accuracy if accuracy else fmt_ppl
        lines.append(
            f"| {method} | {protocol} | " + " | ".join(fmt(by_len.get(n)) for n in lengths) + " |"
        )
    return "\n".join(lines)


def fmt_accuracy(record: dict[str, Any] | None) -> str:
    """Accuracy with 3 decimals, '—' when missing or not applicable."""
    if record is None or record.get("accuracy") is None:
        return "—"
    return f"{record['accuracy']:.3f}"


def fmt_ppl(record: dict[str, Any] | None) -> str:
    """ppl with 2 decimals (one column, one format), '—' when missing or not applicable."""
    if record is None or record["ppl"] is None:
        return "—"
    ppl = record["ppl"]
    return f"{ppl:,.2f}" if ppl < 1e5 else f"{ppl:.2e}"
