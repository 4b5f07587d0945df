"""What an evaluation will cost, said before it starts: tokens, forward passes, the memory of
the largest one and a lower bound on the time, so a long one is never silent.

A million-token cell on a CPU is one forward pass of minutes: its progress bar cannot move
until it returns, and sliding windows at stride 1 over 200,000 tokens are 200,000 forward
passes. The memory of each length is refused up front where it cannot fit (``plan.check_fits``);
this says the rest. The time is the model's FLOPs at the matmul rate measured on this machine
(``posexp.runtime.budget``): attention kernels run below that rate, so the time is a lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posexp.commands.extrapolate.plan import RunPlan, forward_bytes
from posexp.runtime.weights import saved_model_config

SAY_ABOVE_S = 30.0  # an evaluation estimated to take longer is announced with its cost
OPTIMISTIC_RATE = 1e12  # FLOP/s no CPU here reaches: below it, no need to measure the real one


@dataclass
class Cost:
    """The work of the cells still to score, summed over runs."""

    cells: int = 0
    tokens: int = 0
    forwards: int = 0
    longest: int = 0
    memory: int = 0  # bytes of the largest forward pass
    flops: float = 0.0


def cost_of(plans: list[RunPlan], batch_tokens: int) -> Cost:
    """The cost of scoring every plan's cells still to score (once their work is cut)."""
    cost = Cost()
    for plan in plans:
        mcfg = saved_model_config(plan.run)
        d, layers, vocab = mcfg.d_model, mcfg.n_layers, mcfg.vocab_size
        for item in plan.todo:
            length, tokens = item.record.length, item.size
            if not tokens:
                continue
            rows = max(1, tokens // max(length, 1))
            cost.cells += 1
            cost.tokens += tokens
            cost.forwards += math.ceil(rows / max(1, batch_tokens // max(length, 1)))
            cost.longest = max(cost.longest, length)
            cost.memory = max(cost.memory, forward_bytes(length, batch_tokens, mcfg))
            # Weights (12 d^2 a layer and the output head) and causal attention (QK and AV).
            per_token = 2 * (12 * layers * d * d + vocab * d) + 2 * layers * d * length
            cost.flops += tokens * per_token
    return cost


def say_cost(plans: list[RunPlan], batch_tokens: int, device: torch.device, console: Any) -> Cost:
    """Print the cost of an evaluation that will take more than ``SAY_ABOVE_S`` (one line),
    before it starts; the cost."""
    from posexp.runtime.budget import duration, gib, matmul_rate

    cost = cost_of(plans, batch_tokens)
    if not cost.cells or cost.flops / OPTIMISTIC_RATE < SAY_ABOVE_S / 100:
        return cost
    first = plans[0]
    precision = next((i.record.precision for p in plans for i in p.todo), "fp32")
    rate = matmul_rate(
        device, precision, saved_model_config(first.run).d_model, Path(first.cfg.cache_dir)
    )
    seconds = cost.flops / rate
    if seconds < SAY_ABOVE_S:
        return cost
    console.print(
        f"this evaluation: {cost.cells} cell(s), {cost.tokens:,} tokens in {cost.forwards:,} "
        f"forward pass(es) (the longest {cost.longest:,} tokens, about {gib(cost.memory)} "
        f"each); at least {duration(seconds)} at the {rate / 1e9:,.0f} GFLOP/s measured "
        f"here (Ctrl-C keeps the cells finished)",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    return cost
