"""How the `posexp` command turns Click's, Hydra's and OmegaConf's errors into one line."""

from __future__ import annotations

import re
from types import ModuleType


def one_line(e: BaseException) -> str:
    """Hydra's config errors are multi-line; users get one line naming the value and the options."""
    from hydra.errors import MissingConfigException

    if isinstance(e, MissingConfigException) and e.missing_cfg_file and e.options:
        group, _, name = str(e.missing_cfg_file).rpartition("/")
        return f"unknown {group or 'config'} {name!r}; allowed: {', '.join(sorted(e.options))}"
    unknown = re.match(r"Could not override '([\w.]+)'", str(e))
    if unknown:
        return closed_mapping_line(e, unknown[1]) or unknown_key_line(unknown[1])
    function = re.search(
        r"Error parsing override '([^=']+)=([^']*)'.*Unknown function '(\w+)'", str(e), re.DOTALL
    )
    if function:  # a method spec, which Hydra's grammar reads as a call of its own functions
        key, value, name = function.groups()
        return (
            f"{key}={value}: Hydra reads {name}(...) as a function of its own; quote the spec "
            f"inside the override: '{key}=\"{value}\"'"
        )
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return " ".join(lines[:3]) or type(e).__name__


def closed_mapping_line(e: BaseException, key: str) -> str | None:
    """The key exists but its mapping lacks a key the value adds: what to type instead."""
    # Hydra refuses a new key under an existing one whose value is a mapping: the cause names a
    # key below the override's. Its own advice, `+key=value`, is then the right command.
    missing = str(getattr(e.__cause__, "full_key", "") or "")
    typed = re.search(r"use (\+\S.*)$", str(e), re.DOTALL)
    if not missing.startswith(f"{key}.") or typed is None:
        return None
    return (
        f"{key} has no key {missing[len(key) + 1 :]!r} yet; a mapping takes new keys only "
        f"with a leading +: {' '.join(typed[1].split())}"
    )


def unknown_key_line(key: str) -> str:
    """An override of a key the config does not have: the closest one it has (Hydra's own
    advice, ``+key=``, would add the typo to the config)."""
    import difflib

    from posexp.config.run import known_keys

    keys = known_keys()
    section, _, leaf = key.rpartition(".")
    if key in keys and section and not choices_with(section, leaf):
        # An optional section, absent from this config (extrapolate: an experiment's): the
        # closest key would be the key itself.
        return (
            f"{key} is not in this config (its section {section} is optional, e.g. from an "
            f"experiment preset); add it with a leading +: +{key}=..."
        )
    owners = choices_with(section, leaf)
    if key in keys and owners:  # a setting of another choice of the group (num_buckets: t5)
        return (
            f"{key} is not a setting of the {section} chosen; {', '.join(owners)} "
            f"{'has' if len(owners) == 1 else 'have'} it ({section}={owners[0]})"
        )
    siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == section]
    if section in keys and not siblings:  # a group whose keys are the choice's (data, tokenizer)
        return (
            f"unknown setting {key}: the {section} chosen has no {leaf!r} (its keys: "
            f"`posexp train {section}=<choice> --cfg job`)"
        )
    if siblings:  # a known section (or the top level): the closest key there
        near = [
            f"{section}.{n}" if section else n
            for n in difflib.get_close_matches(leaf, siblings, n=1)
        ]
    else:  # a misspelt section: the closest whole key
        near = difflib.get_close_matches(
            key, [k for k in keys if k.count(".") == key.count(".")], n=1
        )
    if near:
        return f"unknown setting {key}; did you mean {near[0]}?"
    if not siblings:  # no such section: name the sections there are
        top = ", ".join(k for k in keys if "." not in k)
        return f"unknown setting {key}: no {section!r} in the config; allowed at the top: {top}"
    where = f" in {section}" if section else ""
    return f"unknown setting {key}; allowed{where}: {', '.join(siblings)}"


def choices_with(section: str, leaf: str) -> list[str]:
    """The encodings (``pe``) or extension methods that have the setting ``leaf``."""
    from posexp.extension import EXTENSIONS
    from posexp.pe import PE_REGISTRY

    if section == "pe":
        return [name for name, pe in PE_REGISTRY.items() if leaf in pe.settings()]
    if section == "extension":
        return [name for name, m in EXTENSIONS.items() if leaf in {s.name for s in m.settings}]
    return []


def click_exceptions() -> ModuleType:
    """The module of the Click exceptions Typer raises (newer Typer releases bundle Click)."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def usage_line(e: Exception) -> str:
    """A Click usage error as one line: the command, what is wrong, the value, where help is."""
    # Instead of Click's framed block (usage, a hint, a box): every other posexp error is one line.
    ctx = getattr(e, "ctx", None)
    command = ctx.command_path if ctx is not None else "posexp"
    message = " ".join(e.format_message().split()).rstrip(".")
    # Typer checks values with pydantic, whose message does not repeat the value.
    errors = getattr(e.__cause__, "errors", None)
    if callable(errors):
        try:
            message += f", got {errors()[0]['input']!r}"
        except (LookupError, TypeError):
            pass
    if ctx is not None and hasattr(ctx.command, "list_commands") and "No such command" in message:
        message += f"; commands: {', '.join(ctx.command.list_commands(ctx))}"
    return f"{command}: {message} (see `{command} --help`)"


def is_sweep(argv: list[str]) -> bool:
    """True for `posexp train -m ...` / `--multirun`."""
    return any(a in ("-m", "--multirun") for a in argv[1:])


def sweep_failure(e: Exception) -> str:
    """The one line for a sweep job that failed, or that the scheduler ended (scancel, node loss)."""
    unfinished = re.search(r"with path (\S+?)/\.submitit/.*\(state: ([A-Z_]+)", str(e), re.DOTALL)
    if type(e).__name__ == "UncompletedJobError" and unfinished:
        sweep, state = unfinished.groups()
        return (
            f"error: a sweep job ended without a result (Slurm state {state}); the other jobs "
            f"ran; to finish the sweep, rerun the same command with hydra.sweep.dir={sweep}: "
            "completed jobs are skipped, the others resume from their checkpoints"
        )
    return (
        f"error: a sweep job failed ({type(e).__name__}: {one_line(e)}); the other "
        "jobs ran; see results.json in each job dir or run `posexp report <sweep dir>`"
    )
