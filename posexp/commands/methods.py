"""`posexp methods`: every extension method, what it changes, and its settings.

The listing is read from the registry (``posexp.extension``): each method's declared settings,
their defaults and what they allow, so it cannot drift from the checks that refuse bad values.
"""

from __future__ import annotations

import json
from typing import Any

from posexp.extension import EXTENSIONS
from posexp.extension.spec import format_value
from posexp.pe import PE_REGISTRY, accepted_extensions

SYNTAX = (
    "A method spec is name or name(key=value,...), e.g. 'self_extend(group=4,window=16)' "
    "(quote it in a shell); values are numbers as typed (4, 0.5, 1e-3), true, false, null "
    "(= the default) or a list [1,1.5,2], and a bare name means every default. Values joined "
    "by | make a grid, every combination one spec: 'self_extend(group=2|4|8,window=16|32)' is "
    "six, 'yarn(factor=4|8|16)' three. Several specs: a comma list or the option repeated. Use "
    "it with eval-extrapolate --method, report --method, extrapolate.method in a preset, and "
    "(one spec, no grid) extension=<spec> for train / finetune."
)


def method_rows() -> list[dict[str, Any]]:
    """One row per method: its name, when it applies, the encodings that take it (a list), its
    settings (factor's default is ``length/L0``: it follows the length scored)."""
    rows = []
    for name, method in EXTENSIONS.items():
        pes = [pe for pe in PE_REGISTRY if name in accepted_extensions(pe)]
        rows.append(
            {
                "method": name,
                "changes": method.acts_on,
                "when": "eval only" if method.training_free else "train + eval",
                "encodings": pes,
                "settings": [
                    {
                        "name": s.name,
                        "default": "length/L0" if s.name == "factor" else method.params[s.name],
                        "allowed": s.allowed,
                    }
                    for s in method.spec_settings
                ],
            }
        )
    return rows


def print_methods(console: Any = None, as_json: bool = False) -> None:
    """Each method and where it applies, then one line per setting as a spec writes it at its
    default (``group=null``), and what it allows; long lines wrap under their text. ``as_json``:
    one JSON document instead, the spec syntax (``spec_syntax``) beside the rows (``methods``)."""
    if as_json:
        print(json.dumps({"spec_syntax": SYNTAX, "methods": method_rows()}, indent=2))
        return
    import textwrap

    from rich.markup import escape

    from posexp.commands.console import stdout_console

    console = console or stdout_console()
    for row in method_rows():
        pes = row["encodings"]
        encodings = "every encoding" if len(pes) == len(PE_REGISTRY) else ", ".join(pes)
        console.print(
            f"[bold]{row['method']}[/bold]  ({escape(encodings)}; {row['when']})",
            highlight=False,
        )
        settings = [
            (
                f"{s['name']}="
                + (s["default"] if isinstance(s["default"], str) else format_value(s["default"])),
                s["allowed"],
            )
            for s in row["settings"]
        ]
        if not settings:
            console.print("    no settings", highlight=False)
        width = max((len(name) for name, _ in settings), default=0)
        for name, allowed in settings:
            text = textwrap.fill(
                f"{name:<{width}}  {allowed}",
                width=max(40, console.width - 4),
                initial_indent="    ",
                subsequent_indent=" " * (width + 6),
            )
            console.print(escape(text), highlight=False, soft_wrap=True)
    console.print("")
    console.print(SYNTAX, highlight=False)
