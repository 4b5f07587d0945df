"""What `posexp eval-extrapolate` writes: JSON/CSV records, plots, TensorBoard (the tables: ``tables.py``)."""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posexp.commands.extrapolate.plan import RunPlan
from posexp.commands.extrapolate.tables import (
    display_rows,
    headline,
    markdown_table,
    sorted_rows,
)
from posexp.extension.spec import format_value
from posexp.results.curves import CONTEXT_CURVES, plot_accuracy, plot_ppl, plot_run_buckets
from posexp.results.depths import over_depths
from posexp.results.positions import plot_per_position
from posexp.scoring import metric_of
from posexp.scoring.records import CELL_FIELDS, KEY_EXTRA, RECORDS, RUN_FIELDS, STALE, Record
from posexp.scoring.text import PER_POSITION_BUCKETS, bucket_edges
from posexp.store.files import (
    keep_damaged,
    save_figure_atomic,
    staged_current,
    staged_dir,
    write_csv_atomic,
    write_json_atomic,
    write_text_atomic,
)

# ---- outputs -------------------------------------------------------------------------------


def write_outputs(
    plan: RunPlan, records: list[Record], stale: list[Record], damaged: Sequence[str] = ()
) -> list[Path]:
    """JSON, CSV, plots (one per metric) and TensorBoard scalars of ``records`` (the run's
    current weights), ``stale.json`` for ``stale``: swapped in together, so they always agree.
    ``damaged``: record files read as empty under --force, kept beside the new ones as .bak."""
    rows = sorted_rows([{**r.view(), "at": i} for i, r in enumerate(records)])
    stored = [records[r.pop("at")].to_dict() for r in rows]  # as JSON keeps them, in order
    model = plan.meta["model"]
    if plan.task is not None:
        task = plan.task
        title = (
            f"{task.task.name}, pe={plan.pe}, {model['n_layers']} layers, {model['n_heads']} "
            f"heads, trained on sizes {task.train_lengths[0]}–{task.train_lengths[1]}"
        )
        span, unit = tuple(task.train_lengths), task.task.unit
    else:
        title = (
            f"pe={plan.pe}, d_model {model['d_model']}, {model['n_layers']} layers, "
            f"{model['n_heads']} heads, trained at {plan.train_length:,} tokens"
        )
        span, unit = (plan.train_length, plan.train_length), "tokens"
    names = [RECORDS, "extrapolate.csv"]
    previous = staged_current(plan.run.eval_dir)
    with staged_dir(plan.run.eval_dir) as out:
        # A damaged record file replaced under --force, and earlier backups, stay beside it.
        for name in damaged:
            backup = keep_damaged(previous / name)
            if backup is not None:
                os.replace(backup, out / backup.name)
        for old in previous.glob("*.bak*") if previous.is_dir() else ():
            if not (out / old.name).exists():
                shutil.copy2(old, out / old.name)
        write_json_atomic(out / RECORDS, stored)
        if stale:
            write_json_atomic(out / STALE, [r.to_dict() for r in stale])
            names.append(STALE)
        table = [{**r, "settings": settings_text(r.get("settings"))} for r in stored]
        write_csv_atomic(out / "extrapolate.csv", table, csv_fields(table))
        images = {}
        for i, (metric, shown) in enumerate(by_metric(display_rows(rows)).items()):
            name = "extrapolate.png" if i == 0 else f"extrapolate_{metric}.png"
            fig = (
                plot_ppl(shown, plan.train_length, title, metric)
                if metric_of(shown[0]["protocol"]).log_scale
                else plot_accuracy(over_depths(shown, metric), span, unit, title, metric)
            )
            images[f"extrapolate/{metric}_plot"] = save_figure_atomic(fig, out / name)
            names.append(name)
        for name, png in grid_figures(plan, records, title, out).items():
            images[f"extrapolate/{name.removesuffix('.png')}"] = png
            names.append(name)
        curves = per_position(rows, plan.train_length)
        if curves is not None:
            write_json_atomic(out / "per_position.json", curves)
            images["extrapolate/per_position_loss"] = save_figure_atomic(
                plot_per_position(curves, title), out / "per_position.png"
            )
            names += ["per_position.json", "per_position.png"]
        for protocol in CONTEXT_CURVES:  # context use: curves over positions in a document
            fig = plot_run_buckets(rows, protocol, plan.train_length, title)
            if fig is not None:
                name = f"context_use_{protocol}.png"
                images[f"extrapolate/context_use_{protocol}"] = save_figure_atomic(fig, out / name)
                names.append(name)
    # After the records are in place: the run's curves then never show cells it does not hold.
    write_tensorboard(plan.run_dir, display_rows(rows), images, plan.train_length, plan.pe)
    digest = records_digest(plan.run_dir)
    if digest is not None:  # the event file now holds these records (``tensorboard_stale``)
        write_text_atomic(plan.run_dir / EVENTS_OF, digest)
    return [plan.run.eval_dir / name for name in names]


# The hash of the records file the evaluation's event file was last written from: a process
# killed between the swap of eval/ and that write left new records with old events, and the
# next evaluation, finding nothing to score, said "unchanged" for ever.
EVENTS_OF = ".eval_events_of"


def records_digest(run_dir: Path) -> str | None:
    """SHA-256 of the run's kept records file; None when it has none."""
    try:
        return hashlib.sha256((staged_current(run_dir / "eval") / RECORDS).read_bytes()).hexdigest()
    except OSError:
        return None


def tensorboard_stale(run_dir: Path) -> bool:
    """True when the run's evaluation event file was not written from its records as they are
    (a kill between the two writes): the next evaluation writes its outputs again."""
    digest = records_digest(run_dir)
    if digest is None:
        return False
    try:
        return (run_dir / EVENTS_OF).read_text().strip() != digest
    except OSError:  # no mark: stale unless an event file of an earlier posexp is there
        return not any(run_dir.glob(f"events.out.tfevents.*{EVAL_EVENTS}"))


def grid_figures(plan: RunPlan, records: list[Record], title: str, out: Path) -> dict[str, bytes]:
    """The run's settings grids (a method whose specs vary in two or more settings) as heat maps
    in ``out``, the same view the report draws (``posexp.results.grid``): file name -> PNG."""
    from posexp.results.grid import grids, heat_map
    from posexp.results.summary import summarize
    from posexp.results.table import results_frame, run_rows

    found = grids(summarize(results_frame(run_rows(plan.run, records))))
    pngs = {}
    for i, grid in enumerate(found):
        name = f"grid_{i + 1}_{grid.method}_{grid.protocol}.png"
        pngs[name] = save_figure_atomic(heat_map(grid, f"{grid.title}\n{title}"), out / name)
    return pngs


def by_metric(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The records grouped by their headline metric (one figure each), in record order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.get("metric") or "ppl", []).append(r)
    return out


def per_position(rows: list[dict[str, Any]], train_length: int) -> dict[str, Any] | None:
    """Loss by position at the longest length scored with per-position losses: one curve per
    method (non-overlapping windows where scored, else sliding); None without such records."""
    with_curve = [r for r in rows if r.get("per_position")]
    if not with_curve:
        return None
    longest = max(r["length"] for r in with_curve)
    curves: dict[str, dict[str, Any]] = {}
    for r in with_curve:
        if r["length"] == longest and (r["method"] not in curves or r["protocol"] == "nonoverlap"):
            edges = bucket_edges(longest)
            curves[r["method"]] = {
                "name": r.get("name"),
                "protocol": r["protocol"],
                "start": edges[:-1],
                "end": edges[1:],
                "loss": r["per_position"],
            }
    return {
        "length": longest,
        "train_length": train_length,
        "buckets": PER_POSITION_BUCKETS,
        "methods": curves,
    }


# The evaluation's event file in the run dir (the run's own TensorBoard run) ends so.
EVAL_EVENTS = ".eval-extrapolate"


def write_tensorboard(
    run_dir: Path,
    records: list[dict[str, Any]],
    images: dict[str, bytes],
    train_length: int,
    pe: str = "",
) -> None:
    """The evaluation in the run's own TensorBoard run: one event file in ``run_dir``, rewritten
    from every current record at each evaluation, so points never duplicate or go stale.

    Tags ``extrapolate/<pe>/<protocol>/<metric>/<method>`` against length (one colour per run,
    as its training curves), a custom-scalars chart per PE, protocol and metric holding every
    method (in a sweep's TensorBoard: every seed of that PE, every method),
    ``eval/<metric>_x<ratio>`` (the unextended model at each multiple of the training length:
    the hparams table's test metrics, at the scored checkpoint's training step), the exact numbers as text and the rendered plots (the
    charts' smoothing draws values between lengths never measured; these are unsmoothed).
    """
    from matplotlib.image import imread

    from posexp.runtime.tensorboard import write_event_file

    curves = curve_points(records, pe)

    def fill(writer: Any) -> None:
        for tag, points in curves.items():
            for length, value in points:
                writer.add_scalar(tag, value, length)
        for tag, (value, step) in baseline_metrics(records, train_length).items():
            writer.add_scalar(tag, value, step)
        if curves:
            writer.add_custom_scalars(scalar_layout(curves))
        step = max((r["length"] for r in records), default=0)
        if records:
            writer.add_text("extrapolate/table", markdown_table(records), step)
        for tag, png in images.items():  # the PNGs already rendered, not a second rendering
            writer.add_image(
                tag, imread(io.BytesIO(png), format="png")[..., :3], step, dataformats="HWC"
            )

    write_event_file(run_dir, EVAL_EVENTS, fill)


def tag_label(label: str) -> str:
    """A method's label as it stands in a TensorBoard tag: its brackets square,
    ``yarn[factor=4]``.

    TensorBoard's custom-scalars chart names each curve ``<tag> (<run>)`` and takes the run back
    from the first ``(`` of that name: a round bracket in a tag yields no run, hence no colour,
    and the chart draws no line at all (the Scalars tab, which keeps the two apart, draws them)."""
    return label.replace("(", "[").replace(")", "]")


def curve_points(records: list[dict[str, Any]], pe: str = "") -> dict[str, list[tuple[int, float]]]:
    """``extrapolate/[<pe>/]<protocol>[_<task>][_depthD]/<metric>/<method>`` -> (length, value)
    by length, the method as :func:`tag_label` writes it; the cells without a number (past a
    learned table) are left out."""
    root = f"extrapolate/{pe}" if pe else "extrapolate"
    curves: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        value = headline(r)
        if value is None or not math.isfinite(value):
            continue
        depth = "" if r.get("depth") is None else f"_depth{r['depth']:g}"
        part = "" if r.get("task") is None else f"_{r['task']}"
        metric = r.get("metric") or "ppl"
        tag = f"{root}/{r['protocol']}{part}{depth}/{metric}/{tag_label(r['method'])}"
        curves.setdefault(tag, []).append((r["length"], float(value)))
    return {tag: sorted(points) for tag, points in curves.items()}


def scalar_layout(curves: dict[str, Any]) -> dict[str, dict[str, list[Any]]]:
    """Custom scalars: one multiline chart per PE (where the tags name it), protocol and
    metric, every method in it: a sweep's TensorBoard shows each PE's methods (and seeds) as
    the curves of one chart.

    A chart names its tags by prefix, not method by method: TensorBoard merges the runs'
    layouts and keeps one of two charts only when they are equal, so runs evaluated with other
    methods still share one chart per family (each run's methods in it)."""
    families = dict.fromkeys(tag.rsplit("/", 1)[0] for tag in curves)
    charts = {}
    for family in families:
        parts = family.removeprefix("extrapolate/").split("/")
        pe, (scorer, metric) = ("/".join(parts[:-2]), parts[-2:])
        title = f"{metric} by evaluation length, {scorer.replace('_', ' ')} (every method)"
        title = f"{pe}: {title}" if pe else title
        charts[title] = ["Multiline", [f"^{re.escape(family)}/"]]
    return {"extrapolation": charts}


def baseline_metrics(
    records: list[dict[str, Any]], train_length: int
) -> dict[str, tuple[float, int]]:
    """``eval/<metric>_x<ratio>`` -> (value, step): the unextended model's (method ``none``)
    first protocol at each length (its first row holding that length), named by its multiple of the training length, at the training
    step of the weights it scored (the step axis of every other scalar in the run; the length is
    in the name); a view without a checkpoint (a hand-made one) stands at step 0."""
    base = [
        r
        for r in records
        if r.get("name", r["method"]) == "none"
        and not r.get("baked")
        and r.get("depth") is None
        and r.get("task") is None  # one task of a mixture is not the run's headline
        and headline(r) is not None
        and math.isfinite(headline(r))
    ]
    if not base:
        return {}
    protocol = base[0]["protocol"]  # records come in display order
    scalars: dict[str, tuple[float, int]] = {}
    for r in base:
        # The first row that has the length: rows of one method apart by their token count
        # ("none [tokens 16,384]") may each hold lengths the other lacks.
        if r["protocol"] == protocol:
            scalars.setdefault(
                f"eval/{r.get('metric') or 'ppl'}_x{r['length'] / train_length:g}",
                (float(headline(r)), int((r.get("checkpoint") or {}).get("step", 0))),
            )
    return scalars


# Columns only some evaluations fill (task runs, passkey depths, sliding windows): left out of a
# CSV where no record has a value, so a language model's CSV has no empty task columns.
OPTIONAL_FIELDS = (
    "stride",
    "accuracy",
    "token_accuracy",
    "score",
    "examples",
    "depth",
    "task",
    "compile_seconds",
    "sample_size",
)


def settings_text(settings: dict[str, Any] | None) -> str:
    """A record's settings in one CSV cell, as a spec writes them: ``window=16 group=4``."""
    return " ".join(f"{k}={format_value(v)}" for k, v in (settings or {}).items())


def csv_fields(rows: list[dict[str, Any]]) -> list[str]:
    """The cell, the metric and the scorers' numbers, then the rest: every scalar field, without
    the optional ones no record fills (lists and mappings stay in the JSON)."""
    values = [
        k
        for r in rows
        for k, v in r.items()
        if k not in (*CELL_FIELDS, *KEY_EXTRA, *RUN_FIELDS, "metric", "settings", "checkpoint")
        and not isinstance(v, (list, dict))
    ]
    # The method's settings at their effective values, beside the cell (a string per row).
    shown = ["settings"] if any(r.get("settings") for r in rows) else []
    fields = [*CELL_FIELDS, *shown, "metric", *dict.fromkeys(values), "note", *KEY_EXTRA]
    fields += RUN_FIELDS[1:]
    return [
        f
        for f in fields
        if f not in OPTIONAL_FIELDS or any(r.get(f) not in (None, "") for r in rows)
    ]
