"""The tables of an evaluation's records: the one printed in the terminal, and the markdown one
TensorBoard shows; rows a method spec x protocol, columns the lengths, in the order of
``sorted_rows``."""

from __future__ import annotations

import math
from typing import Any

from posexp.commands.extrapolate.plan import RunResult
from posexp.results.depths import panel
from posexp.results.summary import SERIES_FIELDS
from posexp.scoring import metric_of
from posexp.store.rundir import RunDir


def display_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``rows`` for tables, plots and TensorBoard, in ``sorted_rows`` order, each
    ``method`` the series it
    belongs to: the label, plus the key fields that tell its cells from those of another
    evaluation of the same method (``none [tokens 4,096]`` beside ``none [tokens 2,048]``), so
    two evaluations never share a table row or a line."""
    rows = sorted_rows(rows)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["method"], panel(r)), []).append(r)
    out = []
    for r in rows:
        group = groups[(r["method"], panel(r))]
        extra = [
            text.format(r.get(name))
            for name, text in SERIES_FIELDS
            if len({g.get(name) for g in group}) > 1 and r.get(name) is not None
        ]
        out.append({**r, "method": f"{r['method']} [{', '.join(extra)}]" if extra else r["method"]})
    return out


def print_table(result: RunResult, console: Any = None, several: bool = False) -> None:
    """Rows method × protocol (or key depth), columns lengths, cells each row's metric (rich)."""
    from rich.table import Table
    from rich.text import Text

    from posexp.commands.console import stdout_console

    console = console or stdout_console()
    records = display_rows(result.records)
    lengths = sorted({r["length"] for r in records})
    task = any(
        r.get("metric") in ("accuracy", "score") and r.get("depth") is not None for r in records
    ) or all(r.get("metric") in ("accuracy", "score") for r in records)
    precision = next((r["precision"] for r in records if r.get("precision")), None)
    rows = table_rows(records)
    protocols = {protocol for _, protocol in rows}
    trained = f"trained at {result.train_length}" + (" tokens (longest row)" if task else "")
    if result.seq_len is not None:  # a fine-tune: the columns count from its parent's L0
        trained = f"fine-tuned at {result.seq_len} from L0 {result.train_length} (×1)"
    # Text, not markup: a run's path may hold brackets (a sweep over data.files=[a.txt]).
    name = str(result.run_dir if several else result.run_dir.name)
    about = (
        f": {metrics_text(records)}, pe={result.pe}, {trained}"
        + (f", {precision} as trained" if precision else "")
        + (f", {next(iter(protocols))}" if len(protocols) == 1 else "")
    )
    console.print(Text.assemble((name, "bold"), about), soft_wrap=True)
    headers = {n: f"{n}" if task else f"{n}\n×{n / result.train_length:g}" for n in lengths}
    widths = {
        n: max(
            *map(len, headers[n].split("\n")), *(len(cell_text(b.get(n))) for b in rows.values())
        )
        for n in lengths
    }
    # A narrow terminal (or a pipe: 80 columns) folds a long label onto more lines rather than
    # cutting it, so rows stay apart; the numbers are never cut: lengths that do not fit beside
    # the labels go on to a table of their own below.
    label = min(max((len(m) for m, _ in rows), default=6), 32)
    room = console.width - label - 4 - (14 if len(protocols) > 1 else 0)
    for part in column_groups(lengths, widths, room):
        table = Table()
        table.add_column("method", overflow="fold", min_width=label)
        if len(protocols) > 1:
            table.add_column(panel_header(records), overflow="fold", min_width=11)
        for n in part:
            table.add_column(headers[n], justify="right", no_wrap=True, min_width=widths[n])
        for (method, protocol), by_len in rows.items():
            shown = [protocol] if len(protocols) > 1 else []
            cells = [Text(method), *map(Text, shown), *(cell_text(by_len.get(n)) for n in part)]
            table.add_row(*cells)
        console.print(table)
    notes = sorted({r["note"] for r in records if headline(r) is None and r["note"]})
    for note in notes:
        console.print(f"  —: {note}", soft_wrap=True, highlight=False, markup=False)
    console.print(
        f"  wrote {RunDir(result.run_dir).eval_dir}/ ({count(len(records), 'record')} of these "
        "weights)"
        if result.scored
        else f"  {RunDir(result.run_dir).eval_dir}/ unchanged ({count(len(records), 'record')})",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )


def column_groups(lengths: list[int], widths: dict[int, int], room: int) -> list[list[int]]:
    """The length columns in groups whose cells (each its width, padding and rule: + 3) fit in
    ``room`` characters, in order; at least one column per group."""
    groups: list[list[int]] = [[]]
    used = 0
    for n in lengths:
        if groups[-1] and used + widths[n] + 3 > room:
            groups.append([])
            used = 0
        groups[-1].append(n)
        used += widths[n] + 3
    return groups


def count(n: int, noun: str) -> str:
    """``1 record``, ``2 records``."""
    return f"{n} {noun}{'s' * (n != 1)}"


def metrics_text(records: list[dict[str, Any]]) -> str:
    """What the cells hold: 'test perplexity', 'exact-match accuracy', or both."""
    labels = dict.fromkeys(metric_of(r["protocol"]).label for r in records)
    return " / ".join(labels) or "no records"


def headline(record: dict[str, Any]) -> Any:
    """A record's headline metric value (None: not applicable)."""
    return record.get(record.get("metric") or "ppl")


def cell_text(record: dict[str, Any] | None) -> str:
    """A record's headline metric with its metric's decimals, '—' when missing or n/a."""
    if record is None:
        return "—"
    return metric_of(record["protocol"]).format(headline(record))


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records in the order tables and plots show them: methods in registry order (then their
    settings), protocols in registry order, depths, lengths."""
    from posexp.scoring import SCORERS

    protocols = SCORERS.names()

    def key(r: dict[str, Any]) -> tuple:
        p = r["protocol"]
        return (
            # a record without its spec's sort key (hand-made) sorts after those with one
            r.get("order", (math.inf, r["method"])),
            protocols.index(p) if p in protocols else len(protocols),
            r.get("task") or "",
            -1.0 if r.get("depth") is None else r["depth"],
            r["length"],
        )

    return sorted(rows, key=key)


def table_rows(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """(method, protocol or key depth) -> length -> record: the rows of the eval tables."""
    rows: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for r in records:
        rows.setdefault((r["method"], panel(r)), {})[r["length"]] = r
    return rows


def panel_header(records: list[dict[str, Any]]) -> str:
    """The name of what tells a method's rows apart (``panel``): protocol, key depth or task."""
    if any(r.get("task") for r in records):
        return "task"
    return "key depth" if any(r.get("depth") is not None for r in records) else "protocol"


def markdown_table(records: list[dict[str, Any]]) -> str:
    """Rows method × protocol, columns lengths, cells each row's metric, as Markdown."""
    records = display_rows(records)
    lengths = sorted({r["length"] for r in records})
    lines = [
        f"Measured {metrics_text(records)} by evaluation length (exact values; the charts are "
        "smoothed).",
        "",
        f"| method | {panel_header(records)} | " + " | ".join(f"{n:,}" for n in lengths) + " |",
        "|---|---|" + "---:|" * len(lengths),
    ]
    for (method, protocol), by_len in table_rows(records).items():
        cells = " | ".join(cell_text(by_len.get(n)) for n in lengths)
        lines.append(f"| {method} | {protocol} | {cells} |")
    return "\n".join(lines)
