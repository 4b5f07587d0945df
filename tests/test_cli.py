"""The `posexp` command itself: version, help without torch, shell completion."""

import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from posexp import __version__
from posexp.cli import app


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"posexp {__version__}"


def test_help_lists_the_commands_without_importing_torch():
    code = (
        "import sys; from posexp.cli import app; from typer.testing import CliRunner; "
        "out = CliRunner().invoke(app, ['--help']).output; "
        "print('torch' in sys.modules, all(c in out for c in "
        "('train', 'eval-extrapolate', 'finetune', 'report', 'generate')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def complete(line: str) -> list[str]:
    """What `posexp`'s shell-completion hook answers for ``line`` (cursor at its end)."""
    env = {**os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line))}
    out = subprocess.run(
        [sys.executable, "-m", "posexp", "-sc", "query=bash"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def test_shell_completion_answers_for_commands_and_each_commands_config(tmp_path):
    script = subprocess.run(
        [sys.executable, "-m", "posexp", "train", "--shell-completion", "install=bash"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-sc query=bash" in script and "hydra_bash_completion posexp" in script
    assert complete("posexp tr") == ["train"]
    assert complete("posexp train pe=r") == ["pe=rope", "pe=rope_randomized"]
    assert "extension=yarn" in complete("posexp finetune extension=")
    assert complete("posexp report ") == []  # no Hydra overrides for the other commands


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        ([], "Usage: posexp [OPTIONS] COMMAND [ARGS]..."),
        (["report"], "Usage: posexp report [OPTIONS] TARGET"),
        (["runs"], "Usage: posexp runs [OPTIONS] [ROOT]"),
        (["generate"], "Usage: posexp generate [OPTIONS] PROMPTS..."),
        (["eval-extrapolate"], "Usage: posexp eval-extrapolate [OPTIONS]"),
    ],
)
def test_help_labels_read_as_words_not_python_types(args, usage):
    out = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "100"}).output
    assert usage in out
    assert "<bool>" not in out and "<list[" not in out and "{" not in out
    if args == ["eval-extrapolate"]:
        assert re.search(r"--method +METHOD +Method specs", out)
