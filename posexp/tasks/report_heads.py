"""Head-count ablation view of ``posexp report`` (Vaswani et al. 2017, Table 3 rows A).

Applies to a sweep of translation jobs that differ in ``heads`` (``experiment=head_ablation``).
Groups the jobs by head count and adds to the report:

* a section of ``report.md`` and ``report_heads.csv``: one row per head count with h, d_k, d_v,
  params, target PPL, test BLEU and chrF (mean ± sample std over the completed seeds), the copy
  baseline, the paper's PPL and BLEU beside them (reference.md §4), and the jobs' status. A job
  that failed (its reason shown), has no results.json (unfinished), or never started (the
  sweep's grid is read from ``multirun.yaml``) appears as such, never dropped;
* ``report_heads.png``: BLEU and PPL against heads (log2 axis, error bars = std over seeds,
  copy baseline dashed);
* ``attention/h<h>_seed<s>_layer<i>.png``: the final attention maps of the lowest completed seed
  of every head count (copied from the job's ``attention/``, written at the end of training).
"""

from __future__ import annotations

import math
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from posexp.tasks.report import register_report_view

# reference.md §4: Vaswani et al. 2017, Table 3 rows (A), EN-DE dev, d_model 512, N 6.
VASWANI = {1: (5.29, 24.9), 4: (5.00, 25.5), 8: (4.92, 25.8), 16: (4.91, 25.8), 32: (5.01, 25.4)}

CSV_FIELDS = [
    "h", "d_k", "d_v", "params", "ppl_mean", "ppl_std", "bleu_mean", "bleu_std", "chrf_mean",
    "chrf_std", "seeds", "copy_bleu", "copy_chrf", "vaswani_ppl", "vaswani_bleu", "status",
]


@dataclass
class HeadJob:
    """One job of the sweep as this view sees it: head count, seed, outcome."""

    name: str
    heads: int | None
    seed: int | None
    d_model: int | None
    status: str  # completed | failed | unfinished | not started
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    path: Path | None = None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def head_job(job: Any) -> HeadJob:
    """A ``posexp.tasks.report.Job`` seen as heads / seed / d_model / outcome."""
    cfg = job.config or {}
    heads = _int(cfg.get("heads", job.params.get("heads")))
    seed = _int(cfg.get("seed", job.params.get("seed")))
    d_model = _int((cfg.get("model") or {}).get("d_model"))
    metrics = {k: v for k, v in job.metrics.items() if k.startswith("final/")}
    return HeadJob(job.name, heads, seed, d_model, job.status, metrics, job.error, job.path)


def expected_grid(sweep_dir: Path) -> list[tuple[int, int]] | None:
    """(heads, seed) pairs the sweep was launched with, from ``multirun.yaml``; None if unknown."""
    path = sweep_dir / "multirun.yaml"
    if not path.exists():
        return None
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        cfg = OmegaConf.load(path)
        params = OmegaConf.to_container(cfg.hydra.sweeper.get("params") or {}, resolve=False)
        lines = [f"{k}={v}" for k, v in params.items()] + list(cfg.hydra.overrides.task)
        values: dict[str, list[Any]] = {}
        for o in OverridesParser.create().parse_overrides(lines):  # later lines win, as in Hydra
            key = o.get_key_element()
            if key in ("heads", "seed"):
                values[key] = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        heads = values.get("heads", [cfg.get("heads")])
        seeds = values.get("seed", [cfg.get("seed")])
        return [(int(h), int(s)) for h in heads for s in seeds]
    except Exception:  # an unreadable grid only loses the "not started" rows
        return None


def collect_jobs(target: Path, jobs: list[Any]) -> list[HeadJob]:
    """The sweep's jobs, plus "not started" placeholders for the rest of its grid."""
    out = [head_job(j) for j in jobs]
    grid = expected_grid(target)
    if grid:
        seen = {(j.heads, j.seed) for j in out}
        d_model = next((j.d_model for j in out if j.d_model), None)
        for h, s in grid:
            if (h, s) not in seen:
                out.append(HeadJob(f"heads={h},seed={s}", h, s, d_model, "not started",
                                   error="no job dir yet (pending, or the sweep stopped before it)"))
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value; nan for none)."""
    if not values:
        return math.nan, math.nan
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _fmt(m: float, s: float, n: int, digits: int) -> str:
    if n == 0 or math.isnan(m):
        return "–"
    return f"{m:.{digits}f}" if n == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"


def _status(jobs: list[HeadJob]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for j in jobs:
        counts[j.status] += 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def summarize(jobs: list[HeadJob]) -> list[dict[str, Any]]:
    """One row per head count (sorted; jobs without a readable head count last)."""
    groups: dict[int | None, list[HeadJob]] = defaultdict(list)
    for j in jobs:
        groups[j.heads].append(j)
    rows = []
    for h in sorted(groups, key=lambda x: (x is None, x or 0)):
        group = groups[h]
        done = [j for j in group if j.status == "completed"]
        d_model = next((j.d_model for j in group if j.d_model), None)
        d_k = d_model // h if d_model and h and d_model % h == 0 else None
        ppl = mean_std([float(j.metrics["final/val_ppl"]) for j in done if "final/val_ppl" in j.metrics])
        bleu = mean_std([float(j.metrics["final/bleu"]) for j in done if "final/bleu" in j.metrics])
        chrf = mean_std([float(j.metrics["final/chrf"]) for j in done if "final/chrf" in j.metrics])
        params = next((j.metrics.get("final/params") for j in done if "final/params" in j.metrics), None)
        copy_b = next((j.metrics.get("final/copy_bleu") for j in done if "final/copy_bleu" in j.metrics), None)
        copy_c = next((j.metrics.get("final/copy_chrf") for j in done if "final/copy_chrf" in j.metrics), None)
        params = int(params) if params is not None else None
        vas = VASWANI.get(h) if h is not None else None
        rows.append({
            "h": h, "d_k": d_k, "d_v": d_k, "params": params,
            "ppl_mean": ppl[0], "ppl_std": ppl[1], "bleu_mean": bleu[0], "bleu_std": bleu[1],
            "chrf_mean": chrf[0], "chrf_std": chrf[1], "seeds": len(done),
            "copy_bleu": copy_b, "copy_chrf": copy_c,
            "vaswani_ppl": vas[0] if vas else None, "vaswani_bleu": vas[1] if vas else None,
            "status": _status(group),
        })
    return rows


def _num(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return f"{int(v):,}"


def plot(rows: list[dict[str, Any]]):
    """BLEU (with the copy baseline) and PPL against heads, error bars over seeds."""
    from matplotlib.figure import Figure

    done = [r for r in rows if r["seeds"] and r["h"]]
    fig = Figure(figsize=(10, 4))
    ax_b, ax_p = fig.subplots(1, 2)
    hs = [r["h"] for r in done]
    all_h = sorted({r["h"] for r in rows if r["h"]})
    for ax, key, label in ((ax_b, "bleu", "test BLEU"), (ax_p, "ppl", "val PPL (target tokens)")):
        ax.errorbar(hs, [r[f"{key}_mean"] for r in done], yerr=[r[f"{key}_std"] for r in done],
                    marker="o", capsize=3, label="this sweep (mean ± std over seeds)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_h, [str(h) for h in all_h])
        ax.set_xlabel("heads h (d_k = d_model / h)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    copy = next((r["copy_bleu"] for r in rows if r["copy_bleu"] is not None), None)
    if copy is not None:
        ax_b.axhline(copy, color="grey", linestyle="--", label=f"copy baseline ({copy:.1f})")
    ax_b.legend(fontsize=8)
    ax_b.set_title("BLEU against heads", fontsize=10)
    ax_p.set_title("Perplexity against heads", fontsize=10)
    missing = [str(r["h"]) for r in rows if not r["seeds"]]
    if missing:
        fig.suptitle(f"no completed job for heads = {', '.join(missing)} (see the table)", fontsize=9)
    return fig


def copy_attention(jobs: list[HeadJob], out: Path) -> list[Path]:
    """The final attention PNGs of the lowest completed seed per head count, copied into ``out``."""
    best: dict[int, HeadJob] = {}
    for j in jobs:
        if j.status == "completed" and j.heads is not None and j.path is not None:
            if j.heads not in best or (j.seed or 0) < (best[j.heads].seed or 0):
                best[j.heads] = j
    paths = []
    for h in sorted(best):
        j = best[h]
        layers = sorted((j.path / "attention").glob("layer*.png"), key=lambda p: _number(p.stem))
        for src in layers:
            out.mkdir(parents=True, exist_ok=True)
            dst = out / f"h{h}_seed{j.seed}_{src.name}"
            shutil.copyfile(src, dst)
            paths.append(dst)
    return paths


def _number(stem: str) -> int:
    digits = "".join(c for c in stem if c.isdigit())
    return int(digits) if digits else 0


def table_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The Table-3 style Markdown table, one line per head count."""
    lines = [
        "| h | d_k | d_v | params | PPL | BLEU | chrF | seeds | copy BLEU | copy chrF "
        "| paper PPL | paper BLEU | jobs |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        n = r["seeds"]
        lines.append(
            f"| {_num(r['h'])} | {_num(r['d_k'])} | {_num(r['d_v'])} | {_num(r['params'])} "
            f"| {_fmt(r['ppl_mean'], r['ppl_std'], n, 2)} | {_fmt(r['bleu_mean'], r['bleu_std'], n, 2)} "
            f"| {_fmt(r['chrf_mean'], r['chrf_std'], n, 1)} | {n} | {_num(r['copy_bleu'])} "
            f"| {_num(r['copy_chrf'])} | {_num(r['vaswani_ppl'], 2)} | {_num(r['vaswani_bleu'])} "
            f"| {r['status']} |"
        )
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(ctx: Any) -> str:
    """The view: table, CSV, plot and attention maps; returns its Markdown section."""
    jobs = collect_jobs(ctx.target, ctx.jobs)
    rows = summarize(jobs)
    csv_path = ctx.write_csv("report_heads.csv", rows, CSV_FIELDS)
    png = ctx.save_figure(plot(rows), "report_heads.png")
    attention = copy_attention(jobs, ctx.target / "attention")
    ctx.files.extend(attention)
    d_models = sorted({j.d_model for j in jobs if j.d_model})
    lines = [
        "## Head-count ablation (Vaswani et al. 2017, Table 3 rows A)",
        "",
        f"Heads at fixed d_model = {', '.join(map(str, d_models)) or '?'} (d_k = d_v = d_model / h). "
        "PPL: validation perplexity on target tokens; BLEU / chrF: sacrebleu on greedy "
        "translations of the whole test split; mean ± sample std over the completed seeds. "
        "Copy baseline: each source verse copied as its own translation. Paper: Vaswani et al. "
        "2017, Table 3 rows (A) (EN-DE dev, d_model 512, 6 layers; reference.md §4), for the "
        "shape only.",
        "",
        *table_markdown(rows),
    ]
    bad = [j for j in jobs if j.status != "completed"]
    if bad:
        lines += ["", "Failed or unfinished jobs:", "", "| job | heads | seed | status | reason |",
                  "|---|---:|---:|---|---|"]
        for j in sorted(bad, key=lambda j: (j.heads or 0, j.seed or 0)):
            lines.append(f"| {_cell(j.name)} | {_num(j.heads)} | {_num(j.seed)} | {j.status} "
                         f"| {_cell(j.error)} |")
    lines += ["", f"Table as CSV: [{csv_path.name}]({csv_path.name}).", "",
              f"![BLEU and PPL against heads]({png.name})"]
    if attention:
        lines += ["", "Final attention maps (one fixed validation verse; lowest completed seed of "
                  "each head count; rows = queries, columns = keys, white lines = `<sep>`):", ""]
        lines += [f"![{p.stem}](attention/{p.name})" for p in attention]
    return "\n".join(lines)


def detect(jobs: list[Any]) -> bool:
    """Translation jobs (BLEU in their results, or a `translate:` config) that differ in heads."""
    heads = {head_job(j).heads for j in jobs}
    translation = any("final/bleu" in j.metrics or "translate" in (j.config or {}) for j in jobs)
    return translation and len(heads) > 1


register_report_view("head_ablation", detect, render, order=20)
