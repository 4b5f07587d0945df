"""Scorers: a new metric is one module (discovered by name) and works end to end."""

from __future__ import annotations

import csv
import json
import sys
import textwrap

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posexp.errors import PosexpError
from posexp.registry import discover
from posexp.scoring import SCORERS, TASK, TEXT, get_scorer, parse_protocols, scorer_names
from tests.helpers import TINY, posexp, run_dirs

# A toy metric, as a user would add one: how often the most likely next token is right.
TOY = '''
"""top1: how often the most likely next token is the right one (a toy metric)."""

import torch

from posexp.scoring import TEXT, Metric, Scorer, Work, register_scorer
from posexp.scoring.windows import nonoverlap_windows

TOP1 = Metric("top1", "next-token top-1 accuracy", True, log_scale=False, decimals=3)


def cut(cell, source):
    windows = nonoverlap_windows(source.n_tokens, cell.length)
    return Work(sum(w.length for w in windows), windows)


@torch.no_grad()
def score(model, work, scoring):
    right = total = 0
    for w in work.data:
        x = scoring.tokens[w.begin : w.end][None].to(scoring.device)
        y = scoring.tokens[w.begin + 1 : w.end + 1][None].to(scoring.device)
        with scoring.autocast():
            logits = model(x)["logits"]
        right += int((logits.argmax(-1) == y).sum())
        total += y.numel()
        scoring.advance(w.length)
    return {"top1": right / total, "tokens": total}


register_scorer(Scorer("top1", TEXT, TOP1, ("top1", "tokens"), cut, score))
'''


def test_protocols_are_the_registered_scorers():
    assert scorer_names(TEXT) == ["nonoverlap", "sliding", "doc_position", "context_gain"]
    assert scorer_names(TASK) == ["exact_match", "string_match_all"]
    assert parse_protocols("both") == ["nonoverlap", "sliding"]
    assert parse_protocols("sliding,nonoverlap,sliding") == ["sliding", "nonoverlap"]
    with pytest.raises(
        PosexpError,
        match=r"^unknown --protocol 'x'; allowed: nonoverlap, sliding, doc_position, context_gain, both$",
    ):
        parse_protocols("nonoverlap,x")
    assert get_scorer("sliding").uses_stride and not get_scorer("nonoverlap").uses_stride


def test_a_scorer_must_fill_its_headline_metric():
    toy = get_scorer("nonoverlap")
    with pytest.raises(ValueError, match="fields must include 'ppl'"):
        from posexp.scoring import register_scorer

        register_scorer(type(toy)("x", TEXT, toy.metric, ("loss",), toy.cut, toy.score))


@pytest.fixture
def toy_scorer(tmp_path, monkeypatch, request):
    """The toy metric's module, found by discovery into a copy of the registry."""
    monkeypatch.setattr(SCORERS, "_items", dict(SCORERS.items()))
    package = tmp_path / "my_scorers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "top1.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(
        lambda: [sys.modules.pop(m, None) for m in ("my_scorers", "my_scorers.top1")]
    )
    discover("my_scorers", [str(package)])
    return "top1"


def test_a_toy_metric_is_one_module_and_runs_end_to_end(toy_scorer, tmp_path, cache):
    posexp(tmp_path, cache, "train", "pe=rope", *TINY)
    (run,) = run_dirs(tmp_path)
    proc = posexp(
        tmp_path,
        cache,
        "eval-extrapolate",
        "--run",
        str(run),
        "--lengths",
        "32,64",
        "--method",
        "none,yarn",
        "--protocol",
        "top1",
        "--tokens",
        "256",
    )
    recs = json.loads((run / "eval" / "extrapolate.json").read_text())
    assert {(r["method"], r["length"], r["protocol"]) for r in recs} == {
        (m, n, "top1") for m in ("none", "yarn") for n in (32, 64)
    }
    assert all(r["metric"] == "top1" and 0 <= r["top1"] <= 1 and r["tokens"] == 256 for r in recs)
    assert "next-token top-1 accuracy" in proc.stdout  # the table says what its cells are
    rows = list(csv.DictReader((run / "eval" / "extrapolate.csv").open()))
    assert {float(r["top1"]) for r in rows} == {r["top1"] for r in recs}
    tags = EventAccumulator(str(run)).Reload().Tags()["scalars"]  # the run's own TB run
    assert {t for t in tags if t.startswith("extrapolate/")} == {
        "extrapolate/rope/top1/top1/none",
        "extrapolate/rope/top1/top1/yarn",
    }
    # Perplexity beside it: both kept, each metric in its own figure.
    posexp(
        tmp_path,
        cache,
        "eval-extrapolate",
        "--run",
        str(run),
        "--lengths",
        "32,64",
        "--method",
        "none",
        "--tokens",
        "256",
    )
    recs = json.loads((run / "eval" / "extrapolate.json").read_text())
    assert sorted({r["protocol"] for r in recs}) == ["nonoverlap", "top1"] and len(recs) == 6
    assert (run / "eval" / "extrapolate.png").is_file()
    assert (run / "eval" / "extrapolate_top1.png").is_file()
