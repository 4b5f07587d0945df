"""eval-extrapolate's TensorBoard output: into the trained run's own TensorBoard run."""

from __future__ import annotations

import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from torch.utils.tensorboard import SummaryWriter

from posexp.commands.extrapolate.outputs import EVAL_EVENTS, tag_label, write_tensorboard
from posexp.commands.extrapolate.tables import display_rows


def record(method, length, ppl, protocol="nonoverlap"):
    return {
        "method": method,
        "name": method.split("(")[0],  # the method's name beside its display label
        "baked": False,
        "protocol": protocol,
        "length": length,
        "metric": "ppl",
        "ppl": ppl,
        "checkpoint": {"step": 6, "sha256": "0" * 16},
    }


def ppl(method, length):
    """A made-up perplexity per cell, different for every method and length."""
    return 10.0 + len(method) + length / 32


@pytest.fixture
def run_dir(tmp_path):
    """A trained run's dir: its training event file."""
    writer = SummaryWriter(str(tmp_path))
    writer.add_scalar("val/loss", 2.0, 6)
    writer.close()
    return tmp_path


def evaluate(run_dir, methods, lengths=(32, 64, 128), protocols=("nonoverlap",)):
    rows = [record(m, n, ppl(m, n), p) for m in methods for n in lengths for p in protocols]
    write_tensorboard(run_dir, display_rows(rows), {}, train_length=32)
    return rows


def event_runs(root):
    """The folders TensorBoard would list as runs: those holding event files."""
    return sorted({p.parent for p in root.rglob("events.out.tfevents.*")})


def layout(run_dir):
    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0}).Reload()
    (point,) = events.Tensors("custom_scalars__config__")
    return layout_pb2.Layout.FromString(point.tensor_proto.string_val[0])


def test_the_evaluation_is_part_of_the_run_not_a_run_per_method(run_dir):
    rows = evaluate(run_dir, ["none", "pi", "yarn"], protocols=("nonoverlap", "sliding"))
    assert event_runs(run_dir) == [run_dir]
    assert len(list(run_dir.glob(f"events.out.tfevents.*{EVAL_EVENTS}"))) == 1
    events = EventAccumulator(str(run_dir)).Reload()
    tags = set(events.Tags()["scalars"])
    assert "val/loss" in tags  # training's curves and the evaluation's share the run
    for r in rows:
        tag = f"extrapolate/{r['protocol']}/ppl/{r['method']}"
        assert (r["length"], pytest.approx(r["ppl"])) in [
            (e.step, e.value) for e in events.Scalars(tag)
        ]
    # The unextended model at each multiple of the training length: the hparams test metrics,
    # at the training step of the weights scored (6), as every other scalar of the run.
    for ratio, length in ((1, 32), (2, 64), (4, 128)):
        (point,) = events.Scalars(f"eval/ppl_x{ratio}")
        assert point.value == pytest.approx(ppl("none", length)) and point.step == 6
    assert not any(t.startswith("eval/") and "sliding" in t for t in tags)
    (text,) = events.Tensors("extrapolate/table/text_summary")
    assert "| yarn | sliding |" in text.tensor_proto.string_val[0].decode()


def test_the_custom_scalar_layout_has_a_chart_per_family_holding_every_method(run_dir):
    rows = evaluate(run_dir, ["none", "pi", "yarn"], protocols=("nonoverlap", "sliding"))
    (category,) = layout(run_dir).category
    charts = {c.title: list(c.multiline.tag) for c in category.chart}
    assert len(charts) == 2 and all(len(tags) == 1 for tags in charts.values())
    for r in rows:
        tag = f"extrapolate/{r['protocol']}/ppl/{r['method']}"
        matching = [t for t, (regex,) in charts.items() if re.match(regex, tag)]
        assert len(matching) == 1 and r["protocol"] in matching[0]
    # Two runs with other methods get the same charts: TensorBoard merges equal ones into one.
    other = run_dir / "other"
    other.mkdir()
    evaluate(other, ["none", "ntk"], protocols=("nonoverlap", "sliding"))
    assert layout(other) == layout(run_dir)


def test_evaluating_again_rewrites_the_curves_without_duplicates(run_dir):
    evaluate(run_dir, ["none"], lengths=(32, 64))
    first = list(run_dir.glob(f"events.out.tfevents.*{EVAL_EVENTS}"))
    # A second evaluation: the records now hold every cell of both (what write_outputs passes).
    evaluate(run_dir, ["none", "pi", "yarn"], lengths=(32, 64, 128))
    (current,) = run_dir.glob(f"events.out.tfevents.*{EVAL_EVENTS}")
    assert first and not list(run_dir.glob(".*"))  # no staging copy left behind
    events = EventAccumulator(str(run_dir)).Reload()
    for method in ("none", "pi", "yarn"):
        got = [(e.step, e.value) for e in events.Scalars(f"extrapolate/nonoverlap/ppl/{method}")]
        assert got == [(n, pytest.approx(ppl(method, n))) for n in (32, 64, 128)]
    assert [e.step for e in events.Scalars("val/loss")] == [6]  # training's file untouched
    assert len(events.Scalars("eval/ppl_x2")) == 1


def test_cells_without_a_number_have_no_point(run_dir):
    rows = [record("none", 32, 12.0), record("none", 64, None), record("pi", 64, float("nan"))]
    write_tensorboard(run_dir, display_rows(rows), {}, train_length=32)
    assert event_runs(run_dir) == [run_dir]
    events = EventAccumulator(str(run_dir)).Reload()
    assert [e.step for e in events.Scalars("extrapolate/nonoverlap/ppl/none")] == [32]
    assert "extrapolate/nonoverlap/ppl/pi" not in events.Tags()["scalars"]
    assert set(t for t in events.Tags()["scalars"] if t.startswith("eval/")) == {"eval/ppl_x1"}


def test_a_mixtures_single_task_is_not_the_runs_headline_scalar():
    from posexp.commands.extrapolate.outputs import baseline_metrics

    part = {
        "method": "none",
        "name": "none",
        "baked": False,
        "protocol": "string_match_all",
        "metric": "score",
        "length": 226,
    }
    records = [{**part, "task": "common_words", "score": 0.0}]
    assert baseline_metrics(records, 256) == {}
    whole = {**part, "task": None, "score": 0.5}
    assert baseline_metrics([whole], 256) == {"eval/score_x0.882812": (0.5, 0)}  # no checkpoint


def test_each_length_takes_the_first_unextended_row_that_has_it():
    # Two token counts make two rows of `none`; a length only the second row has is still shown.
    from posexp.commands.extrapolate.outputs import baseline_metrics

    def rec(method, length, ppl):
        name = method.split(" ")[0]
        return {
            "method": method,
            "name": name,
            "baked": False,
            "protocol": "nonoverlap",
            "length": length,
            "ppl": ppl,
        }

    rows = [rec("none [tokens 16,384]", 64, 3.0), rec("none [tokens 32,768]", 64, 3.1)]
    rows += [rec("none [tokens 32,768]", 128, 4.0), rec("pi", 128, 3.5)]
    assert baseline_metrics(rows, 64) == {"eval/ppl_x1": (3.0, 0), "eval/ppl_x2": (4.0, 0)}


def test_each_pe_s_methods_are_the_curves_of_one_chart(tmp_path):
    # A sweep's TensorBoard: a chart per PE (its seeds and methods), not one chart for all PEs.
    charts = {}
    for job, pe, methods in (("rope0", "rope", ["none", "pi"]), ("rope1", "rope", ["none"])):
        (tmp_path / job).mkdir()
        rows = [record(m, n, ppl(m, n)) for m in methods for n in (32, 64)]
        write_tensorboard(tmp_path / job, display_rows(rows), {}, train_length=32, pe=pe)
        (category,) = layout(tmp_path / job).category
        charts[job] = {c.title: list(c.multiline.tag) for c in category.chart}
    (tmp_path / "alibi0").mkdir()
    rows = [record("none", n, ppl("none", n)) for n in (32, 64)]
    write_tensorboard(tmp_path / "alibi0", display_rows(rows), {}, train_length=32, pe="alibi")
    (category,) = layout(tmp_path / "alibi0").category
    alibi = {c.title: list(c.multiline.tag) for c in category.chart}
    # the seeds of one PE share its chart (equal layouts merge), evaluated with any methods
    assert (
        charts["rope0"]
        == charts["rope1"]
        == {
            "rope: ppl by evaluation length, nonoverlap (every method)": [
                "^extrapolate/rope/nonoverlap/ppl/"
            ]
        }
    )
    assert list(alibi) == ["alibi: ppl by evaluation length, nonoverlap (every method)"]
    events = EventAccumulator(str(tmp_path / "rope0")).Reload()
    assert "extrapolate/rope/nonoverlap/ppl/pi" in events.Tags()["scalars"]


def frontend_run(tag, run):
    """The run TensorBoard's custom-scalars chart takes back from a curve it names
    ``<tag> (<run>)``: what lies between the first ``(`` and the closing one (its rule, in
    webfiles' index.js); a curve whose run is not a run gets no colour and no line."""
    found = re.search(r"\((.*)\)$", f"{tag} ({run})")
    return found and found.group(1)


def test_every_chart_s_regex_finds_the_tags_written_and_each_curve_its_run(tmp_path):
    methods = ["none", "yarn(factor=2)", "yarn(factor=4)", "self_extend(group=2,window=16)"]
    rows = [record(m, n, ppl(m, n), p) for m in methods for n in (32, 64) for p in ("nonoverlap",)]
    rows += [{**record("none", 64, 3.0, "passkey"), "depth": 0.5, "metric": "accuracy"}]
    rows[-1]["accuracy"] = 0.5
    write_tensorboard(tmp_path, display_rows(rows), {}, train_length=32, pe="rope")
    events = EventAccumulator(str(tmp_path), size_guidance={"tensors": 0}).Reload()
    written = [t for t in events.Tags()["scalars"] if t.startswith("extrapolate/")]
    charts = [(c.title, list(c.multiline.tag)) for k in layout(tmp_path).category for c in k.chart]
    # TensorBoard's server matches a chart's regexes with Python's re.search
    shown = {
        t: [title for title, regexes in charts for x in regexes if re.search(x, t)] for t in written
    }
    assert all(len(titles) == 1 for titles in shown.values()), shown
    assert len(written) == len(methods) + 1 and len(charts) == 2
    for tag in written:
        assert frontend_run(tag, "rope0") == "rope0", tag
    assert "extrapolate/rope/nonoverlap/ppl/yarn[factor=2]" in written
    assert frontend_run("extrapolate/rope/nonoverlap/ppl/yarn(factor=2)", "rope0") != "rope0"


def test_a_tag_s_method_keeps_its_spec_with_square_brackets():
    assert tag_label("self_extend(group=2,window=16)") == "self_extend[group=2,window=16]"
    assert tag_label("none") == "none"
