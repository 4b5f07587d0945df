"""Head-count ablation view of ``posexp report`` (Vaswani et al. 2017, Table 3 rows A).

Applies to a sweep whose jobs differ in ``heads`` and in nothing else but ``seed``: translation
(``experiment=head_ablation``) or language modelling (``experiment=head_ablation_cpu``).
Groups the jobs by head count and adds to the report:

* a verdict from the numbers: is h = 1 worse than the best head count by more than two seed
  standard deviations (the larger group std, at least 3 seeds each) in the primary metric
  (target PPL for translation, bits per byte or nats per token for a language model)?
* ``report.md`` / ``report_heads.csv``: one row per head count with h, d_k, d_v, params, the
  metrics (mean ± sample std over seeds), for translation the copy baseline and the paper's
  PPL and BLEU (``configs/findings.yaml``), and the jobs' status: failed, unfinished and never
  started jobs (the grid is read from ``multirun.yaml``) appear as such, never dropped;
* ``report_heads.png`` (and ``.svg``): the metrics against heads (log2 axis, error bars = std
  over seeds, every seed as a dot, copy baseline dashed);
* ``attention/h<h>_seed<s>_layer<i>.png``: the final attention maps of the lowest completed
  seed of every head count (copied from the job's ``attention/``).
"""

from __future__ import annotations

import math
from typing import Any

from posexp.commands.report.view import register_report_view
from posexp.commands.report.views.findings import findings
from posexp.commands.report.views.heads.figures import copy_attention, plot
from posexp.commands.report.views.heads.rows import (
    BLEU,
    BPB,
    PPL,
    HeadJob,
    bleu_sentence,
    cell_text,
    collect_jobs,
    csv_fields,
    describe,
    head_job,
    is_translation,
    metrics_for,
    number_text,
    summarize,
    table_markdown,
    verdict,
)
from posexp.commands.report.views.unigram import near_unigram
from posexp.errors import PosexpError
from posexp.store.rundir import RunDir

__all__ = ["BPB", "PPL", "HeadJob", "summarize", "verdict"]


def pretraining_sentence(jobs: list[Any]) -> str:
    """Which run each head count's jobs started from (``parent=``), its data and step, in words."""
    parents: dict[int, str] = {}
    for job in jobs:
        if job.config and job.config.parent:
            parents.setdefault(job.config.heads, str(job.config.parent))
    if not parents:
        return ""
    parts = []
    for h, path in sorted(parents.items()):
        try:
            meta = RunDir.open(path, "parent").meta()
            data = meta["config"]["data"]
            what = f"step {int(meta['step']):,} of data={data.get('source', '?')}"
        except PosexpError:
            what = "no longer readable"
        parts.append(f"h = {h}: `{path}` ({what})")
    return (
        "Pre-training: every job starts from the language model of its head count, shared by "
        f"its seeds: {'; '.join(parts)}."
    )


def unigram_caveat(rows: list[dict[str, Any]], jobs: list[Any]) -> str:
    """The head counts of a language model whose validation ppl is near the test text's unigram
    ppl, so that they learned little for their head count to change ('' when none is)."""
    job = next((j for j in jobs if j.config), None)
    scored = [r for r in rows if r["seeds"] and math.isfinite(r.get("ppl_mean", math.nan))]
    if job is None or is_translation(jobs) or not scored:
        return ""
    near = [(r, u) for r in scored if (u := near_unigram(r["ppl_mean"], job)) is not None]
    if not near:
        return ""
    unigram = near[0][1]
    ppls = sorted(r["ppl_mean"] for r, _ in near)
    span = f"{ppls[0]:.2f}" if len(ppls) == 1 else f"{ppls[0]:.2f} to {ppls[-1]:.2f}"
    names = [str(r["h"]) for r, _ in near]
    heads = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    return (
        f"Caveat: at h = {heads} the validation ppl ({span}) is {ppls[0] / unigram:.0%} or more "
        f"of the test text's unigram ppl ({unigram:.2f}), so {'that model has' if len(near) == 1 else 'those models have'} "
        "learned little beyond token frequencies, and the verdict says little about heads."
    )


def render(ctx: Any) -> str:
    """The view: verdict, table, CSV, plot and attention maps; returns its Markdown section."""
    metrics = metrics_for(ctx.jobs)
    jobs = collect_jobs(ctx.target, ctx.jobs)
    rows = summarize(jobs, metrics)
    csv_path = ctx.write_csv("report_heads.csv", rows, csv_fields(metrics))
    what = describe(ctx.jobs)
    png = ctx.save_figure(plot(rows, metrics, f"Head-count ablation: {what}"), "report_heads.png")
    attention = copy_attention(jobs, ctx.target / "attention")
    ctx.files.extend(attention)
    d_models = sorted({j.d_model for j in jobs if j.d_model})
    if BLEU in metrics:
        published = findings()["head_ablation"]
        cfg = next((j.config for j in ctx.jobs if j.config), None)
        beam, n_test = (cfg.translate.beam_size, cfg.translate.test_examples) if cfg else (4, None)
        how = (
            f"PPL: validation perplexity on target tokens; BLEU / chrF: sacrebleu on "
            f"{'greedy' if beam == 1 else f'beam-{beam}'} translations of "
            f"{'the whole test split' if n_test is None else f'{n_test} evenly spaced test verses'}. "
            "Copy baseline: each source verse copied as its own translation. Paper: "
            f"{published['cite']} ({published['setting']}), for the shape only."
        )
    else:
        how = (
            f"{metrics[0].label}: validation loss of the language model "
            f"{'in bits (nats / ln 2) per byte' if metrics[0] is BPB else 'in nats per token'}; "
            "PPL: its exponential per token."
        )
    lines = [
        "## Head-count ablation (Vaswani et al. 2017, Table 3 rows A)",
        "",
        f"{what}; heads at fixed d_model = {', '.join(map(str, d_models)) or '?'} "
        f"(d_k = d_v = d_model / h). {how} Mean ± sample std over the completed seeds.",
        "",
        *([pre, ""] if (pre := pretraining_sentence(ctx.jobs)) else []),
        " ".join(
            [f"**Verdict.** {verdict(rows, metrics[0])}"]
            + ([f"In BLEU: {verdict(rows, BLEU)}", bleu_sentence(rows)] if BLEU in metrics else [])
            + [unigram_caveat(rows, ctx.jobs)]
        ).rstrip(),
        "",
        *table_markdown(rows, metrics),
    ]
    bad = [j for j in jobs if j.status != "completed"]
    if bad:
        lines += [
            "",
            "Failed or unfinished jobs:",
            "",
            "| job | heads | seed | status | reason |",
            "|---|---:|---:|---|---|",
        ]
        for j in sorted(bad, key=lambda j: (j.heads or 0, j.seed or 0)):
            lines.append(
                f"| {cell_text(j.name)} | {number_text(j.heads)} | {number_text(j.seed)} | {j.status} "
                f"| {cell_text(j.error)} |"
            )
    lines += [
        "",
        f"Table as CSV: [{csv_path.name}]({csv_path.name}).",
        "",
        f"![metrics against heads]({png.name}) (vector copy: {png.stem}.svg)",
    ]
    if attention:
        lines += [
            "",
            "Final attention maps (one fixed validation verse; lowest completed seed of "
            "each head count; rows = queries, columns = keys, white lines = `<sep>`):",
            "",
        ]
        lines += [f"![{p.stem}](attention/{p.name})" for p in attention]
    return "\n".join(lines)


def detect(jobs: list[Any]) -> bool:
    """Jobs that differ in heads, and in nothing else but the seed."""
    from posexp.commands.report.jobs import swept_keys

    heads = {head_job(j).heads for j in jobs}
    return len(heads) > 1 and not set(swept_keys(jobs)) - {"heads", "seed"}


register_report_view("head_ablation", detect, render, order=20)
