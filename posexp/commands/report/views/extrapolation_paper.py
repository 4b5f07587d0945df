"""The extrapolation view beside the ALiBi paper (Press et al. 2022, ``configs/findings.yaml``):
the published table, and how each PE's curve compares in shape."""

from __future__ import annotations

import math
from typing import Any

from posexp.commands.report.view import md_table
from posexp.commands.report.views.extrapolation_data import Column
from posexp.commands.report.views.findings import findings
from posexp.commands.report.views.unigram import near_unigram
from posexp.extension import baseline_method
from posexp.pe.base import describe_pe
from posexp.results.verdict import Published, against_paper

# How a ppl ratio to the training length reads. "Flat" within FLAT of 1 or within the seeds'
# spread of the ratio; above that, the first bound it is below (else "explodes").
FLAT = 0.05
SHAPES = ((1.25, "rises"), (5.0, "degrades"))
SHAPE_RULE = (
    f"flat: within {FLAT:.0%} of 1 or of the seed spread; rises: below "
    f"{SHAPES[0][0]:g}×; degrades: below {SHAPES[1][0]:g}×; explodes: above"
)


def shape(ratio: float, spread: float = 0.0) -> str:
    """How a ppl ratio to the training length reads: stays flat, falls, rises, degrades or
    explodes (``spread``: the seeds' std of the ratio)."""
    if abs(ratio - 1) <= max(FLAT, spread):
        return "stays flat"
    if ratio < 1:
        return "falls"
    return next((words for bound, words in SHAPES if ratio < bound), "explodes")


def shape_sentences(columns: list[Column], protocol: str, l0: int) -> list[str]:
    """The shape of each PE's column without extension, beside the paper's for the same PE at
    the published length nearest in multiples of the training length (configs/findings.yaml)."""
    paper = findings()["extrapolation"]
    p0 = paper["train_length"]
    clauses, tuned = [], []
    for c in columns:
        if c.tuned_at is not None and c.method == baseline_method():
            tuned.append(c.label)  # the paper's models were trained from scratch, no extension
            continue
        published = paper["ppl"].get(c.pe.name) if c.pe and not c.pe.randomized else None
        base = c.records.get((protocol, l0), {}).get("ppl")
        past = [
            (n, r["ppl"])
            for (p, n), r in c.records.items()
            if p == protocol and n > l0 and r.get("ppl") is not None
        ]
        if c.method != baseline_method() or not published or not base or not past:
            continue
        unigram = near_unigram(base, c.job)
        if unigram is not None:
            clauses.append(
                f"{c.label} is left out: its ppl at the training length, {base:.2f}, is "
                f"{base / unigram:.0%} of the test text's unigram ppl ({unigram:.2f}), so it has "
                f"learned little beyond token frequencies and its shape says nothing about "
                f"positions"
            )
            continue
        n, _ = max(past)
        i = min(
            (i for i, v in enumerate(published) if i and v is not None),
            key=lambda i: abs(math.log(paper["lengths"][i] / p0 * l0 / n)),
        )
        reference = Published(
            paper["cite"],
            paper["setting"],
            published[i] / published[0],
            paper["lengths"][i] / p0,
            same_data(c.job, paper.get("data", {})),
        )
        ratios = seed_ratios(c, protocol, n, l0)
        clauses.append(against_paper(c.label, ratios, n / l0, reference, "ppl ratio"))
    out = []
    if clauses:
        out.append(
            f"ppl relative to the training length ({protocol}), beside {paper['cite']}: "
            + "; ".join(c.rstrip(".") for c in clauses)
            + "."
        )
    if tuned:
        out.append(
            f"{', '.join(tuned)} {'is' if len(tuned) == 1 else 'are'} not set beside "
            f"{paper['cite']}: fine-tuned from another run, while the paper's models were "
            "trained from scratch at one length, without extension."
        )
    return out


def same_data(job: Any, data: dict[str, Any]) -> bool:
    """Whether a job trained on the paper's data: every key of the paper's ``data`` (as
    ``configs/findings.yaml`` names it) matches the job's ``data.*`` config."""
    flat = getattr(job, "flat_config", None) or {}
    if not data:
        return False
    return all(str(flat.get(f"data.{k}", "")).startswith(str(v)) for k, v in data.items())


def published_section() -> str:
    """The ALiBi paper's numbers (configs/findings.yaml), with ratios to the training length."""
    paper = findings()["extrapolation"]
    p0, series = paper["train_length"], paper["ppl"]
    pes = sorted((describe_pe(name) for name in series), key=lambda d: d.sort_key)
    rows = []
    for i, n in enumerate(paper["lengths"]):
        cells = []
        for pe in pes:
            v, v0 = series[pe.name][i], series[pe.name][0]
            cells.append("OOM" if v is None else f"{v:.2f} ({v / v0:.2f}×)")
        rows.append([n, f"{n / p0:.1f}", *cells])
    shapes = []
    for pe in pes:
        i = max(i for i, v in enumerate(series[pe.name]) if v is not None)
        ratio = series[pe.name][i] / series[pe.name][0]
        oom = ", out of memory past it" if i < len(paper["lengths"]) - 1 else ""
        shapes.append(
            f"{pe.label} {shape(ratio)} ({ratio:.2f}× at {paper['lengths'][i] / p0:.1f}×{oom})"
        )
    return "\n".join(
        [
            "### Published, for shape comparison",
            "",
            f"{paper['cite']}, {paper['setting']} (ratio to L = {p0}). Absolute numbers differ by "
            f"design (corpus, size); compare the shape: {', '.join(shapes)}.",
            "",
            md_table(
                ["L_valid", "× L_train", *(pe.label for pe in pes)], rows, ["r"] * (len(pes) + 2)
            ),
        ]
    )


def seed_ratios(column: Column, protocol: str, length: int, l0: int) -> list[float]:
    """ppl(length) / ppl(l0) of each seed of a column (seeds paired, so the ratio's spread is the
    seeds' own)."""
    at, base = column.records.get((protocol, length)), column.records.get((protocol, l0))
    if not at or not base or at.get("ppl") is None or not base.get("ppl"):
        return []
    return [a / b for a, b in zip(at["ppls"], base["ppls"], strict=True)]
