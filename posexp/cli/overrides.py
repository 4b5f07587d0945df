"""Checks on the Hydra overrides of ``posexp train`` and ``posexp finetune``, made before Hydra
runs: Hydra creates the run dir first thing, so a refused command line must never reach it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from posexp.checks import user_path
from posexp.errors import PosexpError
from posexp.paths import config_dir


def expand_method_specs(args: list[str]) -> list[str]:
    """``extension=yarn(beta_fast=16)`` as Hydra takes it: ``extension=yarn
    extension.beta_fast=16`` (a spec checked by its method first, in one line). Bare names and
    sweeps of bare names pass unchanged; a sweep over specs is refused (one setting at a time
    sweeps: ``extension=yarn extension.beta_fast=8,16``). A setting the spec sets and another
    argument sets again is refused: which one wins would be Hydra's order, not the user's."""
    from posexp.extension.spec import format_value, parse_spec, spec_of, split_specs

    out: list[str] = []
    from_spec: dict[str, str] = {}  # extension.<key> -> the spec argument that set it
    for arg in args:
        key, eq, value = arg.partition("=")
        if key.lstrip("+") != "extension" or not eq or "(" not in value:
            out.append(arg)
            continue
        value = value.strip().strip("'\"")
        if len(split_specs(value, "extension=")) > 1:
            raise PosexpError(
                f"extension={value!r}: a sweep over method specs is not supported; sweep one "
                f"setting at a time, e.g. extension=yarn extension.beta_fast=8,16"
            )
        spec = parse_spec(value, "extension=", baked=False)
        spec = spec_of(spec.name, spec.settings, spec.factor)  # the settings it changes only
        out.append(f"{key}={spec.name}")
        changed = {**spec.settings, **({} if spec.factor is None else {"factor": spec.factor})}
        for k, v in changed.items():
            out.append(f"extension.{k}={format_value(v)}")
            from_spec[f"extension.{k}"] = arg
    for arg in args:
        key = arg.partition("=")[0].lstrip("+~")
        if key in from_spec and arg is not from_spec[key]:
            raise PosexpError(
                f"{key} given twice: in {from_spec[key]!r} and in {arg!r}; allowed: set it "
                f"once, in the spec or as {key}=<value>"
            )
    return out


# Keys whose value is a mapping the config leaves open (a RULER task's own options): Hydra adds a
# key to a mapping only under `+`, so the plain `data.task_options={niah_single: {...}}` would be
# refused although the setting exists. `++` adds or overrides, whichever applies; a data choice
# without the key still refuses it, by name (posexp.data).
OPEN_MAPPINGS = ("data.task_options",)


def open_mapping_args(args: list[str]) -> list[str]:
    """Overrides of (or inside) an open mapping given without a prefix, as ``++key=value``."""
    out = []
    for arg in args:
        key, eq, _ = arg.partition("=")
        inside = any(key == k or key.startswith(f"{k}.") for k in OPEN_MAPPINGS)
        out.append(f"++{arg}" if eq and inside else arg)
    return out


def quote_method_lists(args: list[str]) -> list[str]:
    """``extrapolate.method=yarn(beta_fast=16)`` given unquoted, quoted for Hydra (which reads
    ``yarn(...)`` as a call of an unknown function) once the specs check, in one line, as the
    preset's key will. Under -m a list is the sweep check's to refuse, so it is left as given."""
    from posexp.extension.spec import parse_specs

    if any(a in ("-m", "--multirun") for a in args):
        return args
    out = []
    for arg in args:
        key, eq, value = arg.partition("=")
        quoted = value[:1] in ("'", '"')
        if key.lstrip("+") == "extrapolate.method" and eq and "(" in value and not quoted:
            parse_specs(value, "extrapolate.method=")
            arg = f"{key}='{value}'"
        out.append(arg)
    return out


def hydra_args(args: list[str]) -> list[str]:
    """``posexp train``'s arguments as Hydra reads them: specs expanded, a method list quoted,
    open mappings added to, a resume path quoted."""
    return quote_resume_path(open_mapping_args(quote_method_lists(expand_method_specs(args))))


def check_overrides(args: list[str]) -> None:
    """Every check below, in the order a user would want to hear of them."""
    check_evaluation_not_swept(args)
    check_slurm_request(args)
    check_resume_arg(args)
    check_experiment_arg(args)
    check_output_arg(args)
    check_run_dir_arg(args)


def check_slurm_request(args: list[str]) -> None:
    """Refuse a Slurm sweep whose request no node of its partition can run (it would pend
    forever), before anything is submitted (``posexp.runtime.slurm``)."""
    if not any(a in ("-m", "--multirun") for a in args):
        return
    from posexp.runtime.slurm import check_request, launcher_params

    params = launcher_params(args, config_dir())
    if params is not None:
        check_request(params)


def check_evaluation_not_swept(args: list[str]) -> None:
    """Refuse a sweep over an ``extrapolate.*`` key: those settings are read at evaluation, not
    in training, so its jobs would train the same run into one job dir. A list is quoted."""
    if not any(a in ("-m", "--multirun") for a in args):
        return
    for key in sweep_keys(args)["swept"]:
        if key.startswith("extrapolate."):
            value = next(a.split("=", 1)[1] for a in args if a.split("=", 1)[0].lstrip("+") == key)
            raise PosexpError(
                f"{key}={value} sweeps an evaluation setting, which would train the same job "
                f"once per value into one dir; quote it to give a list: {key}='{value}'"
            )


def check_output_arg(args: list[str]) -> None:
    """Refuse a run or sweep dir that cannot be written (a file in the way, read-only) up front."""
    from posexp.files import check_writable

    if any(a in ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info") for a in args):
        return
    values = {
        k.lstrip("+"): v
        for k, v in (a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    }
    multirun = any(a in ("-m", "--multirun") for a in args)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if values.get("resume") not in (None, "null"):
        check_writable(values["resume"], "resume=")
    elif key in values:
        check_writable(values[key], key)
    else:
        check_writable("outputs", "the output folder")
    # The token cache is written before the first step: a bad one must not cost a run dir.
    if "cache_dir" in values:
        check_writable(values["cache_dir"], "cache_dir")
    elif os.environ.get("POSEXP_CACHE") is not None:  # train.yaml's cache_dir reads it
        check_writable(os.environ["POSEXP_CACHE"], "POSEXP_CACHE")
    if values.get("parent") not in (None, "null"):
        user_path("parent", values["parent"])


def check_run_dir_arg(args: list[str]) -> None:
    """Refuse, before Hydra touches it, a run dir another process writes or an explicit one in use.

    ``resume=<dir>`` while another process writes that dir, or ``hydra.run.dir=<dir>`` of an
    existing run (continue that one with ``resume=``) or of a run starting there now. Sweep jobs
    are checked one by one in their task, so a busy job fails alone.
    """
    from posexp.rundir import RunDir

    if any(
        a in ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-m", "--multirun")
        for a in args
    ):
        return
    values = {
        a.split("=", 1)[0]: hydra_value(a)
        for a in args
        if a.split("=", 1)[0] in ("resume", "hydra.run.dir") and "=" in a
    }
    if values.get("resume") not in (None, ""):
        RunDir(Path(str(values["resume"]))).check_free("resume=")
    elif values.get("hydra.run.dir"):
        run = RunDir(Path(str(values["hydra.run.dir"])))
        run.check_free("hydra.run.dir=")
        if run.is_run():
            raise PosexpError(
                f"hydra.run.dir={str(run.path)!r} already holds a run; continue it "
                f"with `posexp train resume={run.path}` or choose a new dir"
            )
        if run.path.is_dir() and any(run.path.iterdir()):  # its files would mix with the run's
            raise PosexpError(
                f"hydra.run.dir={str(run.path)!r} holds other files and no run; choose a new "
                "or empty dir"
            )


def check_experiment_arg(args: list[str]) -> None:
    """Refuse an unknown ``experiment=`` (the group is optional, so Hydra would skip it silently)."""
    allowed = sorted(p.stem for p in (Path(config_dir()) / "experiment").glob("*.yaml"))
    for arg in args:
        key, _, value = arg.lstrip("+").partition("=")
        if key != "experiment" or value in ("", "null"):
            continue
        for name in value.split(","):  # a sweep: experiment=a,b
            if name not in allowed:
                raise PosexpError(f"unknown experiment {name!r}; allowed: {', '.join(allowed)}")


def quote_resume_path(args: list[str]) -> list[str]:
    """``resume=<dir>`` as Hydra reads a path: quoted where Hydra's grammar would read it as
    more than a string. A sweep job's dir holds ``=`` and ``,`` (``pe=rope,seed=0``), so the
    resume command posexp prints for it could not be pasted back otherwise."""
    out = []
    for arg in args:
        key, eq, value = arg.partition("=")
        plain = value == "null" or value[:1] in ("'", '"')
        if key == "resume" and eq and not plain and hydra_value(arg) != value:
            escaped = value.replace("\\", "\\\\").replace("'", "\\'")
            arg = f"resume='{escaped}'"
        out.append(arg)
    return out


def hydra_value(arg: str) -> Any:
    """The value Hydra reads from the override ``arg`` (quotes removed), or None if it refuses it
    or reads a sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (override,) = OverridesParser.create().parse_overrides([arg])
    except Exception:  # noqa: BLE001  Hydra's grammar errors have no common base to name
        return None
    return None if override.is_sweep_override() else override.value()


def check_resume_arg(args: list[str]) -> None:
    """Reject a bad ``resume=`` before Hydra creates (and so half-writes) its run dir."""
    from posexp.rundir import RunDir

    for arg in args:
        if arg.startswith("resume="):
            value = hydra_value(arg)
            if value is None:  # null, or refused by Hydra, which says why itself
                continue
            RunDir.open(
                user_path("resume=", str(value)), "resume="
            ).meta()  # one-line error unless it holds a checkpoint


def sweep_keys(args: list[str]) -> dict[str, list[str]]:
    """The command line's override keys that sweep (``heads=1,2``) and those it fixes."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    out: dict[str, list[str]] = {"swept": [], "fixed": []}
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            (override,) = parser.parse_overrides([arg])
        except Exception:  # noqa: BLE001  Hydra reports a bad override itself
            continue
        out["swept" if override.is_sweep_override() else "fixed"].append(override.key_or_group)
    return out
