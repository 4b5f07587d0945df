"""Every `posexp train` command the README and the docs show composes and is accepted as its
jobs would be, so the docs cannot drift from the configs (a renamed key, a removed preset)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import hydra.errors
import pytest
from hydra import compose, initialize_config_dir

from posexp.cli.sweep_check import NO_RUN_FLAGS, check_sweep_jobs, is_multirun
from posexp.commands import quiet_schema_match_warning
from posexp.commands.train import check_config
from posexp.config.paths import config_dir
from posexp.config.run import from_composed
from posexp.errors import PosexpError

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) for each `posexp train` line inside a fenced block, continuations
    joined and trailing comments dropped."""
    found = []
    for page in PAGES:
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", page.read_text(), re.M | re.S):
            text = re.sub(r"\\\n\s*", " ", block)
            for line in text.splitlines():
                line = re.sub(r"^\$ ", "", line.strip())
                if line.startswith("posexp train"):
                    line = re.sub(r"\s+#.*$", "", line)
                    found.append((str(page.relative_to(ROOT)), line))
    return found


def needs_what_a_page_cannot_give(command: str) -> bool:
    """A command naming a run of the reader's (``<run>``, ``resume=``, ``parent=``) or asking
    Hydra for something other than a run (``--cfg``, ``--help``)."""
    return "<" in command or any(
        word in command for word in ("resume=", "parent=", "--help", *NO_RUN_FLAGS)
    )


SHOWN = [c for c in shown_commands() if not needs_what_a_page_cannot_give(c[1])]
# A command shown on several pages (or twice on one) is checked once: composing a preset's
# sweep takes seconds.
PAGES_OF: dict[str, list[str]] = {}
for _page, _command in SHOWN:
    PAGES_OF.setdefault(_command, []).append(_page)
COMMANDS = [(pages[0], command) for command, pages in PAGES_OF.items()]


def build(cfg, overrides):
    return check_config(from_composed(cfg))


# Presets whose jobs start from the runs of an earlier preset the docs show first.
LATER_STEPS = {"experiment=head_ablation_mt_cpu": "experiment=head_ablation_mt_cpu_lm"}


def test_the_docs_show_train_commands():
    assert len(SHOWN) >= 30 and len(COMMANDS) >= 20


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_a_train_command_in_the_docs_composes_and_is_accepted(page, command, tmp_path, monkeypatch):
    quiet_schema_match_warning()  # Hydra's note on the launcher presets: not under test here
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.txt").write_text(
        "In the beginning God created the heaven and the earth.\n" * 99
    )
    args = shlex.split(command)[2:]
    later = [LATER_STEPS[a] for a in args if a in LATER_STEPS]
    if later:  # refused here for its missing parents alone, the earlier step shown on the page
        with pytest.raises(PosexpError, match=r"parent='outputs/pretrained/.*no such run dir"):
            check_sweep_jobs(args, "train", build)
        for shown_on in PAGES_OF[command]:  # each page shows the earlier step too
            assert any(later[0] in c for p, c in SHOWN if p == shown_on)
        return
    if is_multirun(args):
        # The check leaves what Hydra refuses to Hydra at launch; here it must surface.
        monkeypatch.setattr(hydra.errors, "HydraException", type("Unmatched", (Exception,), {}))
        assert check_sweep_jobs(args, "train", build) > 0
        return
    with initialize_config_dir(str(config_dir()), version_base="1.3", job_name="posexp"):
        cfg = compose("train", overrides=[a for a in args if not a.startswith("-")])
    build(cfg, args)


@pytest.mark.parametrize("group", ["pe", "extension", "experiment", "model", "data", "tokenizer"])
def test_the_configuration_page_names_every_option_of_a_group(group):
    # configs/<group>/<option>.yaml is what `group=option` picks: each one named on the page.
    page = (ROOT / "docs" / "configuration.md").read_text()
    options = sorted(p.stem for p in (Path(config_dir()) / group).glob("*.yaml"))
    missing = [o for o in options if f"`{o}`" not in page and f"`{group}={o}`" not in page]
    assert not missing, f"docs/configuration.md does not name {group} options {missing}"
