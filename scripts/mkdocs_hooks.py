"""MkDocs hook: reference tables generated from the code, so the docs cannot drift from it.

Page markers: ``posexp:cli`` (the group's options), ``posexp:cli NAME`` (one command; a page with
cli markers must name every command), ``posexp:config``, ``posexp:pes``, ``posexp:methods``, each
written as an HTML comment. A missing command or an unknown marker fails the build.
"""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MARKER = re.compile(r"^<!-- posexp:(\w+)(?: ([\w-]+))? -->$", re.M)  # alone on its line
KEY_LINE = re.compile(r"^(\s*)([\w@/.-]+):(.*)$")


def cell(text: Any) -> str:
    """Text for a table cell: one line, pipes escaped, no raw HTML outside code spans."""
    parts = " ".join(str(text).split()).replace("|", r"\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def code(value: Any) -> str:
    """A value as a code span, spelled as in YAML (null, true, [1, 8])."""
    if getattr(value, "name", None) == "UNSET":  # click's sentinel for "no default"
        value = None
    if value is None or isinstance(value, (bool, list, dict)):
        value = yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("...\n")
    return f"`{' '.join(str(value).split())}`"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def app_group() -> tuple[Any, Any]:
    """The click group behind ``posexp.cli.app`` and its context."""
    import typer

    from posexp.cli import app

    group = typer.main.get_command(app)
    return group, typer.Context(group, info_name="posexp")


def param_rows(params: list[Any], ctx: Any) -> list[list[str]]:
    """One row per click parameter: how it is written, its type, default and help."""
    rows = []
    for p in params:
        if p.param_type_name == "argument":
            names = f"`{p.name.upper()}`" + (" (one or more)" if p.nargs == -1 else "")
        else:
            names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        # Typer's own click shows types as <int>, <list[str]>; plain click has type.name.
        kind = p.display_type(ctx).strip("<>") if hasattr(p, "display_type") else p.type.name
        if getattr(p, "multiple", False):
            kind = kind.removeprefix("list[").removesuffix("]") + " (repeatable)"
        flag = getattr(p, "is_flag", False)
        default = code(p.default if p.default is not None or not flag else False)
        rows.append([names, "flag" if flag else kind, "required" if p.required else default])
        rows[-1].append(cell(getattr(p, "help", None) or ""))
    return rows


def cli_section(name: str | None) -> str:
    """The group's own options (``name`` None), or one command's usage, help and parameters,
    with Hydra's own flags (the parser ``hydra.main`` reads) for the commands that take them."""
    import typer
    from hydra._internal.utils import get_args_parser

    group, root = app_group()
    header = ["argument or option", "type", "default", "help"]
    if name is None:
        return table(header, param_rows(group.get_params(root), root))
    command = group.get_command(root, name)
    if command is None:
        raise PluginError(f"posexp:cli names no command {name!r}")
    ctx = typer.Context(command, info_name=name, parent=root, **command.context_settings)
    usage = " ".join(["posexp", name, *command.collect_usage_pieces(ctx)])
    rows = param_rows(command.get_params(ctx), ctx)
    parts = [f"```text\n{usage}\n```", cell(command.help or "")]
    parts.append(table(header, rows) if rows else "It has no options of its own.")
    if command.context_settings.get("ignore_unknown_options"):
        parts.append("Its other arguments go to Hydra: config overrides, and Hydra's own flags:")
        hydra = []
        for a in get_args_parser()._actions:
            names = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.dest.upper()}` (any)"
            takes = f"one of {', '.join(a.choices)}" if a.choices else "text"
            takes, default = "flag" if a.nargs == 0 else takes, a.default
            first_line = str(a.help).splitlines()[0].rstrip(":") if a.help else ""
            default = code(None if default == argparse.SUPPRESS else default)
            hydra.append([names, takes, default, cell(first_line)])
        parts.append(table(["flag", "takes", "default", "help (Hydra's)"], hydra))
    return "\n\n".join(parts)


def yaml_comments(text: str) -> dict[str, str]:
    """Each key's comment, by dotted key: the comment lines right above it (not the file's
    header), then the one on its line, continued on deeper comment-only lines below it."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last: tuple[int, str] | None = None  # the key a deeper comment line continues
    above: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("#"):
            if last and len(line) - len(line.lstrip()) > last[0]:
                comments[last[1]] += " " + line.strip().lstrip("# ")
            else:
                last = None
                above.append(line.strip().lstrip("# "))
            continue
        m = KEY_LINE.match(line)
        if not m:
            last, above = None, []
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        above, stack = (above if comments else []), [*stack, (indent, m.group(2))]
        key = ".".join(k for _, k in stack)
        comment = m.group(3).split(" #", 1)[1].strip() if " #" in m.group(3) else ""
        comments[key] = " ".join([*above, comment]).strip()
        last, above = ((indent, key) if comment else None), []
    return comments


def leaves(data: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every key; a section yields itself (value ...), then its keys."""
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield prefix + key, ...
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def header_comment(text: str) -> str:
    """The first paragraph of the comment that opens a config file (not ``# @package``)."""
    opening = re.match(r"(?:# (?!  ).*\n)*", text).group(0).splitlines()  # up to an example
    return cell(" ".join(x[2:] for x in opening if not x.startswith("# @package")))


def key_rows(path: Path, option: str | None) -> list[list[str]]:
    """One row per key of a config file; sections only where they carry a comment."""
    text = path.read_text()
    comments = yaml_comments(text)
    rows = []
    for key, value in leaves(yaml.safe_load(text) or {}):
        comment = cell(comments.get(key, ""))
        if key.startswith("hydra.help") or (value is ... and not comment):
            continue  # Hydra's help texts, and sections that only hold keys
        default = "(section)" if value is ... else code(value)
        rows.append(([f"`{option}`"] if option else []) + [f"`{key}`", default, comment])
    return rows


def config_reference() -> str:
    """The primary configs, then one section per config group: its options and their keys."""
    parts = []
    for path in sorted(p for p in CONFIGS.glob("*.yaml") if p.stem != "findings"):
        parts += [f"### `{path.name}`", header_comment(path.read_text())]
        parts.append(table(["key", "default", "comment"], key_rows(path, None)))
    for group in sorted({p.parent for p in CONFIGS.rglob("*.yaml")} - {CONFIGS}):
        name, files = group.relative_to(CONFIGS).as_posix(), sorted(group.glob("*.yaml"))
        # An explicit anchor: links to a group must not break when it gains an option.
        parts.append(
            f"### `{name}` ({len(files)} option{'s' * (len(files) > 1)}) {{#config-{name}}}"
        )
        about = [[f"`{name}={f.stem}`", header_comment(f.read_text())] for f in files]
        parts.append(table(["option", "what it is"], about))
        rows = [row for f in files for row in key_rows(f, f.stem)]
        parts.append(table(["option", "key", "default", "comment"], rows) if rows else "")
    return "\n\n".join(parts)


def pe_reference() -> str:
    """One row per registered positional encoding: what it declares and what it takes."""
    from posexp.pe import PE_REGISTRY, PositionalEncoding, accepted_extensions

    rows = []
    for name, cls in PE_REGISTRY.items():
        path = CONFIGS / "pe" / f"{name}.yaml"
        defaults = yaml.safe_load(path.read_text()) if path.exists() else {}
        signature = inspect.signature(cls.__init__).parameters
        settings = [
            f"`{key}={code(defaults.get(key, signature[key].default))[1:-1]}`"
            for key in cls.settings()
        ]
        notes = {"needs even head dim": cls.needs_even_head_dim, "reads digits": cls.reads_digits}
        flex = "yes" if cls.score_mod is not PositionalEncoding.score_mod else "no"
        methods = ", ".join(accepted_extensions(name))
        label, family = cell(cls.label or name), cell(cls.family or cls.kind)
        rows.append([f"`{name}`", label, family, cls.kind, ", ".join(settings) or "none"])
        notes["randomized positions"] = "randomized" in defaults
        rows[-1] += [methods, flex, "; ".join(n for n, holds in notes.items() if holds)]
    header = ["pe=", "label", "family", "kind", "settings (pe.*)", "methods", "FlexAttention"]
    return table([*header, "notes"], rows)


def methods_reference() -> str:
    """One row per registered extension method: what it changes, where it applies, settings."""
    from posexp.extension import EXTENSIONS
    from posexp.pe import PE_REGISTRY, accepted_extensions

    rows = []
    for name, method in EXTENSIONS.items():
        pes = [pe for pe in PE_REGISTRY if name in accepted_extensions(pe)]
        settings = []
        for s in method.spec_settings:
            default = "length/L0" if s.name == "factor" else code(method.params[s.name])[1:-1]
            settings.append(f"`{s.name}={default}`: {cell(s.allowed)}")
        when = "evaluation and generation" if method.training_free else "training and evaluation"
        where = "every encoding" if len(pes) == len(PE_REGISTRY) else ", ".join(pes)
        rows.append([f"`{name}`", f"`{method.acts_on}`", when, where])
        rows[-1].append("<br>".join(settings) or "none")
    header = ["method", "changes", "when", "encodings", "settings (spec key=default: allowed)"]
    return table(header, rows)


GENERATORS = {"config": config_reference, "pes": pe_reference, "methods": methods_reference}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace every posexp marker of the page with its generated Markdown."""
    named: list[str] = []

    def replace(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind == "cli":
            named.extend([arg] if arg else [])
            return cli_section(arg)
        if kind not in GENERATORS or arg:
            raise PluginError(f"{page.file.src_path}: unknown marker {m.group(0)}")
        return GENERATORS[kind]()

    markdown = MARKER.sub(replace, markdown)
    if named:
        group, root = app_group()
        missing = [c for c in group.list_commands(root) if c not in named]
        if missing:
            raise PluginError(f"{page.file.src_path}: no posexp:cli marker for {missing}")
    return markdown
