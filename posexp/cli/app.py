"""The `posexp` command: Typer in front, Hydra's real entry point behind the config commands."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import typer

from posexp.cli import overrides as cli_overrides
from posexp.cli.errors import click_exceptions, is_sweep, one_line, sweep_failure, usage_line
from posexp.cli.help import Command, Group, HydraCommand, help_asked, show_help
from posexp.cli.hydra_commands import HYDRA_COMMAND, run_hydra, says_interrupted
from posexp.cli.overrides import check_output_arg, check_overrides
from posexp.cli.sweep_check import check_jobs
from posexp.errors import Abort, PosexpError
from posexp.runtime.stops import stops_as_interrupt

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


@app.command(cls=HydraCommand, context_settings=HYDRA_COMMAND)
@says_interrupted
def train(ctx: typer.Context) -> None:
    """Train a model. Arguments are Hydra overrides, e.g. `pe=rope heads=8`, `-m` for sweeps."""
    from posexp.commands import hydra_tasks
    from posexp.commands.train import check_config
    from posexp.config.run import from_composed

    if help_asked(ctx.args):  # Hydra would print plain text: the panels of every command instead
        return show_help(ctx)
    args = cli_overrides.hydra_args(ctx.args)
    check_overrides(args)
    check_jobs(args, "train", lambda cfg, overrides: check_config(from_composed(cfg)))
    run_hydra(hydra_tasks.train, "train", args)


@app.command(cls=Command)
@says_interrupted
@stops_as_interrupt()  # SIGTERM as Ctrl-C: a generation inside one long forward ends at once
def generate(
    prompts: list[str] = typer.Argument(
        ..., help="Texts: sources to translate (pairs run) or to continue (lm run)."
    ),
    run: str | None = typer.Option(
        None, "--run", help="Run dir (default: the latest under outputs/)."
    ),
    max_new_tokens: int = typer.Option(
        200, "--max-new-tokens", help="Most tokens to generate per prompt (at most 65,536)."
    ),
    temperature: float = typer.Option(
        0.0,
        "--temperature",
        help="0 = greedy (deterministic; a small language model then tends to repeat a phrase: "
        "sample with e.g. --temperature 0.8 --top-k 40).",
    ),
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
        help="Extension method spec instead of the run's own, e.g. yarn or 'self_extend(group=4,window=16)'.",
    ),
    factor: float | None = typer.Option(
        None, "--factor", help="Its factor s; default (prompt + new tokens) / training length."
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="Torch CPU threads; default torch's (one per core)."
    ),
) -> None:
    """Generate from a trained run: one output line per prompt (batched, KV cache)."""
    from posexp.commands.generate import generate_text

    def announce(run_dir: Path, note: str) -> None:
        # stderr: stdout stays the generated text only, one line per prompt.
        typer.echo(f"run: {run_dir}" + (f" ({note})" if note else ""), err=True)

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
        threads=threads,
    ):
        typer.echo(text)


@app.command("eval-extrapolate", cls=Command)
@says_interrupted
@stops_as_interrupt()  # a Slurm time limit: the cells already scored are kept
def eval_extrapolate(
    run: str | None = typer.Option(
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
        None, "--lengths", help="Explicit lengths, e.g. 32,128,512 (instead of --len; any size)."
    ),
    method: list[str] | None = typer.Option(
        None,
        "--method",
        help="Method specs, name or name(key=value,...), e.g. none,yarn or 'self_extend(group=4,window=16)'; values joined by | are a grid, every combination one spec: 'yarn(factor=4|8|16)' (repeatable; `posexp methods` lists every setting); default: all that apply to the run's PE, plus 'baked' for a fine-tuned run.",
    ),
    factor: float | None = typer.Option(
        None,
        "--factor",
        help="Fixed factor s for every length (a spec's factor=... wins); default length / training length (1 for dynamic_ntk, which scales itself).",
    ),
    protocol: str | None = typer.Option(
        None,
        "--protocol",
        help="Scoring protocols, comma-separated: nonoverlap | sliding | both | doc_position | context_gain (default nonoverlap).",
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
        help="Passkey and needle runs (niah_*, a ruler mixture's niah tasks): key depths to score, e.g. 0,0.1,0.5,1 (0: the key opens the filler, 1: just before the question); default the run's data.depths.",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Rescore the cells asked for even where they are measured on these weights (others are kept).",
    ),
    attention: bool | None = typer.Option(
        None,
        "--attention/--no-attention",
        help="Also measure where attention goes (as `posexp attention`) at the training length and the longest length, for runs not yet measured there; default the preset's extrapolate.attention.",
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | mps"),
    batch_tokens: int = typer.Option(
        8192, "--batch-tokens", help="Tokens per forward pass (lower it to save memory)."
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        help="Runs of a sweep scored at once, in worker processes (CPU); default one per core.",
    ),
    threads: int | None = typer.Option(
        None, "--threads", help="Torch threads (per worker); default the cores / workers."
    ),
) -> None:
    """Score trained runs at lengths past the training length, per method spec and protocol.

    Records accumulate in <run>/eval/: cells already measured on the run's current weights are
    skipped, so evaluations of one run build up one table, plot and TensorBoard view.
    """
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
        "attention": attention,
    }
    knobs = ExtrapolateConfig.from_dict(options, prefix="--")
    evaluate_runs(run, Settings(knobs, device, batch_tokens, force, workers, threads))


@app.command(cls=Command)
@says_interrupted
def attention(
    run: str | None = typer.Option(
        None,
        "--run",
        help="Run dir of a language-model run, or a sweep dir (every job); default: the newest run under outputs/.",
    ),
    length: int | None = typer.Option(
        None,
        "--len",
        help="The longer length measured besides the training length; default: the longest the run was evaluated at by eval-extrapolate.",
    ),
    windows: int = typer.Option(
        8, "--windows", help="Test windows read at each length (non-overlapping, from the start)."
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | mps"),
    batch_tokens: int = typer.Option(
        4096,
        "--batch-tokens",
        help="Tokens per forward pass (one window at least); each layer holds batch x heads x length^2 weights while it runs.",
    ),
) -> None:
    """Where a run's attention goes: mass by query-key distance, entropy and first-token share.

    Measured at the training length and a longer one on the run's test text; CSV and figures
    go to <run>/attention/.
    """
    from posexp.commands.attention import measure_runs

    measure_runs(run, length, windows, device, batch_tokens)


@app.command(cls=Command)
@says_interrupted
def methods(as_json: bool = typer.Option(False, "--json", help="Print it as JSON.")) -> None:
    """List every extension method with its settings, their defaults and what they allow."""
    from posexp.commands.methods import print_methods

    print_methods(as_json=as_json)


@app.command(cls=HydraCommand, context_settings=HYDRA_COMMAND)
@says_interrupted
def finetune(
    ctx: typer.Context,
    run: str | None = typer.Option(
        None,
        "--run",
        metavar="DIR",
        help="The run to continue (needed): its checkpoint is loaded, its network and data kept.",
    ),
) -> None:
    """Continue a run at a longer train.seq_len with an extension baked in, as a new run.

    Other arguments are Hydra overrides, e.g. `extension=yarn extension.factor=4`.

    train.seq_len defaults to the parent's training length x extension.factor. With PoSE
    (train.pose.enabled=true) it defaults to the parent's length, and train.pose.target_length
    to the parent's length x extension.factor.

    Kept from the parent (overriding them is an error): model, pe, heads, data, tokenizer.
    """
    from posexp.commands import hydra_tasks
    from posexp.commands.finetune import finetune_args, finetune_config
    from posexp.commands.train import check_config
    from posexp.config.run import from_composed

    if help_asked(ctx.args):
        return show_help(ctx)
    args = cli_overrides.expand_method_specs(ctx.args)
    check_output_arg(args)
    cli_overrides.check_run_dir_arg(args)
    args = finetune_args(run, args)
    check_jobs(
        args,
        "finetune",
        lambda cfg, overrides: check_config(from_composed(finetune_config(cfg, overrides))),
    )
    run_hydra(hydra_tasks.finetune, "finetune", args)


@app.command(cls=Command)
@says_interrupted
@stops_as_interrupt()  # as eval-extrapolate: the cells it scored first are kept
def report(
    target: str = typer.Argument(..., help="A sweep dir (outputs/sweeps/...) or a run dir."),
    evaluate: bool = typer.Option(
        True,
        "--eval/--no-eval",
        help="First score the cells not yet measured: for completed jobs whose config has an `extrapolate:` section (experiment=extrapolation, passkey), those it asks for; with --method, those methods for every completed job, at its section's lengths, else at eval-extrapolate's defaults (lengths doubling from the training length to 4096).",
    ),
    method: list[str] | None = typer.Option(
        None,
        "--method",
        help="Method specs to evaluate instead of the preset's, e.g. none,'self_extend(group=4)', or a grid 'self_extend(group=2|4,window=8|16)' (repeatable); also scores jobs without a preset.",
    ),
    device: str = typer.Option(
        "auto", "--device", help="Device for that evaluation: auto | cpu | cuda | mps"
    ),
    workers: int | None = typer.Option(
        None, "--workers", help="Jobs scored at once (worker processes, CPU); default one per core."
    ),
) -> None:
    """Write report.md, report.csv and PNG plots for a sweep or run dir."""
    from posexp.commands.report.write import write_report

    write_report(target, evaluate=evaluate, device=device, methods=method, workers=workers)


@app.command(cls=Command)
@says_interrupted
def runs(
    root: str = typer.Argument("outputs", help="Folder to search (runs and sweeps below it)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON records instead of a table."),
    wide: bool = typer.Option(False, "--wide", help="Every column, even those empty in every run."),
) -> None:
    """List every run under a folder, oldest first, one row each.

    Columns: data, model, seq_len, pe, heads, extension and factor, parent (a fine-tune's), steps,
    status, val ppl, accuracy, BLEU, what eval-extrapolate scored, minutes; settings equal in
    every run are named once, under the table.
    """
    from posexp.commands.runs import list_runs, print_runs
    from posexp.store.sweep_gaps import gaps, said

    rows = list_runs(root)
    typer.echo(json.dumps(rows, indent=2)) if as_json else print_runs(rows, wide=wide)
    said(gaps(root))  # what the rows cannot show: runs that are not there


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

    from posexp.store.files import disk_full

    # Hydra then re-raises instead of printing its own multi-line report, so we can print one line.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    # provenance.json records the command as typed (posexp.store.provenance.COMMAND_ENV).
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
        # A path the OS refuses (a run dir under /proc, a file gone since it was listed).
        why = "missing" if isinstance(e, FileNotFoundError) else "the operating system refused it"
        typer.echo(f"error: {str(e.filename)!r}: {e.strerror} ({why})", err=True)
        raise SystemExit(2) from None
    except Exception as e:
        from posexp.runtime.hardware import out_of_memory

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
        from posexp.runtime.slurm import unsatisfiable_line

        typer.echo(unsatisfiable_line() or sweep_failure(e), err=True)
        raise SystemExit(1) from None
