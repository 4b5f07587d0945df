"""The `posexp` command: Typer in front, Hydra's real entry point behind the config commands."""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from posexp import cli_overrides
from posexp.cli_errors import click_exceptions, is_sweep, one_line, sweep_failure, usage_line
from posexp.cli_help import Command, Group
from posexp.cli_overrides import check_output_arg, check_overrides, sweep_keys
from posexp.errors import Abort, PosexpError
from posexp.paths import config_dir
from posexp.resolvers import SWEEP_ENV

app = typer.Typer(
    name="posexp",
    cls=Group,
    help="Train tiny decoder-only transformers and compare positional encodings.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from posexp import __version__

        typer.echo(f"posexp {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print posexp's version and exit.",
    ),
) -> None:
    """Train tiny decoder-only transformers and compare positional encodings."""


# Pass-through commands hand every argument to Hydra, --help included (it lists config groups).
def says_interrupted(command: Callable[..., Any]) -> Callable[..., Any]:
    """Ctrl-C in any command: the line "interrupted" and exit status 130 (Typer would exit 130
    silently); the command has said what it kept, e.g. a run's last checkpoint."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return run


HYDRA_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def run_hydra(task, config_name: str, args: list[str]) -> None:
    """Run ``task`` under ``hydra.main`` with ``args`` as its command line."""
    import hydra

    from posexp.commands import quiet_schema_match_warning

    saved, saved_env = sys.argv, os.environ.get(SWEEP_ENV)
    # Hydra names the completion it installs after argv[0]: `posexp`, also under `python -m`.
    completion = any(a in ("-sc", "--shell-completion") for a in args)
    sys.argv = ["posexp" if completion else saved[0], *args]
    if any(a in ("-m", "--multirun") for a in args):  # job dirs named by the swept keys
        os.environ[SWEEP_ENV] = json.dumps(sweep_keys(args))
    try:
        with warnings.catch_warnings():  # the filter again: a caller may have reset them
            quiet_schema_match_warning()
            hydra.main(version_base="1.3", config_path=config_dir(), config_name=config_name)(
                task
            )()
    finally:
        sys.argv = saved
        if saved_env is None:
            os.environ.pop(SWEEP_ENV, None)
        else:
            os.environ[SWEEP_ENV] = saved_env


@app.command(cls=Command, context_settings=HYDRA_COMMAND)
@says_interrupted
def train(ctx: typer.Context) -> None:
    """Train a model. Arguments are Hydra overrides, e.g. `pe=rope heads=8`, `-m` for sweeps."""
    from posexp.commands import hydra_tasks

    check_overrides(ctx.args)
    run_hydra(hydra_tasks.train, "train", ctx.args)


@app.command(cls=Command)
@says_interrupted
def generate(
    prompts: list[str] = typer.Argument(
        ..., help="Texts: sources to translate (pairs run) or to continue (lm run)."
    ),
    run: Path | None = typer.Option(
        None, "--run", help="Run dir (default: the latest under outputs/)."
    ),
    max_new_tokens: int = typer.Option(
        200, "--max-new-tokens", help="Most tokens to generate per prompt (at most 65,536)."
    ),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy (deterministic)."),
    top_k: int | None = typer.Option(None, "--top-k", help="Sample from the k most likely tokens."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed, 0 to 2**63 - 1."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | mps"),
    beam: int | None = typer.Option(
        None,
        "--beam",
        help="Beam size (1 = greedy); default: the run's translate.beam_size for a translation run, else 1.",
    ),
    length_penalty: float | None = typer.Option(
        None,
        "--length-penalty",
        help="Beam search's GNMT length penalty alpha; default: the run's translate.length_penalty (0.6).",
    ),
    method: str | None = typer.Option(
        None,
        "--method",
        help="Extension method instead of the run's own, e.g. self_extend, rerope, yarn.",
    ),
    factor: float | None = typer.Option(
        None, "--factor", help="Its factor s; default (prompt + new tokens) / training length."
    ),
) -> None:
    """Generate from a trained run: one output line per prompt (batched, KV cache)."""
    from posexp.commands.generate import generate_text

    def announce(run_dir: Path) -> None:
        # stderr: stdout stays the generated text only, one line per prompt.
        typer.echo(f"run: {run_dir}", err=True)

    for text in generate_text(
        run,
        prompts,
        max_new_tokens,
        temperature,
        top_k,
        seed,
        device,
        beam_size=beam,
        length_penalty=length_penalty,
        announce=announce,
        method=method,
        factor=factor,
    ):
        typer.echo(text)


@app.command("eval-extrapolate", cls=Command)
@says_interrupted
def eval_extrapolate(
    run: Path | None = typer.Option(
        None,
        "--run",
        help="Run dir, or a sweep dir (every job); default: the newest run under outputs/.",
    ),
    length: int | None = typer.Option(
        None,
        "--len",
        help="Longest length; lengths double from the training length up to it. Default 4096.",
    ),
    lengths: str | None = typer.Option(
        None, "--lengths", help="Explicit lengths, e.g. 64,128,512 (instead of --len)."
    ),
    method: list[str] | None = typer.Option(
        None,
        "--method",
        help="Extension methods, e.g. none,pi,yarn (repeatable); default: all that apply to the run's PE, plus 'baked' for a fine-tuned run.",
    ),
    factor: float | None = typer.Option(
        None,
        "--factor",
        help="Fixed factor s for every length; default length / training length (1 for dynamic_ntk, which scales itself).",
    ),
    protocol: str | None = typer.Option(
        None, "--protocol", help="nonoverlap | sliding | both (default nonoverlap)."
    ),
    stride: int | None = typer.Option(
        None, "--stride", help="Sliding-window stride; default training length / 2."
    ),
    tokens: int | None = typer.Option(
        None,
        "--tokens",
        help="Scored test tokens per length, the same at every length; default max(16384, 4 x longest).",
    ),
    depths: str | None = typer.Option(
        None,
        "--depths",
        help="Passkey runs: key depths to score, e.g. 0,0.1,0.5,1 (0: the key opens the filler, 1: just before the question); default the run's data.depths.",
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | mps"),
    batch_tokens: int = typer.Option(
        8192, "--batch-tokens", help="Tokens per forward pass (lower it to save memory)."
    ),
) -> None:
    """Test-split perplexity at lengths past the training length, per extension method."""
    from posexp.commands.extrapolate.evaluate import evaluate_runs
    from posexp.commands.extrapolate.plan import Settings
    from posexp.config import ExtrapolateConfig

    # The option names are the preset's keys (extrapolate.len is --len): one checker for both.
    options = {
        "len": length,
        "lengths": lengths,
        "method": method,
        "factor": factor,
        "protocol": protocol,
        "stride": stride,
        "tokens": tokens,
        "depths": depths,
    }
    settings = Settings(ExtrapolateConfig.from_dict(options, prefix="--"), device, batch_tokens)
    evaluate_runs(run, settings)


@app.command(cls=Command, context_settings=HYDRA_COMMAND)
@says_interrupted
def finetune(
    ctx: typer.Context,
    run: Path | None = typer.Option(
        None, "--run", help="The run to continue (its checkpoint is loaded)."
    ),
) -> None:
    """Continue a run at a longer train.seq_len with an extension baked in, as a new run.

    Other arguments are Hydra overrides, e.g. `extension=yarn extension.factor=4 train.max_steps=200`.
    """
    from posexp.commands import hydra_tasks
    from posexp.commands.finetune import finetune_args

    check_output_arg(ctx.args)
    cli_overrides.check_run_dir_arg(ctx.args)
    run_hydra(hydra_tasks.finetune, "finetune", finetune_args(run, ctx.args))


@app.command(cls=Command)
@says_interrupted
def report(
    target: Path = typer.Argument(..., help="A sweep dir (outputs/sweeps/...) or a run dir."),
    evaluate: bool = typer.Option(
        True,
        "--eval/--no-eval",
        help="Run eval-extrapolate first for jobs whose config asks for it (experiment=extrapolation) and that lack results.",
    ),
    device: str = typer.Option(
        "auto", "--device", help="Device for that evaluation: auto | cpu | cuda | mps"
    ),
) -> None:
    """Write report.md, report.csv and PNG plots for a sweep or run dir."""
    from posexp.commands.report.write import write_report

    write_report(target, evaluate=evaluate, device=device)


@app.command(cls=Command)
@says_interrupted
def runs(
    root: Path = typer.Argument(
        Path("outputs"), help="Folder to search (runs and sweeps below it)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records instead of a table."),
    wide: bool = typer.Option(False, "--wide", help="Every column, even those empty in every run."),
) -> None:
    """List every run under a folder, oldest first: data, model, seq_len, pe, heads, extension,
    steps, status, val ppl, accuracy, BLEU, minutes."""
    from posexp.commands.runs import list_runs, print_runs

    rows = list_runs(root)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        print_runs(rows, wide=wide)


def complete_command_line(args: list[str]) -> None:
    """Answer the shell-completion script of ``posexp train|finetune --shell-completion install=``.

    Hydra's script calls ``posexp -sc query=bash`` with the line typed so far in ``COMP_LINE``;
    the subcommand word is taken out (Hydra expects ``<app> <overrides>``) and Hydra answers
    for that subcommand's config. Before a subcommand is typed, the subcommands are the answer.
    """
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    if len(words) < 2 or (len(words) == 2 and not line.endswith(" ")):
        typed = words[1] if len(words) == 2 else ""
        names = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
        print(" ".join(sorted(n for n in names if n.startswith(typed))))
        return
    command = words[1]
    if command not in ("train", "finetune"):
        return  # Hydra overrides exist only for these two
    start = line.index(command)
    rest = line[:start].rstrip() + line[start + len(command) :]
    point = int(os.environ.get("COMP_POINT", len(line)))
    os.environ["COMP_LINE"] = rest
    os.environ["COMP_POINT"] = str(max(0, point - (len(line) - len(rest))))
    from posexp.commands import hydra_tasks

    run_hydra(hydra_tasks.train if command == "train" else hydra_tasks.finetune, command, args)


def main() -> None:
    """Console-script entry point: user errors become one line on stderr and exit status 2."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from posexp.files import disk_full

    # Hydra then re-raises instead of printing its own multi-line report, so we can print one line.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    # provenance.json records the command as typed (posexp.runtime.provenance.COMMAND_ENV).
    os.environ["POSEXP_COMMAND"] = shlex.join(["posexp", *sys.argv[1:]])
    try:
        if len(sys.argv) > 1 and sys.argv[1] in ("-sc", "--shell-completion"):
            complete_command_line(sys.argv[1:])
            return
        code = app(standalone_mode=False)  # Click's usage errors come here, to print one line
        if isinstance(code, int) and code:  # typer.Exit(code), e.g. 130 after Ctrl-C
            raise SystemExit(code)
    except click_exceptions().NoArgsIsHelpError as e:
        e.show()  # bare `posexp`: the command list
        raise SystemExit(e.exit_code) from None
    except click_exceptions().UsageError as e:
        typer.echo(f"error: {usage_line(e)}", err=True)
        raise SystemExit(2) from None
    except click_exceptions().ClickException as e:  # e.g. a file option that cannot be opened
        typer.echo(f"error: {' '.join(e.format_message().split())}", err=True)
        raise SystemExit(e.exit_code) from None
    except typer.Abort:
        typer.echo("aborted", err=True)
        raise SystemExit(1) from None
    except (PosexpError, Abort) as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)  # the task has said where its checkpoint is
        raise SystemExit(130) from None
    except (HydraException, OmegaConfBaseException) as e:
        typer.echo(f"error: {one_line(e)}", err=True)
        raise SystemExit(2) from None
    except OSError as e:
        if disk_full(e) and not is_sweep(sys.argv):
            where = f" writing {str(e.filename)!r}" if e.filename else ""
            typer.echo(
                f"error: no space left on device{where}; free some space, then retry", err=True
            )
            raise SystemExit(2) from None
        if not e.filename or is_sweep(sys.argv):
            raise
        # A path given on the command line that the OS refuses (e.g. a run dir under /proc).
        typer.echo(
            f"error: {str(e.filename)!r}: {e.strerror} (the operating system refused this path)",
            err=True,
        )
        raise SystemExit(2) from None
    except Exception as e:
        from posexp.hardware import out_of_memory

        if disk_full(e) and not is_sweep(sys.argv):  # torch's writer hides the OS error
            typer.echo(
                f"error: no space left on device ({one_line(e)}); free some space, then retry",
                err=True,
            )
            raise SystemExit(2) from None
        if out_of_memory(e) and not is_sweep(sys.argv):  # sizes the machine cannot hold
            typer.echo(f"error: {out_of_memory(e)}; lower the sizes asked for", err=True)
            raise SystemExit(2) from None
        if not is_sweep(sys.argv):
            raise  # a bug, not bad input: keep the traceback
        # The sweep ran every job; each failed one holds results.json and a log with the details.
        typer.echo(sweep_failure(e), err=True)
        raise SystemExit(1) from None
