"""The extrapolation view's reading of its tables: sentences, each computed from the numbers it
describes (a method against no extension, the protocols, the ranking of the encodings)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from posexp.commands.report.views.extrapolation_data import Column, same_sample, sample_key
from posexp.commands.report.views.extrapolation_paper import shape_sentences
from posexp.extension import EXTENSIONS, baseline_method
from posexp.extension.spec import BAKED
from posexp.results.verdict import compare, compare_cells


def _pairs(
    columns: list[Column], a: str, b: str, protocol: str, past: int | None
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(record of method a, record of method b) of the same jobs at each length past ``past``."""
    out = []
    for ca in columns:
        for cb in columns:
            if ca.jobs is cb.jobs and (ca.method, cb.method) == (a, b):
                for (p, n), ra in ca.records.items():
                    rb = cb.records.get((p, n))
                    if (
                        p == protocol
                        and (past is None or n > past)
                        and rb
                        and same_sample(ra, rb)
                        and ra.get("ppl") is not None
                        and rb.get("ppl") is not None
                    ):
                        out.append((ra, rb))
    return out


def reading_sentences(columns: list[Column], protocols: list[str], l0: int | None) -> list[str]:
    """What the tables show, each sentence computed from the numbers it describes."""
    out = []
    first = "nonoverlap" if "nonoverlap" in protocols else protocols[0]
    for name, method in EXTENSIONS.items():
        if method.static_form is None:
            continue
        same = _pairs(columns, name, method.static_form, first, None)
        if not same:
            continue
        twin = method.static_form
        gap = max(abs(a["ppl"] / b["ppl"] - 1) for a, b in same)
        if gap < 0.005:
            out.append(
                f"{name} equals {twin} here (largest difference {gap:.2%} over {len(same)} "
                f"cells, {first}): every window starts at position 0, so at length L {name}'s "
                f"base is {twin}'s with s = L / L_train; they differ only while a sequence "
                "grows (generation with a KV cache)."
            )
        else:
            out.append(f"{name} and {twin} differ by up to {gap:.1%} ({first}, {len(same)} cells).")
    if len(protocols) > 1:
        both = []
        for c in columns:
            past = c.trained_length or l0  # each run's own: runs of a sweep may differ
            for (p, n), r in c.records.items():
                other = c.records.get(("nonoverlap", n))
                if (
                    p == "sliding"
                    and (past is None or n > past)
                    and other
                    and r.get("ppl") is not None
                    and other.get("ppl") is not None
                ):
                    both.append(r["ppl"] / other["ppl"])
        if both:
            higher = sum(x > 1 for x in both)
            median = sorted(both)[len(both) // 2]
            why = (
                "every sliding-scored token sits at position L - stride or later, past the "
                "trained positions"
                if higher > len(both) / 2
                else "every sliding-scored token sees at least L - stride tokens of context, which "
                "helps a model that extrapolates"
            )
            out.append(
                f"past the training length, sliding windows give a higher ppl than "
                f"non-overlapping ones in {higher} of {len(both)} cells (median ratio "
                f"{median:.2f}): {why}."
            )
    baseline = baseline_method()
    names = {
        c.method: next(iter(c.records.values())).get("name", c.method) for c in columns if c.records
    }
    judged = [
        label
        for label in dict.fromkeys(c.method for c in columns)
        if names.get(label) in EXTENSIONS and EXTENSIONS[names[label]].zero_shot_verdict
    ]
    for method in judged:
        for base in (c for c in columns if c.method == baseline):  # one sentence per PE
            # one PE's methods against this baseline column (its sample: one series of several)
            same_pe = [
                c for c in columns if c.jobs is base.jobs and (c.method != baseline or c is base)
            ]
            # past this PE's own training length: runs of a sweep may train at different ones
            pairs = _pairs(same_pe, method, baseline, first, base.trained_length or l0)
            if not pairs:
                continue
            out.append(
                verdict_sentence(method, base.label, pairs, first, base.tuned_at, names[method])
            )
    if l0:
        out += shape_sentences(columns, first, l0)
    out += ranking_sentence(columns, first)
    return out


def how_applied(method: str, tuned_at: int | None) -> tuple[str, str, str]:
    """(the method and how it was applied, what it is compared with, the cells the verdict
    counts), in words: zero-shot on a model trained from scratch, or on a fine-tune's weights."""
    if tuned_at is None:
        return (
            f"applied zero-shot (no fine-tuning), {method}",
            "no extension",
            "past the training length",
        )
    past = f"past the length the run was fine-tuned at ({tuned_at:,})"
    versus = "no extension (the same weights without it)"
    if method.startswith(f"{BAKED}:"):
        return f"{method}, the extension the run was fine-tuned with,", versus, past
    return f"applied at evaluation to fine-tuned weights, {method}", versus, past


def verdict_sentence(
    method: str,
    label: str,
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    protocol: str,
    tuned_at: int | None = None,
    name: str = "",
) -> str:
    """A method against no extension over the cells past the training length (a fine-tune's:
    ``tuned_at``), each cell judged by the one rule (posexp.results.verdict), with the method's
    own caveat."""
    subject, versus, past = how_applied(method, tuned_at)
    cells = [(a.get("ppls", [a["ppl"]]), b.get("ppls", [b["ppl"]])) for a, b in pairs]
    head = compare_cells(subject, versus, cells, where=f"for {label} {past} ({protocol})")
    if tuned_at is not None:
        after = ""  # the run is fine-tuned already
    elif EXTENSIONS[name].training_free:
        after = "; it needs no fine-tuning (it changes attention, not the weights)"
    else:
        after = "; `posexp finetune` trains at the longer length first"
    caveat = EXTENSIONS[name].caveat
    return f"{head}{after}." + (f" Caveat: {method}: {caveat}." if caveat else "")


def ranking_sentence(columns: list[Column], protocol: str) -> list[str]:
    """At the longest length, the best and second-best PE without extension, and whether their
    gap exceeds the seeds' spread."""
    scored = []
    for c in columns:
        if c.method != baseline_method():
            continue
        cells = [(n, r) for (p, n), r in c.records.items() if p == protocol]
        longest = max(cells, default=None, key=lambda x: x[0])
        if longest and longest[1].get("ppl") is not None:
            scored.append((longest[1]["ppl"], longest[0], c))
    # PEs are ranked on one sample, trained alike (a fine-tune is not ranked against a model
    # trained from scratch): the sample and training most of them share.
    samples = [(sample_key(c.records[(protocol, n)]), c.l0, c.tuned_at) for _, n, c in scored]
    common = Counter(samples).most_common(1)[0][0] if samples else None
    scored = [x for x, sample in zip(scored, samples, strict=True) if sample == common]
    lengths = {n for _, n, _ in scored}
    if len(scored) < 2 or len(lengths) != 1:
        return []
    scored.sort(key=lambda x: x[0])
    (best, n, a), (second, _, b) = scored[0], scored[1]
    ra, rb = a.records[(protocol, n)], b.records[(protocol, n)]
    where = f"at {n:,} tokens ({protocol}), without extension"
    return [
        compare(a.label, ra.get("ppls", [best]), b.label, rb.get("ppls", [second]), where=where)
    ]
