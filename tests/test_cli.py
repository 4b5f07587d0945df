"""The `posexp` command itself: version, help without torch, shell completion."""

import os
import re
import subprocess
import sys
from pathlib import Path

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
    assert complete("posexp train pe=r") == ["pe=rnope_swa", "pe=rope", "pe=rope_randomized"]
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
        (["train"], "Usage: posexp train [OPTIONS] [OVERRIDES]..."),
        (["finetune"], "Usage: posexp finetune --run DIR [OPTIONS] [OVERRIDES]..."),
    ],
)
def test_help_labels_read_as_words_not_python_types(args, usage):
    out = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "100"}).output
    assert usage in out
    # No braces of Typer's {target}; a config's interpolations (${heads}) are the config's own.
    assert "<bool>" not in out and "<list[" not in out and not re.search(r"(?<!\$)\{", out)
    if args == ["eval-extrapolate"]:
        assert re.search(r"--method +METHOD +Method specs", out)


@pytest.mark.parametrize("command", ["eval-extrapolate", "finetune", "runs"])
def test_help_paragraphs_wrap_to_a_narrow_terminal(command):
    # Typer's rich help keeps the source's line breaks: a 97-character docstring line used to
    # wrap at 80 columns into "... current" / "weights are" / "skipped, ...".
    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"}).output
    prose = out[out.index("Usage:") : out.index("╭")].splitlines()[1:]
    lines = [line.strip() for line in prose if line.strip()]
    assert lines and all(len(line) <= 80 for line in lines)
    # every line but a paragraph's last is filled: none ends far before the margin
    paragraph_ends = {i for i, line in enumerate(lines) if line.endswith(".")}
    assert all(len(line) > 60 for i, line in enumerate(lines) if i not in paragraph_ends)


def help_panels(out: str) -> dict[str, list[str]]:
    """A help text's panels by title: the text inside each box, a line per row."""
    panels: dict[str, list[str]] = {}
    title = None
    for line in out.splitlines():
        if line.startswith("╭─ "):
            title = line[3:].rstrip("─╮ ").strip()
            panels[title] = []
        elif line.startswith("│") and title:
            panels[title].append(line.strip("│ "))
        else:
            title = None
    return panels


def test_train_help_is_panels_of_its_flags_config_groups_keys_and_examples():
    from omegaconf import OmegaConf

    from posexp.config.paths import config_dir

    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    panels = help_panels(result.output)
    assert list(panels) == [
        "Hydra options",
        "Config groups (group=option)",
        "Config keys (key=value) and their defaults",
        "Examples",
    ]
    assert any(row.startswith("-m, --multirun") for row in panels["Hydra options"])
    # Every group, each with every option in its folder (a long list wraps onto rows of its own,
    # which hold no group name: they continue the row above).
    groups: dict[str, str] = {}
    raw = result.output.split("Config groups (group=option)")[1].split("╰")[0].splitlines()[1:]
    for line in (r[1:].rstrip("│ ") for r in raw):
        if line[:3].strip():  # "  data  addition, ...": a group's first row
            name, _, options = line.strip().partition(" ")
            groups[name] = options.strip()
        else:
            groups[name] += " " + line.strip()
    root = Path(config_dir())
    for folder in (d for d in root.iterdir() if d.is_dir() and d.name != "hydra"):
        assert groups[folder.name] == ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
    # The keys with train.yaml's defaults, a row per section.
    keys = {
        row.split()[0]: row.split()[1:]
        for row in panels["Config keys (key=value) and their defaults"]
    }
    train = OmegaConf.load(root / "train.yaml").train
    assert f"max_steps={train.max_steps}" in keys["train"]  # the composed default
    assert f"seq_len={train.seq_len}" in keys["train"]
    top = OmegaConf.load(root / "train.yaml")
    assert keys["top"][0] == "level" and f"heads={top.heads}" in keys["top"]
    assert {"model", "pe", "extension", "data", "train"} <= set(keys)
    # The examples are real command lines: their overrides compose (the first of a sweep's values).
    examples = panels["Examples"][::2]
    assert all(line.startswith("posexp train ") for line in examples)
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(root), version_base="1.3"):
        for line in examples:
            # <run> stands for a path: any string will do.
            line = re.sub(r"<[^>]*>", "x", line)
            overrides = [a.split(",")[0] for a in line.split()[2:] if "=" in a]
            compose("train", overrides)  # an unknown key or option raises


def test_finetune_help_marks_what_the_parent_keeps():
    result = CliRunner().invoke(app, ["finetune", "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    panels = help_panels(result.output)
    assert panels["Options"][0].split()[:2] == ["--run", "DIR"]
    assert not any("--hydra-help" in row for row in panels["Hydra options (after the overrides)"])
    groups = [row.split("  ")[0] for row in panels["Config groups (group=option)"]]
    assert "model (the parent's)" in groups and "extension" in groups
    keys = " ".join(panels["Config keys (key=value) and their defaults"])
    assert "parent=<--run>" in keys and "pe (the parent's)" in keys
    # Hydra's flags come after the overrides (finetune puts the parent's settings first).
    sweep = next(line for line in panels["Examples"] if " -m" in line)
    assert sweep.endswith(" -m")
