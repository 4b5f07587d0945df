"""Head-count ablation view of ``posexp report`` (Vaswani et al. 2017, Table 3 rows A).

Applies to a sweep whose jobs differ in ``heads`` and in nothing else but ``seed``: translation
(``experiment=head_ablation``) or language modelling (``experiment=head_ablation_cpu``).
Groups the jobs by head count and adds to the report:

* a verdict computed from the numbers: is h = 1 worse than the best head count by more than two
  seed standard deviations (the larger of the two groups' sample std, at least 3 seeds each) in
  the primary metric: target PPL for translation, bits per byte for a byte-level language model
  (nats per token for other tokenizers); for translation, also BLEU against the copy baseline;
* a section of ``report.md`` and ``report_heads.csv``: one row per head count with h, d_k, d_v,
  params, the metrics (mean ± sample std over the completed seeds), for translation the copy
  baseline and the paper's PPL and BLEU beside them (Vaswani et al. 2017), and the jobs' status. A job
  that failed (its reason shown), has no results.json (unfinished), or never started (the
  sweep's grid is read from ``multirun.yaml``) appears as such, never dropped;
* ``report_heads.png`` (and ``.svg``): the metrics against heads (log2 axis, error bars = std
  over seeds, every seed as a dot, copy baseline dashed);
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

from posexp.commands.report.view import register_report_view

# Vaswani et al. 2017, Table 3 rows (A), EN-DE dev, d_model 512, N 6: h -> (PPL, BLEU).
VASWANI = {1: (5.29, 24.9), 4: (5.00, 25.5), 8: (4.92, 25.8), 16: (4.91, 25.8), 32: (5.01, 25.4)}
MIN_SEEDS = 3  # the verdict needs at least this many completed seeds per compared head count

CSV_FIELDS = [
    "h", "d_k", "d_v", "params", "ppl_mean", "ppl_std", "bleu_mean", "bleu_std", "chrf_mean",
    "chrf_std", "bpb_mean", "bpb_std", "loss_mean", "loss_std", "seeds", "copy_bleu", "copy_chrf",
    "vaswani_ppl", "vaswani_bleu", "status",
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


@dataclass(frozen=True)
class Metric:
    """A per-job number the view aggregates: its result key, label and direction."""

    key: str  # short name in the rows: ppl, bleu, chrf, bpb, loss
    label: str
    lower_is_better: bool
    digits: int


PPL = Metric("ppl", "PPL", True, 2)
BLEU = Metric("bleu", "BLEU", False, 2)
CHRF = Metric("chrf", "chrF", False, 1)
BPB = Metric("bpb", "bits per byte", True, 4)
LOSS = Metric("loss", "loss (nats per token)", True, 4)


def job_value(job: HeadJob, key: str) -> float | None:
    """The job's value of metric ``key`` from its final metrics (None if it has none)."""
    m = job.metrics
    raw = {"ppl": m.get("final/val_ppl"), "bleu": m.get("final/bleu"), "chrf": m.get("final/chrf"),
           "loss": m.get("final/val_loss")}
    if key == "bpb":
        raw["bpb"] = None if m.get("final/val_loss") is None else m["final/val_loss"] / math.log(2)
    value = raw.get(key)
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def head_job(job: Any) -> HeadJob:
    """A ``posexp.commands.report.jobs.Job`` seen as heads / seed / d_model / outcome."""
    cfg = job.config
    heads = cfg.heads if cfg else _int(job.params.get("heads"))
    seed = cfg.seed if cfg else _int(job.params.get("seed"))
    d_model = cfg.model.d_model if cfg else None
    metrics = {k: v for k, v in job.metrics.items() if k.startswith("final/")}
    return HeadJob(job.name, heads, seed, d_model, job.status, metrics, job.error, job.path)


def is_translation(jobs: list[Any]) -> bool:
    """Translation jobs: BLEU in their results, or a parallel corpus as their data."""
    return any("final/bleu" in j.metrics or (j.config and j.config.data.name == "wyc2kjv")
               for j in jobs)


def metrics_for(jobs: list[Any]) -> list[Metric]:
    """The metrics to show, the primary one (the verdict's) first."""
    if is_translation(jobs):
        return [PPL, BLEU, CHRF]
    byte = all(j.config is None or j.config.tokenizer.name == "byte" for j in jobs)
    return [BPB if byte else LOSS, PPL]


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


def summarize(jobs: list[HeadJob], metrics: list[Metric]) -> list[dict[str, Any]]:
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

        def first(key: str, done: list[HeadJob] = done) -> Any:
            return next((j.metrics[key] for j in done if j.metrics.get(key) is not None), None)

        params = first("final/params")
        vas = VASWANI.get(h) if h is not None and BLEU in metrics else None
        row: dict[str, Any] = {
            "h": h, "d_k": d_k, "d_v": d_k, "params": int(params) if params is not None else None,
            "seeds": len(done), "copy_bleu": first("final/copy_bleu"),
            "copy_chrf": first("final/copy_chrf"),
            "vaswani_ppl": vas[0] if vas else None, "vaswani_bleu": vas[1] if vas else None,
            "status": _status(group),
        }
        for m in metrics:
            values = [v for v in (job_value(j, m.key) for j in done) if v is not None]
            row[f"{m.key}_values"] = values
            row[f"{m.key}_mean"], row[f"{m.key}_std"] = mean_std(values)
        rows.append(row)
    return rows


def verdict(rows: list[dict[str, Any]], metric: Metric) -> str:
    """Whether h = 1 is worse than the best head count beyond seed noise, in words and numbers."""
    scored = [r for r in rows if r["h"] and len(r.get(f"{metric.key}_values", [])) > 0]
    one = next((r for r in scored if r["h"] == 1), None)
    if one is None or len(scored) < 2:
        return "No verdict: the sweep needs completed jobs for h = 1 and another head count."
    sign = 1 if metric.lower_is_better else -1
    best = min((r for r in scored if r["h"] != 1), key=lambda r: sign * r[f"{metric.key}_mean"])
    gap = sign * (one[f"{metric.key}_mean"] - best[f"{metric.key}_mean"])
    noise = max(one[f"{metric.key}_std"], best[f"{metric.key}_std"])
    n = min(one["seeds"], best["seeds"])
    d = metric.digits
    what = (f"h = 1 scores {one[f'{metric.key}_mean']:.{d}f} {metric.label} against "
            f"{best[f'{metric.key}_mean']:.{d}f} for the best other head count (h = {best['h']})")
    if n < MIN_SEEDS:
        return (f"{what}; no verdict on seed noise: {n} completed seed(s), the test needs "
                f"{MIN_SEEDS} per head count.")
    if gap <= 0:
        return f"{what}: h = 1 is not worse, so this sweep does not show Table 3's effect."
    ratio = gap / noise if noise > 0 else math.inf
    shown = ("beyond seed noise: this sweep shows Table 3's effect" if ratio > 2 else
             "within seed noise: this sweep does not show Table 3's effect")
    return (f"{what}: worse by {gap:.{d}f}, {ratio:.1f}× the larger seed std ({noise:.{d}f}, "
            f"{n}+ seeds each), {shown} (criterion: more than 2 std).")


def bleu_sentence(rows: list[dict[str, Any]]) -> str:
    """Best BLEU against the copy baseline, in words."""
    scored = [r for r in rows if r["seeds"] and not math.isnan(r["bleu_mean"])]
    copy = next((r["copy_bleu"] for r in rows if r["copy_bleu"] is not None), None)
    if not scored or copy is None:
        return ""
    best = max(scored, key=lambda r: r["bleu_mean"])
    side = "above" if best["bleu_mean"] > copy else "below"
    return (f"Best test BLEU {best['bleu_mean']:.2f} (h = {best['h']}) is {side} the copy "
            f"baseline's {copy:.2f}.")


def _num(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return f"{int(v):,}"


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
        ax.errorbar(hs, [r[f"{m.key}_mean"] for r in done], yerr=[r[f"{m.key}_std"] for r in done],
                    marker="o", capsize=4, color="C0", label="mean ± std over seeds", zorder=3)
        dots = [(r["h"], v) for r in done for v in r[f"{m.key}_values"]]
        if dots:
            ax.scatter(*zip(*dots, strict=True), s=14, color="C1", alpha=0.7, label="one seed",
                       zorder=4)
        if m is BLEU:
            copy = next((r["copy_bleu"] for r in rows if r["copy_bleu"] is not None), None)
            if copy is not None:
                ax.axhline(copy, color="grey", linestyle="--", label=f"copy baseline ({copy:.1f})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_h, [str(h) for h in all_h])
        ax.minorticks_off()
        ax.yaxis.get_major_formatter().set_useOffset(False)
        ax.set_xlabel("heads h (d_k = d_model / h)")
        ax.set_ylabel(m.label + (" (lower is better)" if m.lower_is_better else " (higher is better)"))
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
        layers = sorted((j.path / "attention").glob("layer*.png"), key=lambda p: _number(p.stem))
        for src in layers:
            out.mkdir(parents=True, exist_ok=True)
            dst = out / f"h{h}_seed{j.seed}_{src.name}"
            shutil.copyfile(src, dst)
            paths.append(dst)
            if src.with_suffix(".svg").is_file():  # the vector copy travels with it
                shutil.copyfile(src.with_suffix(".svg"), dst.with_suffix(".svg"))
    return paths


def _number(stem: str) -> int:
    digits = "".join(c for c in stem if c.isdigit())
    return int(digits) if digits else 0


def table_markdown(rows: list[dict[str, Any]], metrics: list[Metric]) -> list[str]:
    """The Table-3 style Markdown table, one line per head count."""
    translation = BLEU in metrics
    header = ["h", "d_k", "d_v", "params", *(m.label for m in metrics), "seeds"]
    if translation:
        header += ["copy BLEU", "copy chrF", "paper PPL", "paper BLEU"]
    header.append("jobs")
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * (len(header) - 1) + "---|"]
    for r in rows:
        n = r["seeds"]
        cells = [_num(r["h"]), _num(r["d_k"]), _num(r["d_v"]), _num(r["params"])]
        cells += [_fmt(r[f"{m.key}_mean"], r[f"{m.key}_std"], n, m.digits) for m in metrics]
        cells.append(str(n))
        if translation:
            cells += [_num(r["copy_bleu"]), _num(r["copy_chrf"]), _num(r["vaswani_ppl"], 2),
                      _num(r["vaswani_bleu"])]
        cells.append(r["status"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def describe(jobs: list[Any]) -> str:
    """What was trained, for titles: task, model size, steps."""
    cfg = next((j.config for j in jobs if j.config), None)
    if cfg is None:
        return "runs without a readable config"
    t = cfg.train
    return (f"{cfg.data.name}, d_model {cfg.model.d_model}, {cfg.model.n_layers} layers, "
            f"{t.max_steps} steps of {t.batch_size}×{t.seq_len}")


def render(ctx: Any) -> str:
    """The view: verdict, table, CSV, plot and attention maps; returns its Markdown section."""
    metrics = metrics_for(ctx.jobs)
    jobs = collect_jobs(ctx.target, ctx.jobs)
    rows = summarize(jobs, metrics)
    csv_path = ctx.write_csv("report_heads.csv", rows, CSV_FIELDS)
    what = describe(ctx.jobs)
    png = ctx.save_figure(plot(rows, metrics, f"Head-count ablation: {what}"), "report_heads.png")
    attention = copy_attention(jobs, ctx.target / "attention")
    ctx.files.extend(attention)
    d_models = sorted({j.d_model for j in jobs if j.d_model})
    if BLEU in metrics:
        cfg = next((j.config for j in ctx.jobs if j.config), None)
        beam, n_test = (cfg.translate.beam_size, cfg.translate.test_examples) if cfg else (4, None)
        how = (f"PPL: validation perplexity on target tokens; BLEU / chrF: sacrebleu on "
               f"{'greedy' if beam == 1 else f'beam-{beam}'} translations of "
               f"{'the whole test split' if n_test is None else f'{n_test} evenly spaced test verses'}. "
               "Copy baseline: each source verse copied as its own translation. Paper: Vaswani "
               "et al. 2017, Table 3 rows (A) (EN-DE dev, d_model 512, 6 layers), for the shape "
               "only.")
    else:
        how = (f"{metrics[0].label}: validation loss of the language model "
               f"{'in bits (nats / ln 2) per byte' if metrics[0] is BPB else 'in nats per token'}; "
               "PPL: its exponential per token.")
    lines = [
        "## Head-count ablation (Vaswani et al. 2017, Table 3 rows A)",
        "",
        f"{what}; heads at fixed d_model = {', '.join(map(str, d_models)) or '?'} "
        f"(d_k = d_v = d_model / h). {how} Mean ± sample std over the completed seeds.",
        "",
        f"**Verdict.** {verdict(rows, metrics[0])} {bleu_sentence(rows) if BLEU in metrics else ''}".rstrip(),
        "",
        *table_markdown(rows, metrics),
    ]
    bad = [j for j in jobs if j.status != "completed"]
    if bad:
        lines += ["", "Failed or unfinished jobs:", "", "| job | heads | seed | status | reason |",
                  "|---|---:|---:|---|---|"]
        for j in sorted(bad, key=lambda j: (j.heads or 0, j.seed or 0)):
            lines.append(f"| {_cell(j.name)} | {_num(j.heads)} | {_num(j.seed)} | {j.status} "
                         f"| {_cell(j.error)} |")
    lines += ["", f"Table as CSV: [{csv_path.name}]({csv_path.name}).", "",
              f"![metrics against heads]({png.name}) (vector copy: {png.stem}.svg)"]
    if attention:
        lines += ["", "Final attention maps (one fixed validation verse; lowest completed seed of "
                  "each head count; rows = queries, columns = keys, white lines = `<sep>`):", ""]
        lines += [f"![{p.stem}](attention/{p.name})" for p in attention]
    return "\n".join(lines)


def detect(jobs: list[Any]) -> bool:
    """Jobs that differ in heads, and in nothing else but the seed."""
    from posexp.commands.report.jobs import swept_keys

    heads = {head_job(j).heads for j in jobs}
    return len(heads) > 1 and not set(swept_keys(jobs)) - {"heads", "seed"}


register_report_view("head_ablation", detect, render, order=20)
