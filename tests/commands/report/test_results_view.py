"""A fine-tune's rows are named by what it changed from its parent (ReportContext.lineage,
which the results-table view and the others read)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from posexp.commands.report.view import ReportContext
from posexp.config.sections import NamedConfig
from posexp.extension import ExtensionConfig
from tests.helpers import run_config


def job(path, config):
    return SimpleNamespace(name=path.name, path=path, config=config)


def test_each_fine_tune_is_labelled_by_its_change_from_the_parent_in_the_report(tmp_path):
    parent = run_config("model=tiny", "pe=rope", "train.seq_len=64", "train.max_steps=600")
    yarn = ExtensionConfig(method="yarn", factor=4.0, original_length=64)
    longer = replace(parent.train, seq_len=256, max_steps=200)
    where = str(tmp_path / "rope")
    tuned = replace(parent, extension=yarn, train=longer, parent=where, train_length=64)
    drope = replace(parent, pe=NamedConfig("none"), parent=where, train_length=64)
    drope = replace(drope, train=replace(parent.train, max_steps=30))
    jobs = [
        job(tmp_path / "rope", parent),
        job(tmp_path / "ft", tuned),
        job(tmp_path / "dr", drope),
    ]
    labels = ReportContext(tmp_path, jobs, []).lineage()
    assert labels == {
        str(tmp_path / "ft"): "yarn(factor=4) L256 ft 200 steps",
        str(tmp_path / "dr"): "rope → pe=none (DroPE) ft 30 steps",
    }
    # a parent that is gone: the fine-tune's own extension and steps
    alone = ReportContext(tmp_path, jobs[1:2], []).lineage()
    assert alone == {str(tmp_path / "ft"): "yarn(factor=4) ft 200 steps"}


def test_a_run_from_scratch_is_not_tagged_by_what_only_its_fine_tunes_change(tmp_path):
    # Sweep runs of 300 steps and DroPE fine-tunes of 43: the plain rows stay "NoPE", "RoPE";
    # two plain runs that differ in steps are still told apart by them.
    plain = [run_config("model=tiny", f"pe={pe}", "train.max_steps=300") for pe in ("none", "rope")]
    drope = replace(plain[1], pe=NamedConfig("none"), parent=str(tmp_path / "rope"))
    drope = replace(drope, train=replace(plain[1].train, max_steps=43))
    jobs = [job(tmp_path / p.pe.name, p) for p in plain] + [job(tmp_path / "dr", drope)]
    for j in jobs:
        j.settings = {"pe": j.config.pe.name, "train.max_steps": j.config.train.max_steps}
    ctx = ReportContext(tmp_path, jobs, ["pe", "train.max_steps"])
    assert [ctx.rest(j, exclude=("pe", "seed")) for j in jobs[:2]] == ["", ""]
    longer = replace(plain[0], train=replace(plain[0].train, max_steps=600))
    jobs.append(job(tmp_path / "long", longer))
    jobs[-1].settings = {"pe": "none", "train.max_steps": 600}
    ctx = ReportContext(tmp_path, jobs, ["pe", "train.max_steps"])
    assert ctx.rest(jobs[0], exclude=("pe", "seed")) == "300 steps"
