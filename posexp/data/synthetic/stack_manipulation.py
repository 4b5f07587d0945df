"""stack_manipulation (Delétang et al. 2023; deterministic context-free): a stack, then actions
on it; the answer is the stack after them. Stacks are written top first over {a, b}; actions
are ``A`` (push a), ``B`` (push b) and ``x`` (pop), after a ``:`` (``ab:Axx`` -> ``b``: push a
gives ``aab``, two pops leave ``b``).

Size n counts the stack's symbols and the actions together (the stack 1 to n - 1 of them,
uniformly), so the prompt has n + 1 characters. Unlike the paper, a pop is never drawn on a
one-symbol stack: the answer is never empty (an empty answer cannot be told from a model
that stops at once) and no action is a no-op.
"""

from __future__ import annotations

import numpy as np

from posexp.data.synthetic.base import Task, choice_string, register_task

PUSH = {"A": "a", "B": "b"}
POP = "x"


@register_task("stack_manipulation")
class StackManipulation(Task):
    """A stack of 1..n-1 symbols and n minus that many actions; the answer is the final stack."""

    unit = "stack symbols + actions"
    min_length = 2

    def prompt_symbols(self) -> str:
        """Stack symbols, the separator and the actions."""
        return "ab:AB" + POP

    def instance(
        self, rng: np.random.Generator, n: int, split: str, variant: float | None = None
    ) -> tuple[str, str]:
        """A random stack and actions, pops only on stacks of two symbols or more."""
        start = int(rng.integers(1, n))
        initial = choice_string(rng, "ab", start)  # written top first
        stack = list(initial)
        actions = []
        for _ in range(n - start):
            act = "ABx"[int(rng.integers(3 if len(stack) > 1 else 2))]
            actions.append(act)
            if act == POP:
                stack.pop(0)
            else:
                stack.insert(0, PUSH[act])
        return f"{initial}:{''.join(actions)}", "".join(stack)

    def prompt_length(self, n: int) -> int:
        """n symbols and actions, and the separator."""
        return n + 1

    def answer_length(self, n: int) -> int:
        """At most n symbols (every action a push)."""
        return n
