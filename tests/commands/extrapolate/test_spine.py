"""The typed spine: a spec parsed once reaches the model and the record as that object."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import posexp
from posexp.checkpoint import save_checkpoint
from posexp.commands.extrapolate.evaluate import evaluate_runs
from posexp.commands.extrapolate.plan import Settings, plan_run
from posexp.config import ExtrapolateConfig
from posexp.extension import ExtensionConfig
from posexp.extension.spec import MethodSpec, parse_specs
from posexp.model import GPT, ModelConfig
from posexp.rundir import RunDir
from tests.helpers import run_config


@pytest.fixture
def run(tmp_path):
    """A tiny RoPE checkpoint at L0 32 (untrained weights: the path, not the values, is tested)."""
    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=32
    )
    config = run_config("train.max_steps=5").to_dict()
    save_checkpoint(
        tmp_path / "r", GPT(mcfg), {"step": 5, "model": mcfg.to_dict(), "config": config}
    )
    (tmp_path / "r" / "results.json").write_text('{"status": "completed", "step": 5}')
    return RunDir(tmp_path / "r")


def test_the_parsed_spec_reaches_the_model_as_that_very_object(run, monkeypatch):
    import posexp.model.gpt as gpt

    specs = parse_specs("none,yarn(beta_fast=16.0000001),self_extend(group=2|4,window=8)")
    seen: list[MethodSpec | None] = []
    real = gpt.build_pe

    def spy(name, ctx, **params):
        seen.append(ctx.extension.spec)
        return real(name, ctx, **params)

    monkeypatch.setattr(gpt, "build_pe", spy)
    knobs = ExtrapolateConfig(lengths=[8], method=specs)
    plan = plan_run(run, Settings(knobs, device="cpu"), n_runs=1)
    # the plan's cells and records carry the parser's objects, not labels parsed again
    assert [item.record.spec for item in plan.items] == specs
    assert all(item.record.spec is spec for item, spec in zip(plan.items, specs, strict=True))
    assert all(item.extension.spec is item.record.spec for item in plan.items)
    evaluate_runs(run.path, Settings(knobs, device="cpu", workers=1), progress=False)
    # every model built for a cell got an extension holding the very spec the parser made
    assert [s for s in seen if s is not None]
    assert all(any(s is spec for spec in specs) for s in seen if s is not None)
    assert {id(s) for s in seen if s is not None} == {id(s) for s in specs}
    stored = json.loads((run.path / "eval" / "extrapolate.json").read_text())
    # JSON keeps the spec as fields: the method's name, the settings as asked, exactly
    by_label = {r["label"]: r for r in stored}
    yarn = by_label["yarn(beta_fast=16.0000001)"]
    assert (yarn["method"], yarn["spec"], yarn["baked"]) == (
        "yarn",
        {"settings": {"beta_fast": 16.0000001}, "factor": None},
        False,
    )
    assert yarn["settings"]["beta_fast"] == 16.0000001


def test_two_values_apart_in_the_eighth_digit_are_two_cells(run):
    specs = parse_specs("yarn(beta_fast=16.0000001),yarn(beta_fast=16.0000002)")
    assert [s.label for s in specs] == [
        "yarn(beta_fast=16.0000001)",
        "yarn(beta_fast=16.0000002)",
    ]
    plan = plan_run(run, Settings(ExtrapolateConfig(lengths=[8], method=specs)), n_runs=1)
    assert len(plan.todo) == 2 and plan.todo[0].record.cell != plan.todo[1].record.cell


def test_a_setting_bounded_by_l0_is_checked_without_building(monkeypatch):
    built = []
    real = ExtensionConfig.attention_plan
    monkeypatch.setattr(
        ExtensionConfig, "attention_plan", lambda self: built.append(self.method) or real(self)
    )
    for text in ("self_extend(group=4)", "rerope", "blockwise", "yarn"):
        (spec,) = parse_specs(text)
        ExtensionConfig.for_length(spec, 256, 64)
    assert built == []
    from posexp.errors import PosexpError

    for text, message in (
        ("self_extend(window=64)", r"^extension\.window must be in \[1, 63\] \(below the training"),
        ("rerope(window=70)", r"^extension\.window must be in \[1, 63\]"),
        ("blockwise(block=40)", r"^extension\.block must be at most L0 / 2 = 32"),
    ):
        (spec,) = parse_specs(text)
        with pytest.raises(PosexpError, match=message):
            ExtensionConfig.for_length(spec, 256, 64)
        # the plan (what the model builds) agrees with the declared check
        with pytest.raises(PosexpError, match=message):
            ExtensionConfig(spec.name, 4.0, 64, spec.settings).attention_plan()


REMOVED = (
    r"\bbase_method\b",
    r"\bmethod_order\b",
    r'\.partition\("\("\)\[0\]',
    r'method"\]\.split\(',
    r'method"\]\.startswith\(',
)


def test_no_label_is_parsed_again_anywhere():
    # Labels are display only: nothing takes one apart to find a method or its settings.
    root = Path(posexp.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        text = path.read_text()
        for pattern in REMOVED:
            if re.search(pattern, text):
                found.append(f"{path.relative_to(root)}: {pattern}")
    assert found == []
    cells = (root / "commands" / "extrapolate" / "cells.py").read_text()
    assert "parse_spec" not in cells  # the specs arrive parsed
    # the only parser of spec text is the edge: posexp/extension/spec.py, called by the CLI,
    # the config and the scripts
    callers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if re.search(r"\bparse_specs?\(|\bexpand_spec\(", p.read_text()) and p.name != "spec.py"
    )
    assert callers == ["cli/overrides.py", "commands/generate.py", "config/extrapolate.py"]
