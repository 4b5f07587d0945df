"""The extrapolation view's figure: test perplexity against length, one line per column, with
the seeds' spread as a band where a column has several."""

from __future__ import annotations

from pathlib import Path

from posexp.commands.report.view import ReportContext
from posexp.commands.report.views.extrapolation_data import Column


def extrapolation_plot(
    ctx: ReportContext, columns: list[Column], protocol: str, l0: int | None
) -> Path:
    """ppl against length (log-log, plain ticks), one line per column, styles that stay distinct."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from posexp.commands.extrapolate.plots import MARKERS, plain_log_axes

    fig, ax = plt.subplots(figsize=(9.5, 5.0), layout="constrained")
    palette = plt.get_cmap("tab10" if len(columns) <= 10 else "tab20").colors
    lengths: set[int] = set()
    for i, c in enumerate(columns):
        pts = sorted(
            (n, r["ppl"])
            for (p, n), r in c.records.items()
            if p == protocol and r.get("ppl") is not None
        )
        if pts:
            lengths.update(n for n, _ in pts)
            style = "-" if c.method == "none" else "--"
            color = palette[i % len(palette)]
            seeds = max((r.get("n", 1) for r in c.records.values()), default=1)
            ax.plot(
                *zip(*pts, strict=True),
                style,
                marker=MARKERS[i % len(MARKERS)],
                markersize=8 - 1.5 * (i % 4),
                label=c.label + (f" (n = {seeds})" if seeds > 1 else ""),
                color=color,
            )
            band = sorted(
                (n, r["ppl"] - r["ppl_std"], r["ppl"] + r["ppl_std"])
                for (p, n), r in c.records.items()
                if p == protocol and r.get("ppl") is not None and r.get("n", 1) > 1
            )
            if band and c.method == "none":  # mean ± one seed std (methods' would pile up)
                xs, lo, hi = zip(*band, strict=True)
                ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
    if l0:
        ax.axvline(l0, color="grey", linestyle=":", linewidth=1, label=f"training length ({l0:,})")
    if lengths:
        plain_log_axes(ax, sorted(lengths))
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("test perplexity (log scale)")
    several = any(r.get("n", 1) > 1 for c in columns for r in c.records.values())
    ax.set_title(
        f"Test perplexity against evaluation length ({protocol} windows)\n"
        "solid: no extension, dashed: with one"
        + ("; lines: seed mean, bands: ± one seed std" if several else ""),
        fontsize=10,
    )
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    return ctx.save_figure(fig, f"report_extrapolation_{protocol}.png")
