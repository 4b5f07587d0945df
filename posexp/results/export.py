"""Exports of the results table for a paper: long-format CSV, JSON lines and Parquet (one
measured value a row, every column of ``posexp.results.table``), and LaTeX tables of mean ± std
with n. Each file is written atomically."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from posexp.errors import PosexpError
from posexp.store.files import write_bytes_atomic, write_text_atomic

FORMATS = ("csv", "jsonl", "parquet")


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """The table with its settings dict as JSON text (CSV and Parquet hold no dicts)."""
    out = frame.copy()
    if "settings" in out:
        out["settings"] = out["settings"].map(lambda s: json.dumps(s, sort_keys=True))
    return out


def write_long(frame: pd.DataFrame, stem: Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """``<stem>.csv``, ``.jsonl`` and ``.parquet`` of ``frame``, one value a row; the paths."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise PosexpError(
            f"results export: unknown format {bad[0]!r}; allowed: {', '.join(FORMATS)}"
        )
    paths = []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        if fmt == "csv":
            write_text_atomic(path, _plain(frame).to_csv(index=False))
        elif fmt == "jsonl":
            lines = [json.dumps(_json_row(r), default=str) for r in frame.to_dict("records")]
            write_text_atomic(path, "".join(line + "\n" for line in lines))
        else:
            buffer = io.BytesIO()
            _plain(frame).to_parquet(buffer, index=False)
            write_bytes_atomic(path, buffer.getvalue())
        paths.append(path)
    return paths


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row with pandas' missing values as null and non-finite floats as strings."""
    out = {}
    for k, v in row.items():
        if v is pd.NA or (isinstance(v, float) and math.isnan(v)):
            v = None
        elif isinstance(v, float) and math.isinf(v):
            v = "inf" if v > 0 else "-inf"
        elif hasattr(v, "item"):  # numpy scalars
            v = v.item()
        out[k] = v
    return out


LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped, ± and × as math."""
    out = "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    return out.replace("±", r"$\pm$").replace("×", r"$\times$").replace("–", "--")


def latex_table(table: pd.DataFrame, caption: str, corner: str = "PE + method") -> str:
    """A wide table (index: row labels) as a LaTeX ``table`` with booktabs rules."""
    columns = "l" + "r" * len(table.columns)
    head = " & ".join(latex_escape(c) for c in [corner, *table.columns])
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\begin{{tabular}}{{{columns}}}",
        r"\toprule",
        head + r" \\",
        r"\midrule",
    ]
    for label, row in table.iterrows():
        lines.append(" & ".join(latex_escape(v) for v in [label, *row]) + r" \\")
    lines += [
        r"\bottomrule",
        r"\end{tabular}",
        rf"\caption{{{latex_escape(caption)}}}",
        r"\end{table}",
    ]
    return "\n".join(lines)


def latex_document(tables: list[str]) -> str:
    """Tables as a standalone LaTeX file (``booktabs``); its body can be pasted into a paper."""
    return "\n".join(
        [
            r"\documentclass{article}",
            r"\usepackage{booktabs}",
            r"\begin{document}",
            *(t + "\n" for t in tables),
            r"\end{document}",
            "",
        ]
    )
