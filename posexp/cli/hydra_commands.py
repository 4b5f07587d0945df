"""The `posexp` commands that hand their arguments to Hydra (train, finetune), and the Ctrl-C
rule every command shares."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

import typer

from posexp.cli.overrides import sweep_keys
from posexp.config.paths import config_dir
from posexp.config.resolvers import SWEEP_ENV


def says_interrupted(command: Callable[..., Any]) -> Callable[..., Any]:
    """Ctrl-C in any command: the line "interrupted" and exit status 130 (Typer would exit 130
    silently); the command has said what it kept, e.g. a run's last checkpoint."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt as e:
            signum = getattr(e, "signum", signal.SIGINT)
            typer.echo(
                "interrupted"
                if signum == signal.SIGINT
                else f"stopped ({signal.Signals(signum).name})",
                err=True,
            )
            from posexp.runtime.stops import still_running

            if still_running():  # a forward the stop interrupted goes on in its thread
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(128 + signum)
            raise typer.Exit(128 + signum) from None

    return run


# Pass-through commands hand every argument to Hydra, --help included (it lists config groups).
HYDRA_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def run_hydra(task, config_name: str, args: list[str]) -> None:
    """Run ``task`` under ``hydra.main`` with ``args`` as its command line."""
    import hydra

    from posexp.commands import hydra_tasks, quiet_schema_match_warning
    from posexp.errors import PosexpError

    saved, saved_env = sys.argv, os.environ.get(SWEEP_ENV)
    # Hydra names the completion it installs after argv[0]: `posexp`, also under `python -m`.
    completion = any(a in ("-sc", "--shell-completion") for a in args)
    sys.argv = ["posexp" if completion else saved[0], *args]
    if any(a in ("-m", "--multirun") for a in args):  # job dirs named by the swept keys
        os.environ[SWEEP_ENV] = json.dumps(sweep_keys(args))
    try:
        with warnings.catch_warnings():  # the filter again: a caller may have reset them
            quiet_schema_match_warning()
            hydra_tasks.LAST_SWEEP.clear()
            hydra.main(version_base="1.3", config_path=config_dir(), config_name=config_name)(
                task
            )()
        ended = hydra_tasks.LAST_SWEEP
        if ended.get("failed"):  # the summary above names each failed job and its error
            others = "; the others ran" if ended["failed"] < ended["jobs"] else ""
            raise PosexpError(
                f"{ended['failed']} of {ended['jobs']} sweep jobs failed (listed above){others}; "
                f"fix them, then rerun the same command with hydra.sweep.dir={ended['dir']}: "
                "completed jobs are skipped"
            )
    finally:
        sys.argv = saved
        if saved_env is None:
            os.environ.pop(SWEEP_ENV, None)
        else:
            os.environ[SWEEP_ENV] = saved_env
