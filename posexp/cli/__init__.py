"""The `posexp` command line: ``app`` (the Typer app and its subcommands) and ``main`` (the
console-script entry point); ``errors`` turns failures into one line, ``help`` shapes the help
pages, ``overrides`` checks Hydra overrides before Hydra runs, ``hydra_commands`` hands
`train` and `finetune` to Hydra."""

from posexp.cli.app import app, main

__all__ = ["app", "main"]
