"""The cells of an evaluation: which method spec, set up how, and what a record measured.

A cell is what one record measures: a method at its effective settings (every null that stands
for a value at the run's L0 and the cell's factor filled in), a length, a protocol and the rest
of the record's key. Two specs can name one cell (``self_extend`` and ``self_extend(window=16)``
at L0 64): it is scored once and kept under both specs. A spec arrives parsed (a
``MethodSpec``) and travels as that object into the extension and the record; no label is read.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig, get_extension
from posexp.extension.spec import BAKED, MethodSpec, spec_of
from posexp.pe import accepted_extensions
from posexp.scoring.records import Record, Stored

log = logging.getLogger("posexp")


def cell_of(record: Record) -> tuple:
    """What a record measured, whatever spec asked for it (``Record.cell``)."""
    return record.cell


def with_copies(items: Iterable[Any], records: list[Record]) -> list[Record]:
    """``records`` plus, for each item's cell asked for under a spec no record has, a copy of
    the record of the same cell under another spec."""
    have = {r.key for r in records}
    by_cell = {r.cell: r for r in records}
    out = list(records)
    for item in items:
        source = by_cell.get(item.record.cell)
        if item.record.key not in have and source is not None:
            out.append(dataclasses.replace(source, spec=item.record.spec))
            have.add(item.record.key)
    return out


def method_specs(
    asked: list[MethodSpec] | None,
    pe: str,
    has_baked: bool,
    factor: float | None = None,
    pe_params: dict[str, Any] | None = None,
) -> list[MethodSpec]:
    """The specs asked for (as parsed, at the edge), else every method the PE takes at its
    defaults, plus ``baked`` for a fine-tuned run. A fixed ``factor`` (--factor) goes into the
    specs of the methods that scale with one and fix none themselves, so their label says it
    (``yarn(factor=4)``) and their cells are apart from those at length / L0."""
    if asked is not None:
        specs = list(asked)
    else:
        names = ([BAKED] if has_baked else []) + accepted_extensions(pe, pe_params)
        specs = [MethodSpec(name) for name in names]
    if factor is None:
        return specs
    return [
        dataclasses.replace(spec, factor=factor)
        if spec.factor is None
        and spec.name != BAKED
        and any(x.name == "factor" for x in get_extension(spec.name).spec_settings)
        else spec
        for spec in specs
    ]


def cell_extension(
    spec: MethodSpec,
    baked: ExtensionConfig,
    length: int,
    train_length: int,
    run_dir: Path,
) -> tuple[ExtensionConfig, MethodSpec, str]:
    """(extension, spec, note) of one spec at ``length`` tokens: the baked-in extension as it
    was fine-tuned (its spec: that extension's, marked baked), else the method set up for the
    length (its settings checked against L0)."""
    if spec.name == BAKED:
        own = spec_of(baked.method, baked.params, baked=True)
        note = f"baked in by finetune: factor {baked.factor:g}, original_length {baked.original_length}"
        return dataclasses.replace(baked, spec=own), own, note
    try:
        ext, note = ExtensionConfig.for_length(spec, length, train_length)
    except PosexpError as e:
        raise PosexpError(f"--method {spec.label!r} for {str(run_dir)!r}: {e}") from None
    return ext, spec, note


def check_cell_extensions(
    items: list[tuple[MethodSpec, ExtensionConfig]], mcfg: Any, run_dir: Path
) -> None:
    """Refuse in one line naming --method, before anything is scored, a setting the run's
    model cannot take. The settings are checked by the method's declarations already (at the
    spec and against L0); only a per-pair list (LongRoPE's factors) depends on the encoding's
    rotated dims, so only a spec holding one has the encoding built to check it, once."""
    from posexp.pe import PEContext, build_pe

    seen: set[tuple] = set()
    for spec, ext in items:
        lists = any(isinstance(v, (list, tuple)) for v in ext.params.values())
        if not lists or spec.key in seen or ext.method == "none":
            continue
        seen.add(spec.key)
        shape = (mcfg.d_model, mcfg.n_heads, mcfg.head_dim, mcfg.train_length)
        try:
            build_pe(mcfg.pe, PEContext(*shape, ext, mcfg.n_layers), **dict(mcfg.pe_params))
        except PosexpError as e:
            raise PosexpError(f"--method {spec.label!r} for {str(run_dir)!r}: {e}") from None


def say_capped_tokens(run_dir: Path, n_tokens: int, test_size: int) -> int:
    """The tokens scored per length: ``n_tokens``, or what the test split holds (said: the
    cells then score fewer tokens than asked for, and a long length's last window is partial)."""
    if n_tokens <= test_size - 1:
        return n_tokens
    log.warning(
        "%s: the test split holds %s tokens, so each length scores %s of the %s asked for",
        run_dir.name,
        f"{test_size:,}",
        f"{test_size - 1:,}",
        f"{n_tokens:,}",
    )
    return test_size - 1


def say_other_token_counts(run_dir: Path, stored: Stored, n_tokens: int, longest: int) -> None:
    """Warn when the default token count (which grows with the longest length) differs from
    the one this run's earlier cells used: the new cells become a row of their own."""
    counts = {r.sample_size for r in stored.current if r.sample_size}
    earlier = sorted(counts - {n_tokens})
    usable = [n for n in earlier if n >= longest]
    if earlier and n_tokens not in counts:  # else the new cells join the rows of n_tokens
        hint = f"; eval-extrapolate --tokens {usable[-1]} adds to those" if usable else ""
        log.warning(
            "%s: scoring %s test tokens per cell (the default, 4x the longest length); earlier "
            "cells of this run used %s, so these form rows of their own%s",
            run_dir.name,
            f"{n_tokens:,}",
            ", ".join(f"{n:,}" for n in earlier),
            hint,
        )


def say_short_lengths(run_dir: Path, stride: int, lengths: list[int]) -> None:
    """Warn when a --stride is longer than some lengths: their windows do not overlap there."""
    shorter = [n for n in lengths if n < stride]
    if shorter:
        log.warning(
            "%s: --stride %d is longer than %s tokens: there the sliding windows do not overlap "
            "(stride = length, as nonoverlap scores)",
            run_dir.name,
            stride,
            ", ".join(map(str, shorter)),
        )
