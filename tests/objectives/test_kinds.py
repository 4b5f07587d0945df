"""Corpus kinds: a dataset declares its kind, an objective gives it meaning, data keeps no list."""

from __future__ import annotations

import re

import pytest

from posexp.data import SPLITS, Corpus, dataset_kind, dataset_names
from posexp.errors import PosexpError
from posexp.objectives import OBJECTIVES


def test_every_registered_dataset_declares_a_kind_some_objective_trains():
    kinds = {name: dataset_kind(name) for name in dataset_names()}
    assert (
        kinds["kjv"] == "lm" and kinds["wyc2kjv"] == "pairs" and kinds["synthetic"] == "synthetic"
    )
    assert set(kinds.values()) <= set(OBJECTIVES)


def test_an_unknown_dataset_or_kind_is_one_line():
    with pytest.raises(PosexpError, match=r"^unknown data 'imdb'; allowed: .*\bkjv\b"):
        dataset_kind("imdb")
    message = f"unknown training objective for data kind 'images'; allowed: {', '.join(sorted(OBJECTIVES))}"
    with pytest.raises(PosexpError, match=f"^{re.escape(message)}$"):
        OBJECTIVES.get("images")


def test_corpus_checks_structure_only():
    splits = {s: ["x"] for s in SPLITS}
    assert Corpus(splits, kind="images").kind == "images"  # data holds no list of kinds
    with pytest.raises(ValueError, match="a 'pairs' corpus needs pairs"):
        Corpus(splits, kind="pairs")
    with pytest.raises(ValueError, match="a 'pairs' corpus needs pairs"):
        Corpus(splits, pairs={s: [] for s in SPLITS}, kind="lm")
    with pytest.raises(ValueError, match="corpus kind must be a non-empty name"):
        Corpus(splits, kind="")
