"""How `posexp --help` writes options: plain flags without a type, lists by name, arguments in
capitals.

Typer labels every option with its Python type (``<bool>`` beside a plain flag, ``<list[str]>``)
and puts a required argument in braces in the usage line (``{target}``); these command and group
classes rewrite those labels once, for every command, when help is shown.
"""

from __future__ import annotations

import re
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup


def _relabel(params: list[Any]) -> list[Any]:
    for p in params:
        if isinstance(p, TyperArgument):
            p.metavar = (p.name or "value").upper()  # TARGET, PROMPTS in the help
            if p.nargs != 1:  # the name says it takes several: "PROMPTS...", not <list[str]>
                p.display_type_rich = lambda ctx: "<str>..."  # type: ignore[method-assign]
        elif p.metavar is not None:
            continue
        elif getattr(p, "is_flag", False):
            p.metavar = ""  # a flag takes no value: no type to show
        elif getattr(p, "multiple", False) or p.nargs != 1:
            p.metavar = (p.name or "value").upper()
    return params


class Command(TyperCommand):
    """A posexp subcommand: relabelled options, ``TARGET`` rather than ``{target}`` in usage."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The command's parameters, with the help labels above."""
        return _relabel(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """The usage line's pieces, arguments in capitals without braces."""
        pieces: list[Any] = super().collect_usage_pieces(ctx)
        # {target} (required) and [root] (optional) name arguments: written TARGET, [ROOT].
        arg = re.compile(r"\{(\w+)\}|(?<=\[)([a-z_]+)(?=\])")
        return [arg.sub(lambda m: (m.group(1) or m.group(2)).upper(), str(p)) for p in pieces]


class Group(TyperGroup):
    """The ``posexp`` group: its own flags (--version, --help) relabelled like the commands'."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The group's parameters, with the help labels above."""
        return _relabel(super().get_params(ctx))
