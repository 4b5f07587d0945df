"""Every file posexp writes goes through here: a temporary file, then a rename.

Readers (TensorBoard, `posexp report`, a rerun sweep) never see half a file, and a run killed
at any moment leaves either the old file or the new one.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a file through a temporary file and a rename, so readers never see half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically."""
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON atomically."""
    write_bytes_atomic(path, json.dumps(data, indent=2, default=str).encode())


def write_csv_atomic(path: Path, rows: list[dict[str, Any]], fields: Sequence[str] | None = None) -> None:
    """CSV with a header, written atomically; None becomes an empty cell."""
    fields = list(fields or (list(rows[0]) if rows else []))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
    write_text_atomic(path, buf.getvalue())


def figure_png(fig: Any, fmt: str = "png", close: bool = True) -> bytes:
    """Render a matplotlib figure (PNG at 160 dpi, or ``fmt``: svg, pdf), then close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=160)
    if close:
        plt.close(fig)
    return buf.getvalue()


def save_figure_atomic(fig: Any, path: Path) -> bytes:
    """Save a figure as PNG plus a vector SVG beside it, atomically (and close it); PNG bytes."""
    write_bytes_atomic(path.with_suffix(".svg"), figure_png(fig, "svg", close=False))
    png = figure_png(fig)
    write_bytes_atomic(path, png)
    return png
