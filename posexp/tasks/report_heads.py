"""Head-count ablation report (Vaswani et al. 2017, Table 3 rows A) for a translation sweep dir.

Reads every job of a sweep (``<sweep>/<job>/.hydra/config.yaml`` and ``results.json``), groups
jobs by head count and writes into the sweep dir:

* ``report.md`` / ``report.csv``: one row per head count with h, d_k, d_v, params, target PPL,
  test BLEU and chrF (mean ± sample std over the completed seeds), the copy baseline, the paper's
  PPL and BLEU beside them (reference.md §4), and the jobs' status. A job that failed (its reason
  shown) or has no results.json (unfinished, or not started when the sweep's grid is known from
  ``multirun.yaml``) appears as such, never dropped;
* ``report_heads.png``: BLEU and PPL against heads (log2 axis, error bars = std over seeds,
  copy baseline dashed);
* ``attention/h<h>_seed<s>_layer<i>.png``: the final attention maps of the lowest completed seed
  of every head count (copied from the job's ``attention/`` folder).
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from posexp.errors import PosexpError

# reference.md §4: Vaswani et al. 2017, Table 3 rows (A), EN-DE dev, d_model 512, N 6.
VASWANI = {1: (5.29, 24.9), 4: (5.00, 25.5), 8: (4.92, 25.8), 16: (4.91, 25.8), 32: (5.01, 25.4)}

CSV_FIELDS = [
    "h", "d_k", "d_v", "params", "ppl_mean", "ppl_std", "bleu_mean", "bleu_std", "chrf_mean",
    "chrf_std", "seeds", "copy_bleu", "copy_chrf", "vaswani_ppl", "vaswani_bleu", "status",
]


@dataclass
class Job:
    """One job of the sweep: its dir, settings and outcome."""

    name: str
    heads: int | None
    seed: int | None
    d_model: int | None
    status: str  # completed | failed | unfinished | not started
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    path: Path | None = None


@dataclass
class HeadAblationReport:
    """What the view produces: Markdown text, CSV rows, and the PNGs it wrote."""

    markdown: str
    rows: list[dict[str, Any]]
    pngs: list[Path]


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def read_job(job_dir: Path) -> Job:
    """A job's heads/seed/d_model from its saved config, and its status from results.json."""
    cfg = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
    heads, seed = _int(cfg.get("heads")), _int(cfg.get("seed"))
    d_model = _int(OmegaConf.select(cfg, "model.d_model"))
    results = job_dir / "results.json"
    if not results.exists():
        meta = job_dir / "checkpoint" / "meta.json"
        step = json.loads(meta.read_text()).get("step") if meta.exists() else None
        why = f"no results.json (last checkpoint at step {step})" if step else "no results.json"
        return Job(job_dir.name, heads, seed, d_model, "unfinished", error=why, path=job_dir)
    data = json.loads(results.read_text())
    status = data.get("status", "unknown")
    error = str(data.get("error", "")) if status != "completed" else ""
    metrics = {k: v for k, v in data.items() if k.startswith("final/")}
    return Job(job_dir.name, heads, seed, d_model, status, metrics, error, job_dir)


def job_dirs(sweep_dir: Path) -> list[Path]:
    """Sub-dirs of the sweep holding a Hydra job (a ``.hydra/config.yaml``), sorted."""
    return sorted(p.parent.parent for p in sweep_dir.glob("*/.hydra/config.yaml"))


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
        for o in OverridesParser.create().parse_overrides(lines):
            key = o.get_key_element()
            if key in ("heads", "seed"):
                values[key] = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        heads = values.get("heads", [cfg.get("heads")])
        seeds = values.get("seed", [cfg.get("seed")])
        return [(int(h), int(s)) for h in heads for s in seeds]
    except Exception:  # an unreadable grid only loses the "not started" rows
        return None


def collect_jobs(sweep_dir: Path) -> list[Job]:
    """Every job in the sweep dir, plus "not started" placeholders for the rest of the grid."""
    jobs = [read_job(d) for d in job_dirs(sweep_dir)]
    grid = expected_grid(sweep_dir)
    if grid:
        seen = {(j.heads, j.seed) for j in jobs}
        d_model = next((j.d_model for j in jobs if j.d_model), None)
        for h, s in grid:
            if (h, s) not in seen:
                jobs.append(Job(f"heads={h} seed={s}", h, s, d_model, "not started",
                                error="no job dir (the sweep stopped before it)"))
    return jobs


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


def _status(jobs: list[Job]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for j in jobs:
        counts[j.status] += 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def summarize(jobs: list[Job]) -> list[dict[str, Any]]:
    """One row per head count (sorted; jobs without a readable head count last)."""
    groups: dict[int | None, list[Job]] = defaultdict(list)
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
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.{digits}f}"
    return f"{int(v):,}"


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """BLEU (with the copy baseline) and PPL against heads, error bars over seeds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    done = [r for r in rows if r["seeds"] and r["h"]]
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax_b, ax_p = fig.subplots(1, 2)
    hs = [r["h"] for r in done]
    for ax, key, label in ((ax_b, "bleu", "test BLEU"), (ax_p, "ppl", "val PPL (target tokens)")):
        ax.errorbar(hs, [r[f"{key}_mean"] for r in done], yerr=[r[f"{key}_std"] for r in done],
                    marker="o", capsize=3, label="this sweep (mean ± std over seeds)")
        ax.set_xscale("log", base=2)
        all_h = sorted({r["h"] for r in rows if r["h"]})
        ax.set_xticks(all_h, [str(h) for h in all_h])
        ax.set_xlabel("heads h (d_k = d_model / h)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    copy = next((r["copy_bleu"] for r in rows if r["copy_bleu"] is not None), None)
    if copy is not None:
        ax_b.axhline(copy, color="grey", linestyle="--", label=f"copy baseline ({copy:.1f})")
    ax_b.legend(fontsize=8)
    ax_b.set_title("BLEU against heads")
    ax_p.set_title("Perplexity against heads")
    missing = [str(r["h"]) for r in rows if not r["seeds"]]
    if missing:
        fig.suptitle(f"no completed job for heads = {', '.join(missing)} (see report.md)", fontsize=9)
    fig.savefig(path, dpi=110)
    return path


def copy_attention(jobs: list[Job], out: Path) -> list[Path]:
    """The final attention PNGs of the lowest completed seed per head count, copied into ``out``."""
    paths = []
    best: dict[int, Job] = {}
    for j in jobs:
        if j.status == "completed" and j.heads is not None and j.path is not None:
            if j.heads not in best or (j.seed or 0) < (best[j.heads].seed or 0):
                best[j.heads] = j
    for h in sorted(best):
        j = best[h]
        for src in sorted((j.path / "attention").glob("layer*.png")):
            out.mkdir(parents=True, exist_ok=True)
            dst = out / f"h{h}_seed{j.seed}_{src.name}"
            shutil.copyfile(src, dst)
            paths.append(dst)
    return paths


def render_head_ablation(sweep_dir: Path | str) -> HeadAblationReport:
    """Write report.md, report.csv, report_heads.png and attention PNGs into the sweep dir."""
    sweep = Path(sweep_dir)
    if not sweep.is_dir():
        raise PosexpError(f"sweep dir not found: {str(sweep)!r}")
    jobs = collect_jobs(sweep)
    if not jobs:
        raise PosexpError(f"no jobs in {str(sweep)!r}; expected <sweep>/<job>/.hydra/config.yaml")
    rows = summarize(jobs)
    png = plot(rows, sweep / "report_heads.png")
    attention = copy_attention(jobs, sweep / "attention")

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    (sweep / "report.csv").write_text(buf.getvalue())

    d_models = sorted({j.d_model for j in jobs if j.d_model})
    lines = [
        f"# Head-count ablation: {sweep.name}",
        "",
        f"Heads at fixed d_model = {', '.join(map(str, d_models)) or '?'} (d_k = d_v = d_model / h). "
        "PPL: validation perplexity on target tokens; BLEU / chrF: sacrebleu on greedy "
        "translations of the full test split; mean ± sample std over completed seeds. "
        "Copy baseline: the source verse itself as the translation. Paper: Vaswani et al. 2017, "
        "Table 3 rows (A) (EN-DE dev, d_model 512, 6 layers; reference.md §4), for the shape only.",
        "",
        "| h | d_k | d_v | params | PPL | BLEU | chrF | seeds | copy BLEU | copy chrF "
        "| paper PPL | paper BLEU | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
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
    bad = [j for j in jobs if j.status != "completed"]
    if bad:
        lines += ["", "## Failed or unfinished jobs", "", "| job | heads | seed | status | reason |",
                  "|---|---|---|---|---|"]
        for j in sorted(bad, key=lambda j: (j.heads or 0, j.seed or 0)):
            reason = j.error.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {j.name} | {_num(j.heads)} | {_num(j.seed)} | {j.status} | {reason} |")
    lines += ["", f"![BLEU and PPL against heads]({png.name})"]
    if attention:
        lines += ["", "## Final attention maps (one fixed validation verse, lowest completed seed)", ""]
        lines += [f"![{p.stem}](attention/{p.name})" for p in attention]
    markdown = "\n".join(lines) + "\n"
    (sweep / "report.md").write_text(markdown)
    return HeadAblationReport(markdown, rows, [png, *attention])


def is_head_ablation(sweep_dir: Path | str) -> bool:
    """True for a sweep of translation jobs that differ in head count."""
    jobs = [read_job(d) for d in job_dirs(Path(sweep_dir))]
    pairs = any("final/bleu" in j.metrics for j in jobs)
    multirun = Path(sweep_dir) / "multirun.yaml"
    named = multirun.exists() and "head_ablation" in multirun.read_text()
    return named or (pairs and len({j.heads for j in jobs}) > 1)
