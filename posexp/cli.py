"""The `posexp` command: Typer in front, Hydra's real entry point behind the config commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from posexp.errors import PosexpError

app = typer.Typer(
    name="posexp",
    help="Train tiny decoder-only transformers and compare positional encodings.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Pass-through commands hand every argument to Hydra, --help included (it lists config groups).
HYDRA_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def config_dir() -> str:
    """Absolute configs dir: packaged copy in a wheel, the repo's configs/ in an editable install."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "train.yaml").is_file():
            return str(candidate)
    raise PosexpError(f"posexp configs not found next to {here}; reinstall posexp")


def run_hydra(task, config_name: str, args: list[str]) -> None:
    """Run ``task`` under ``hydra.main`` with ``args`` as its command line."""
    import hydra

    saved = sys.argv
    sys.argv = [saved[0], *args]
    try:
        hydra.main(version_base="1.3", config_path=config_dir(), config_name=config_name)(task)()
    finally:
        sys.argv = saved


@app.command(context_settings=HYDRA_COMMAND)
def train(ctx: typer.Context) -> None:
    """Train a model. Arguments are Hydra overrides, e.g. `pe=rope heads=8`, `-m` for sweeps."""
    from posexp.tasks.train import train_task

    run_hydra(train_task, "train", ctx.args)


def _one_line(e: BaseException) -> str:
    """Hydra's config errors are multi-line; users get one line naming the value and the options."""
    from hydra.errors import MissingConfigException

    if isinstance(e, MissingConfigException) and e.missing_cfg_file and e.options:
        group, _, name = str(e.missing_cfg_file).rpartition("/")
        return f"unknown {group or 'config'} {name!r}; allowed: {', '.join(sorted(e.options))}"
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return " ".join(lines[:3]) or type(e).__name__


def main() -> None:
    """Console-script entry point: user errors become one line on stderr and exit status 2."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    # Hydra then re-raises instead of printing its own multi-line report, so we can print one line.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        app()
    except PosexpError as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None
    except (HydraException, OmegaConfBaseException) as e:
        typer.echo(f"error: {_one_line(e)}", err=True)
        raise SystemExit(2) from None
