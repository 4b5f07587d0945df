"""The head-count ablation's figures: metrics against heads, and the attention maps it copies."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from posexp.commands.report.views.heads.rows import BLEU, CHRF, HeadJob, Metric


def plot(rows: list[dict[str, Any]], metrics: list[Metric], title: str) -> Any:
    """Each metric against heads: mean ± std over seeds, every seed as a dot."""
    from matplotlib.figure import Figure

    done = [r for r in rows if r["seeds"] and r["h"]]
    shown = [m for m in metrics if m is not CHRF]
    fig = Figure(figsize=(5.2 * len(shown), 4.2), layout="constrained")
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    all_h = sorted({r["h"] for r in rows if r["h"]})
    for ax, m in zip(axes, shown, strict=True):
        hs = [r["h"] for r in done]
        ax.errorbar(
            hs,
            [r[f"{m.key}_mean"] for r in done],
            yerr=[r[f"{m.key}_std"] for r in done],
            marker="o",
            capsize=4,
            color="C0",
            label="mean ± std over seeds",
            zorder=3,
        )
        dots = [(r["h"], v) for r in done for v in r[f"{m.key}_values"]]
        if dots:
            ax.scatter(
                *zip(*dots, strict=True), s=14, color="C1", alpha=0.7, label="one seed", zorder=4
            )
        if m is BLEU:
            copy = next((r["copy_bleu"] for r in rows if r["copy_bleu"] is not None), None)
            if copy is not None:
                ax.axhline(copy, color="grey", linestyle="--", label=f"copy baseline ({copy:.1f})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_h, [str(h) for h in all_h])
        ax.minorticks_off()
        ax.yaxis.get_major_formatter().set_useOffset(False)
        ax.set_xlabel("heads h (d_k = d_model / h)")
        ax.set_ylabel(
            m.label + (" (lower is better)" if m.lower_is_better else " (higher is better)")
        )
        ax.set_title(f"{m.label} against heads", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    missing = [str(r["h"]) for r in rows if not r["seeds"]]
    note = f" (no completed job for heads = {', '.join(missing)})" if missing else ""
    fig.suptitle(title + note, fontsize=10)
    return fig


def copy_attention(jobs: list[HeadJob], out: Path) -> list[Path]:
    """The final attention maps (PNG, and SVG where saved) of the lowest completed seed per head
    count, copied into ``out``; returns the PNGs."""
    best: dict[int, HeadJob] = {}
    for j in jobs:
        if j.status == "completed" and j.heads is not None and j.path is not None:
            if j.heads not in best or (j.seed or 0) < (best[j.heads].seed or 0):
                best[j.heads] = j
    paths = []
    for h in sorted(best):
        j = best[h]
        # layer2 before layer10: by the number in the name
        layers = sorted(
            (j.path / "attention").glob("layer*.png"),
            key=lambda p: int("0" + "".join(c for c in p.stem if c.isdigit())),
        )
        for src in layers:
            out.mkdir(parents=True, exist_ok=True)
            dst = out / f"h{h}_seed{j.seed}_{src.name}"
            shutil.copyfile(src, dst)
            paths.append(dst)
            if src.with_suffix(".svg").is_file():  # the vector copy travels with it
                shutil.copyfile(src.with_suffix(".svg"), dst.with_suffix(".svg"))
    return paths
