"""How `posexp --help` writes options: plain flags without a type, lists by name, arguments in
capitals; and the help of the commands whose arguments go to Hydra (train, finetune).

Typer labels every option with its Python type (``<bool>`` beside a plain flag, ``<list[str]>``)
and puts a required argument in braces in the usage line (``{target}``); these command and group
classes rewrite those labels once, for every command, when help is shown. Hydra's own help is
plain text; ``HydraCommand`` shows the same (its flags, the config groups and keys) in the panels
every other command has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup

from posexp.config.paths import config_dir


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


def reflowed(text: str) -> str:
    """A docstring's paragraphs each on one line: Typer's rich help keeps every line break of
    the source, so at a narrower terminal a wrapped source line left a ragged half-line."""
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


class Command(TyperCommand):
    """A posexp subcommand: relabelled options, ``TARGET`` rather than ``{target}`` in usage,
    help paragraphs wrapped to the terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            self.help = reflowed(self.help)

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


# ---- train and finetune: Hydra's command line in the same panels ---------------------------


@dataclass(frozen=True)
class HydraHelp:
    """What `--help` of a command that hands its arguments to Hydra shows beside its options."""

    config: str  # the config it composes: configs/<config>.yaml
    usage: tuple[str, ...]  # the usage line after the command's name
    examples: tuple[tuple[str, str], ...]  # (command line, what it does)
    kept: str = ""  # config roots taken from elsewhere ("module:NAME"), a fine-tune's parent's
    filled: tuple[tuple[str, str], ...] = ()  # keys the command sets, shown as what sets them
    flags: tuple[tuple[str, str, str], ...] = ()  # Hydra's flags it takes (HYDRA_FLAGS)
    flags_title: str = "Hydra options"


# Hydra's own flags: what the command line takes besides overrides.
HYDRA_FLAGS = (
    ("-m, --multirun", "", "A sweep: one job per combination of comma-separated values."),
    ("--cfg", "job", "Print the composed config (job, hydra or all) and exit; nothing runs."),
    ("-sc, --shell-completion", "install=bash", "Tab completion of overrides (bash, zsh, fish)."),
    ("--hydra-help", "", "Hydra's own help: its flags and its groups."),
    ("-h, --help", "", "Show this message and exit."),
)
HYDRA_HELP = {
    "train": HydraHelp(
        "train",
        ("[OPTIONS]", "[OVERRIDES]..."),
        (
            ("posexp train pe=alibi heads=8", "one run, in outputs/runs/<time>_kjv_alibi_h8"),
            ("posexp train -m pe=rope,alibi seed=0,1", "a sweep of 4 jobs in outputs/sweeps/"),
            ("posexp train -m experiment=extrapolation", "a preset sweep (configs/experiment/)"),
            ("posexp train resume=outputs/runs/<run> train.max_steps=1200", "train a run on"),
            ("posexp train --cfg job pe=t5 model=tiny", "the config a run would get"),
        ),
        flags=HYDRA_FLAGS,
    ),
    "finetune": HydraHelp(
        "finetune",
        ("--run DIR", "[OPTIONS]", "[OVERRIDES]..."),
        (
            (
                "posexp finetune --run outputs/runs/<run> extension=yarn extension.factor=4",
                "train.seq_len = the parent's length x 4",
            ),
            (
                "posexp finetune --run outputs/runs/<run> extension=yarn extension.factor=4 "
                "train.pose.enabled=true",
                "PoSE: windows of the parent's length, positions up to its length x 4",
            ),
            (
                "posexp finetune --run outputs/sweeps/<sweep>/<job> extension=pi "
                "extension.factor=2 train.max_steps=400",
                "a sweep's job as the parent",
            ),
            (
                "posexp finetune --run outputs/runs/<run> extension=pi,yarn extension.factor=4 -m",
                "one fine-tune per method (Hydra's flags after the overrides)",
            ),
            ("posexp train resume=outputs/runs/<fine-tune>", "continue an interrupted one"),
        ),
        kept="posexp.config:NETWORK_ROOTS",
        filled=(("parent", "<--run>"), ("train_length", "<the parent's>")),
        # The parent's settings go first on Hydra's command line: its flags come last.
        flags=tuple(f for f in HYDRA_FLAGS if f[0] != "--hydra-help"),
        flags_title="Hydra options (after the overrides)",
    ),
}


class HydraCommand(Command):
    """train, finetune: their usage and options, then Hydra's flags, the config groups and keys
    they compose (their defaults), and examples, in Typer's panels."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """The usage line's pieces: the options, then the Hydra overrides."""
        about = HYDRA_HELP.get(self.name or "")
        return list(about.usage) if about else super().collect_usage_pieces(ctx)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Typer's panels for the command's own options, then the Hydra ones."""
        super().format_help(ctx, formatter)
        about = HYDRA_HELP.get(self.name or "")
        if about is not None:
            print_hydra_panels(about)


def help_asked(args: list[str]) -> bool:
    """Whether a Hydra command's arguments ask for its help (Hydra's flags, not Click's)."""
    return any(a in ("-h", "--help") for a in args)


def show_help(ctx: Any) -> None:
    """The command's help, as `--help` prints it."""
    import typer

    typer.echo(ctx.get_help(), nl=False)  # Typer prints its panels itself; this is '' then


def config_groups() -> dict[str, list[str]]:
    """Each config group (configs/<group>/) and its options, as `group=option` takes them."""
    root = Path(config_dir())
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in sorted(root.iterdir())
        if d.is_dir() and d.name != "hydra" and any(d.glob("*.yaml"))
    }


def config_keys(config: str, filled: dict[str, str] | None = None) -> dict[str, str]:
    """The composed config's keys with their defaults (``filled``'s keys with its text), a line
    per section (``top level`` for the keys outside one): ``{"train": "max_steps=600 ..."}``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()  # a command's help, before it composes anything itself
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        data = OmegaConf.to_container(compose(config), resolve=False)
    assert isinstance(data, dict)
    data.update(filled or {})

    def leaves(d: dict, prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict):
                out += leaves(v, f"{prefix}{k}.")
            else:
                out.append(f"{prefix}{k}={_yaml(v)}")
        return out

    top = " ".join(leaves({k: v for k, v in data.items() if not isinstance(v, dict)}))
    sections = {k: " ".join(leaves(v)) for k, v in data.items() if isinstance(v, dict)}
    return {"top level": top, **sections} if top else sections


def _yaml(value: Any) -> str:
    """A value as an override writes it (null, true, [0.9,0.95])."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_yaml(v) for v in value) + "]"
    return str(value)


def print_hydra_panels(about: HydraHelp) -> None:
    """Hydra's flags, the config groups and keys, and the examples, as Typer's panels."""
    import importlib

    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
    from typer import rich_utils

    kept: tuple[str, ...] = ()
    if about.kept:
        module, name = about.kept.split(":")
        kept = tuple(getattr(importlib.import_module(module), name))

    def panel(title: str, rows: list[tuple[str, ...]], style: str = rich_utils.STYLE_OPTION):
        table = Table(show_header=False, box=None, expand=True, padding=(0, 1), highlight=False)
        for i in range(len(rows[0])):  # the last column takes the room left and wraps
            last = i == len(rows[0]) - 1
            table.add_column(style=style if i == 0 else "", no_wrap=not last, ratio=last or None)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(
            Panel(
                table,
                border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER,
                title=title,
                title_align=rich_utils.ALIGN_OPTIONS_PANEL,
            )
        )

    def mark(name: str) -> str:
        return f"{name} (the parent's)" if name in kept else name

    console = rich_utils._get_rich_console()  # Typer's own: its width and colour rules
    panel(about.flags_title, [(flag, value, text) for flag, value, text in about.flags])
    groups = config_groups()
    panel(
        "Config groups (group=option)",
        [(mark(group), ", ".join(options)) for group, options in groups.items()],
    )
    keys = config_keys(about.config, dict(about.filled))
    panel("Config keys (key=value) and their defaults", [(mark(k), v) for k, v in keys.items()])
    # The command line on its own line (it is long), what it does under it.
    panel("Examples", [(f"{line}\n  {what}",) for line, what in about.examples], style="")
