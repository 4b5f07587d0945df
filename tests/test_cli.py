"""The `posexp` command itself: version, help without torch."""

import subprocess
import sys

from typer.testing import CliRunner

from posexp import __version__
from posexp.cli import app


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"posexp {__version__}"


def test_help_lists_the_commands_without_importing_torch():
    code = ("import sys; from posexp.cli import app; from typer.testing import CliRunner; "
            "out = CliRunner().invoke(app, ['--help']).output; "
            "print('torch' in sys.modules, all(c in out for c in "
            "('train', 'eval-extrapolate', 'finetune', 'report', 'generate')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
