"""Batched generation over prompts of any lengths, with a KV cache and no padding.

Prompts are sorted by length and cut into batches of ``batch_size``; within a batch, rows of
different lengths decode together without padding (posexp/model/decoding.py: each row reads the
rest of its prompt while the batch advances), so every row's positions start at 0 exactly as in
training, and nothing needs a key-padding mask. Results come back in the caller's order. Greedy
(temperature 0) output is a pure function of the model and the prompts; sampling is
reproducible from ``generator``. ``beam_size`` > 1 decodes each prompt by beam search with
GNMT's length penalty.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from posexp.errors import PosexpError


@torch.no_grad()
def generate_ids(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int | Sequence[int],
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    eos_id: int | None = None,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
    autocast: Any = None,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    on_step: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """Continuations of each prompt (eos and anything after it removed), in the prompts' order.

    ``max_new_tokens`` is one limit for all, or one per prompt (a prompt whose limit is 0 or
    less gets nothing). ``on_step(n)`` hears of every decoding step of ``n`` rows generating.
    """
    if not math.isfinite(temperature) or temperature < 0:
        raise PosexpError(f"temperature must be a finite number >= 0, got {temperature}")
    if not math.isfinite(length_penalty):
        raise PosexpError(f"length penalty must be a finite number, got {length_penalty}")
    if top_k is not None and top_k <= 0:
        raise PosexpError(f"top_k must be a positive integer, got {top_k}")
    if batch_size <= 0:
        raise PosexpError(f"batch_size must be a positive integer, got {batch_size}")
    if beam_size < 1:
        raise PosexpError(f"beam size must be a positive integer, got {beam_size}")
    if beam_size > 1 and temperature > 0:
        raise PosexpError(
            f"beam search decodes deterministically; got beam {beam_size} with "
            f"temperature {temperature} (use temperature 0 or beam 1)"
        )
    limits = (
        [int(max_new_tokens)] * len(prompts)
        if isinstance(max_new_tokens, int)
        else [int(m) for m in max_new_tokens]
    )
    if len(limits) != len(prompts):
        raise ValueError(f"{len(limits)} max_new_tokens for {len(prompts)} prompts")
    for p in prompts:
        if len(p) == 0:
            raise PosexpError("empty prompt; give at least one token of text")
    was_training = model.training
    model.eval()
    out: list[list[int]] = [[] for _ in prompts]
    # Sorted by length, so a batch's rows differ little in how much prompt they still read.
    order = sorted((i for i in range(len(prompts)) if limits[i] > 0), key=lambda i: len(prompts[i]))
    try:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(prompts[i]) for i in rows)
            x = torch.tensor(
                [[*prompts[i], *[0] * (width - len(prompts[i]))] for i in rows],
                dtype=torch.long,
                device=device,
            )
            with autocast() if autocast is not None else contextlib.nullcontext():
                new = model.generate(
                    x,
                    [limits[i] for i in rows],
                    temperature=temperature,
                    top_k=top_k,
                    eos_id=eos_id,
                    generator=generator,
                    beam_size=beam_size,
                    length_penalty=length_penalty,
                    on_step=on_step,
                    lengths=[len(prompts[i]) for i in rows],
                )
            for i, row in zip(rows, new.tolist(), strict=True):
                ids = row[: limits[i]]
                if eos_id is not None and eos_id in ids:
                    ids = ids[: ids.index(eos_id)]
                out[i] = ids
    finally:
        model.train(was_training)
    return out


class TokenProgress:
    """Generated tokens so far, of every prompt together: a bar on a terminal; without one
    (nohup, Slurm), a plain line at every tenth of a long generation (``PLAIN_MIN`` tokens or
    more) and at least every ``PLAIN_EVERY_S`` seconds, so a slow one is not silent until its
    first tenth. The total is each prompt's limit summed: an end of text stops a prompt early."""

    PLAIN_MIN = 1000
    PLAIN_EVERY_S = 10.0
    # Counts of all the prompts together, up to their limits: never a per-prompt count.
    BAR = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt} of at most {total_fmt} new tokens [{elapsed}]"

    def __init__(
        self,
        total: int,
        desc: str = "generate",
        items: int | None = None,
        noun: str = "prompt",
        show: bool | None = None,  # None: the bar only on a terminal (tqdm's rule)
    ) -> None:
        from tqdm import tqdm

        if items is not None:  # generate (3 prompts), translate test (100 sentences)
            desc = f"{desc} ({items:,} {noun}{'s' if items != 1 else ''})"
        self.bar = tqdm(
            total=total,
            desc=desc,
            unit="tok",
            unit_scale=True,
            disable=None if show is None else not show,
            leave=False,
            dynamic_ncols=True,
            file=sys.stderr,
            bar_format=self.BAR,
        )
        self.desc, self.total, self.done, self.next_line = desc, total, 0, total / 10
        self.plain = self.bar.disable and total >= self.PLAIN_MIN
        self.last_line = self.started = time.monotonic()

    def line(self) -> str:
        """Where the generation is, as a plain line says it."""
        return f"{self.desc}: {self.done:,} of at most {self.total:,} new tokens"

    def update(self, n: int) -> None:
        """``n`` more tokens (one decoding step of ``n`` rows)."""
        self.done += n
        self.bar.update(n)
        now = time.monotonic()
        if self.plain and (
            self.done >= self.next_line or now - self.last_line >= self.PLAIN_EVERY_S
        ):
            self.last_line = now
            print(self.line(), file=sys.stderr, flush=True)
            while self.next_line <= self.done:
                self.next_line += self.total / 10

    def waiting(self) -> None:
        """While a decoding step runs (a long prompt's first forward takes minutes and ends no
        step): the bar's clock moves on a terminal; without one, a plain line at least every
        ``PLAIN_EVERY_S`` seconds that says what it is doing. Safe to call often."""
        now = time.monotonic()
        if now - self.last_line < self.PLAIN_EVERY_S:
            return
        self.last_line = now
        if not self.bar.disable:
            self.bar.refresh()
            return
        doing = "reading the prompts" if self.done == 0 else "decoding"
        print(f"{self.line()} ({doing}, {now - self.started:.0f} s)", file=sys.stderr, flush=True)

    def __enter__(self) -> TokenProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()
