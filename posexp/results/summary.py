"""The results table summarised over seeds, and its main table: PEs and methods as rows,
lengths (with their multiple of L0) as columns, each cell mean ± std with n.

``summarize`` groups the rows of ``posexp.results.table.load_results`` that differ only in
their seed (and run) and keeps each seed's value, so a verdict can pair them; ``row_label``
names a row by its PE, its lineage (a fine-tune: what it changed) and its method spec;
``spec_order`` sorts specs by the method registry, then numerically by setting.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from posexp.results.verdict import mean_std

# What tells two summarised cells apart besides their row (the sample they were scored on).
CELL = ["protocol", "length", "x_l0", "l0", "stride", "sample_size", "precision", "depth", "task"]
ROW = ["pe", "lineage", "method", "spec", "baked"]


def lineage(frame: pd.DataFrame, changed: dict[str, str] | None = None) -> pd.Series:
    """Per row, '' for a run trained from scratch, else what its fine-tune changed
    (``changed``: run -> words, e.g. ``ft yarn x4 L256``; default ``fine-tuned``)."""
    changed = changed or {}
    return frame.apply(
        lambda r: "" if _missing(r["parent"]) else changed.get(r["run"], "fine-tuned"), axis=1
    )


def _missing(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def spec_order(frame: pd.DataFrame) -> dict[str, tuple]:
    """Each spec label -> its sort key: the method's registry order (a fine-tune's baked one
    first), then its settings by name, numerically (``yarn(factor=4)`` before
    ``yarn(factor=16)``), then an explicit factor. The label is never read back."""
    from posexp.extension.spec import spec_of

    out: dict[str, tuple] = {}
    for spec, rows in frame.groupby("spec", sort=False):
        first = rows.iloc[0]
        try:
            key = spec_of(first["method"], first["settings"], baked=bool(first["baked"])).sort_key
        except Exception:  # a method no longer registered sorts last, by its label
            key = (math.inf, spec)
        factors = set(rows["factor"])
        fixed = factors.pop() if len(factors) == 1 and rows["length"].nunique() > 1 else -math.inf
        out[str(spec)] = (*key[:3], fixed, str(spec))
    return out


def summarize(frame: pd.DataFrame, changed: dict[str, str] | None = None) -> pd.DataFrame:
    """The primary values of ``frame`` over seeds: one row per (PE, lineage, spec, cell) with
    ``mean``, ``std`` (sample), ``n``, ``values`` and ``seeds`` (in seed order), ``order`` (the
    spec's sort key), ``settings`` and ``factor``."""
    if frame.empty:
        return pd.DataFrame(columns=[*ROW, *CELL, "metric", "mean", "std", "n", "values"])
    frame = frame[frame["primary"]].copy()
    frame["lineage"] = lineage(frame, changed)
    order = spec_order(frame)
    keys = [*ROW, *CELL, "metric"]
    rows = []
    for _, group in frame.groupby([frame[k].astype(str) for k in keys], sort=False, dropna=False):
        group = group.sort_values("seed", key=lambda s: s.map(lambda v: -1 if v is None else v))
        values = [float(v) for v in group["value"]]
        mean, std = mean_std(values)
        first = group.iloc[0]
        rows.append(
            {
                **{k: first[k] for k in keys},
                "settings": first["settings"],
                "factor": first["factor"],
                "mean": mean,
                "std": std,
                "n": len(values),
                "values": values,
                "seeds": list(group["seed"]),
                "order": order[str(first["spec"])],
            }
        )
    return pd.DataFrame(rows)


def cell_text(mean: float, std: float, n: int, digits: int = 2) -> str:
    """``m ± s (n)``; ``m`` alone for one seed, ``–`` for none."""
    if not n or mean is None or math.isnan(mean):
        return "–"
    if n == 1:
        return f"{mean:.{digits}f}"
    if math.isinf(mean) or math.isnan(std):  # a diverged seed: no spread to state
        return f"{mean:.{digits}f} (n = {n})"
    return f"{mean:.{digits}f} ± {std:.{digits}f} (n = {n})"


def row_label(row: Any, pe_label: Any = None) -> str:
    """A table row's name: the PE (its display label), a fine-tune's lineage, the spec."""
    pe = pe_label(row["pe"]) if pe_label else row["pe"]
    tag = f" [{row['lineage']}]" if row["lineage"] else ""
    spec = "" if row["spec"] == "none" else f" + {row['spec']}"
    return f"{pe}{tag}{spec}"


def length_header(length: int, x_l0: float) -> str:
    """A length column's head: ``1,024 (8×)``."""
    return f"{int(length):,} ({x_l0:g}×)"


def main_table(
    summary: pd.DataFrame, protocol: str, metric: str, pe_label: Any = None
) -> pd.DataFrame:
    """One protocol's and metric's cells as a wide table: a row per PE (in declared order),
    lineage and spec (in ``spec_order``), a column per length with its multiple of L0; cells
    ``m ± s (n)``. Cells of other samples (sample size, stride, precision) are separate rows."""
    from posexp.pe.base import describe_pe

    mine = summary[(summary["protocol"] == protocol) & (summary["metric"] == metric)]
    if mine.empty:
        return pd.DataFrame()
    varying = [k for k in SAMPLE if mine[k].astype(str).nunique() > 1]
    mine = mine.assign(
        sample=mine.apply(lambda r: _sample_text(r, varying), axis=1),
        pe_order=mine["pe"].map(lambda p: describe_pe(p).sort_key),
    )
    mine = mine.sort_values(["pe_order", "lineage", "order", "sample", "length"], kind="stable")
    lengths = sorted({(int(r.length), float(r.x_l0)) for r in mine.itertuples()})
    table: dict[str, dict[str, str]] = {}
    for _, r in mine.iterrows():
        label = row_label(r, pe_label) + (f" [{r['sample']}]" if r["sample"] else "")
        digits = 3 if metric in ("accuracy", "score") else 2
        table.setdefault(label, {})[length_header(r["length"], r["x_l0"])] = cell_text(
            r["mean"], r["std"], r["n"], digits
        )
    columns = [length_header(n, x) for n, x in lengths]
    return pd.DataFrame.from_dict(table, orient="index", columns=columns).fillna("")


# Key fields that split a method's records into separate series (samples) when they vary.
SERIES_FIELDS = (("sample_size", "tokens {:,}"), ("stride", "stride {}"), ("precision", "{}"))
SAMPLE = dict(SERIES_FIELDS)


def _sample_text(row: Any, fields: list[str]) -> str:
    """How a cell was scored, by the ``fields`` that vary among its table's rows
    (``tokens 16,384, stride 32``): cells of two samples are never one row."""
    parts = []
    for name in fields:
        value = row[name]
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            parts.append(SAMPLE[name].format(int(value) if name != "precision" else value))
    return ", ".join(parts)


def markdown(table: pd.DataFrame, corner: str = "PE + method") -> str:
    """A wide table as Markdown, its index as the first column."""
    header = [corner, *table.columns]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":--", *["--:"] * len(table.columns)]) + "|",
    ]
    for label, row in table.iterrows():
        lines.append("| " + " | ".join([str(label), *(str(v) for v in row)]) + " |")
    return "\n".join(lines)
