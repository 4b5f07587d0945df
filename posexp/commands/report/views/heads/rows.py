"""The head-count ablation's rows: one per head count, mean ± std over seeds, and the verdict."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from posexp.commands.report.stats import mean_std, mean_std_text
from posexp.commands.report.views.findings import findings

MIN_SEEDS = 3  # the verdict needs at least this many completed seeds per compared head count

CSV_FIELDS = [
    "h",
    "d_k",
    "d_v",
    "params",
    "ppl_mean",
    "ppl_std",
    "bleu_mean",
    "bleu_std",
    "chrf_mean",
    "chrf_std",
    "bpb_mean",
    "bpb_std",
    "loss_mean",
    "loss_std",
    "seeds",
    "copy_bleu",
    "copy_chrf",
    "vaswani_ppl",
    "vaswani_bleu",
    "status",
]


TRANSLATION_ONLY = ("copy_bleu", "copy_chrf", "vaswani_ppl", "vaswani_bleu")


def csv_fields(metrics: list[Any]) -> list[str]:
    """The CSV's columns for these metrics: none for a metric not shown, and the copy baseline's
    and the paper's only for translation (a language model's rows would leave them empty)."""
    shown = {m.key for m in metrics}
    translation = "bleu" in shown
    return [
        f
        for f in CSV_FIELDS
        if not (f.endswith(("_mean", "_std")) and f.rsplit("_", 1)[0] not in shown)
        and (translation or f not in TRANSLATION_ONLY)
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
    raw = {
        "ppl": m.get("final/val_ppl"),
        "bleu": m.get("final/bleu"),
        "chrf": m.get("final/chrf"),
        "loss": m.get("final/val_loss"),
    }
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
    return any(
        "final/bleu" in j.metrics or (j.config and j.config.data.name == "wyc2kjv") for j in jobs
    )


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
                out.append(
                    HeadJob(
                        f"heads={h},seed={s}",
                        h,
                        s,
                        d_model,
                        "not started",
                        error="no job dir yet (pending, or the sweep stopped before it)",
                    )
                )
    return out


def _status(jobs: list[HeadJob]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(Counter(j.status for j in jobs).items()))


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
        paper = findings()["head_ablation"]["rows"].get(h, {}) if BLEU in metrics else {}
        row: dict[str, Any] = {
            "h": h,
            "d_k": d_k,
            "d_v": d_k,
            "params": int(params) if params is not None else None,
            "seeds": len(done),
            "copy_bleu": first("final/copy_bleu"),
            "copy_chrf": first("final/copy_chrf"),
            "vaswani_ppl": paper.get("ppl"),
            "vaswani_bleu": paper.get("bleu"),
            "status": _status(group),
        }
        for m in metrics:
            values = [v for v in (job_value(j, m.key) for j in done) if v is not None]
            row[f"{m.key}_values"] = values
            row[f"{m.key}_by_seed"] = {
                j.seed: v for j in done if (v := job_value(j, m.key)) is not None
            }
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
    what = (
        f"h = 1 scores {one[f'{metric.key}_mean']:.{d}f} {metric.label} against "
        f"{best[f'{metric.key}_mean']:.{d}f} for the best other head count (h = {best['h']})"
    )
    if n < MIN_SEEDS:
        return (
            f"{what}; no verdict on seed noise: {n} completed seed(s), the test needs "
            f"{MIN_SEEDS} per head count."
        )
    if gap <= 0:
        return f"{what}: h = 1 is not worse, so this sweep does not show Table 3's effect."
    ratio = gap / noise if noise > 0 else math.inf
    shown = (
        "beyond seed noise: this sweep shows Table 3's effect"
        if ratio > 2
        else "within seed noise: this sweep does not show Table 3's effect"
    )
    seeds_each = f"n = {n} seeds each" if one["seeds"] == best["seeds"] else f"{n}+ seeds each"
    return (
        f"{what}: worse by {gap:.{d}f}, {ratio:.1f}× the larger seed std ({noise:.{d}f}, "
        f"{seeds_each}), {shown} (criterion: more than 2 std)" + paired_clause(one, best, metric)
    )


def paired_clause(one: dict[str, Any], best: dict[str, Any], metric: Metric) -> str:
    """The same comparison seed by seed (a seed shares its data order across head counts, so
    its noise partly cancels in the difference): how many seeds h = 1 loses, and the mean
    difference against its own std. "." where fewer than MIN_SEEDS seeds are shared."""
    mine, theirs = one[f"{metric.key}_by_seed"], best[f"{metric.key}_by_seed"]
    seeds = sorted(s for s in set(mine) & set(theirs) if s is not None)
    if len(seeds) < MIN_SEEDS:
        return "."
    sign = 1 if metric.lower_is_better else -1
    diffs = [sign * (mine[s] - theirs[s]) for s in seeds]
    mean, std = mean_std(diffs)
    worse = sum(x > 0 for x in diffs)
    ratio = mean / std if std > 0 else math.inf
    d = metric.digits
    times = f"{ratio:.1f}×" if ratio < 100 else "over 100×"
    return (
        f"; paired by seed, h = 1 is worse on {worse} of {len(seeds)} seeds, by "
        f"{mean:.{d}f} on average, {times} the std of the per-seed differences "
        f"({'beyond' if ratio > 2 else 'within'} 2 std)."
    )


def bleu_sentence(rows: list[dict[str, Any]]) -> str:
    """Best BLEU against the copy baseline, in words."""
    scored = [r for r in rows if r["seeds"] and not math.isnan(r["bleu_mean"])]
    copy = next((r["copy_bleu"] for r in rows if r["copy_bleu"] is not None), None)
    if not scored or copy is None:
        return ""
    best = max(scored, key=lambda r: r["bleu_mean"])
    side = "above" if best["bleu_mean"] > copy else "below"
    times = f" ({best['bleu_mean'] / copy:.2f}× it)" if copy > 0 else ""
    return (
        f"Best test BLEU {best['bleu_mean']:.2f} (h = {best['h']}) is {side} the copy "
        f"baseline's {copy:.2f}{times}."
    )


def number_text(v: Any, digits: int = 1) -> str:
    """A table cell: floats to ``digits`` places, integers with separators, ``–`` for none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return f"{int(v):,}"


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
        cells = [
            number_text(r["h"]),
            number_text(r["d_k"]),
            number_text(r["d_v"]),
            number_text(r["params"]),
        ]
        cells += [
            mean_std_text(r[f"{m.key}_mean"], r[f"{m.key}_std"], n, m.digits) for m in metrics
        ]
        cells.append(str(n))
        if translation:
            cells += [
                number_text(r["copy_bleu"]),
                number_text(r["copy_chrf"]),
                number_text(r["vaswani_ppl"], 2),
                number_text(r["vaswani_bleu"]),
            ]
        cells.append(r["status"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cell_text(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def describe(jobs: list[Any]) -> str:
    """What was trained, for titles: task, model size, steps."""
    cfg = next((j.config for j in jobs if j.config), None)
    if cfg is None:
        return "runs without a readable config"
    t = cfg.train
    return (
        f"{cfg.data.name}, d_model {cfg.model.d_model}, {cfg.model.n_layers} layers, "
        f"{t.max_steps} steps of {t.batch_size}×{t.seq_len}"
    )
