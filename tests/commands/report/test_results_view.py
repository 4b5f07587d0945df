"""The report's results-table view (posexp/commands/report/views/results.py): a fine-tune's
rows are named by what it changed from its parent."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from posexp.commands.report.view import ReportContext
from posexp.commands.report.views.results import lineage_labels
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
    labels = lineage_labels(ReportContext(tmp_path, jobs, []))
    assert labels == {
        str(tmp_path / "ft"): "yarn(factor=4) L256 ft 200 steps",
        str(tmp_path / "dr"): "rope → pe=none (DroPE) ft 30 steps",
    }
    # a parent that is gone: the fine-tune's own extension and steps
    alone = lineage_labels(ReportContext(tmp_path, jobs[1:2], []))
    assert alone == {str(tmp_path / "ft"): "yarn(factor=4) ft 200 steps"}
