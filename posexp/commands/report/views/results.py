"""The report's results-table section: every evaluation of the report's jobs as one table
(``posexp.results.table``), exported one value a row (CSV, JSON lines, Parquet), its main
tables in LaTeX (``report.tex``), and each method's settings grid as tables and heat maps.
Glue only: every number here is a function of that table (``posexp.results``)."""

from __future__ import annotations

import pandas as pd

from posexp.commands.report.jobs import Job
from posexp.commands.report.view import ReportContext, register_report_view
from posexp.pe.base import describe_pe
from posexp.results.export import latex_document, latex_table, write_long
from posexp.results.grid import grid_markdown, grids, heat_map
from posexp.results.summary import main_table, summarize
from posexp.results.table import load_results
from posexp.store.files import write_text_atomic

LONG_STEM = "report_results"
LATEX = "report.tex"


def results_frame(ctx: ReportContext) -> pd.DataFrame:
    """The report's results table, read once per report."""
    if "results" not in ctx.memo:
        # jobs whose records cannot be read are named by the report once, not read again here
        ctx.memo["results"] = load_results([job.run for job in ctx.jobs if job.extrapolate])
    return ctx.memo["results"]


def pe_label(name: str) -> str:
    """A PE's display label."""
    return describe_pe(name).label


def render_results(ctx: ReportContext) -> str:
    """The exports, the LaTeX tables and the settings grids."""
    frame = results_frame(ctx)
    summary = summarize(frame, ctx.lineage())
    paths = write_long(frame, ctx.target / LONG_STEM)
    ctx.files += paths
    md = [
        "## Results table",
        "",
        "Every evaluation of these runs, one measured value a row (run, PE, seed, parent, method "
        "and each setting, length and × L0, protocol, metric, value, scored tokens, checkpoint): "
        + ", ".join(f"[{p.name}]({p.name})" for p in paths)
        + ".",
    ]
    tables = []
    primary = summary[["protocol", "metric"]].drop_duplicates().itertuples(index=False)
    for protocol, metric in primary:
        table = main_table(summary, protocol, metric, pe_label)
        if not table.empty:
            caption = f"{metric} by evaluation length ({protocol}); mean ± sample std over n seeds"
            tables.append(latex_table(table, caption))
    if tables:
        path = ctx.target / LATEX
        write_text_atomic(path, latex_document(tables))
        ctx.files.append(path)
        md += ["", f"The main tables in LaTeX (mean ± std and n): [{LATEX}]({LATEX})."]
    md += grid_sections(ctx, summary)
    return "\n".join(md)


def grid_sections(ctx: ReportContext, summary: pd.DataFrame) -> list[str]:
    """A table per length multiple and a heat map for each method whose specs vary in two or
    more settings."""
    md: list[str] = []
    for i, grid in enumerate(grids(summary)):
        title = grid.title.replace(f"({grid.pe}", f"({pe_label(grid.pe)}", 1)
        name = f"report_grid_{i + 1}_{grid.method}_{grid.protocol}.png"
        shown = grid.cells[["settings", "x_l0", "length", "mean", "std", "n"]].to_json()
        figure = ctx.drawn_already(name, title + shown) or ctx.save_figure(
            heat_map(grid, title), name
        )
        md += [
            "",
            f"### Grid: {title}",
            "",
            "Each cell: mean ± sample std over the seeds (n); `*` marks a setting's default, bold the "
            "cell of the method's defaults.",
            grid_markdown(grid),
            "",
            f"![{title}]({figure.name})",
        ]
    return md


def has_results(jobs: list[Job]) -> bool:
    """Any job with evaluation records."""
    return any(job.extrapolate for job in jobs)


register_report_view("results", has_results, render_results, order=90)
