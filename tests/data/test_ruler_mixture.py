"""data=ruler: a mixture of the RULER tasks, trained together and scored apart."""

from __future__ import annotations

import numpy as np
import pytest

from posexp.data.pairs import IGNORE
from posexp.data.synthetic import make_data
from posexp.data.tokenizers import ByteTokenizer
from posexp.errors import PosexpError
from tests.data.test_ruler_tasks import RULER, SOLVERS

# The tasks a mixture may draw, as its errors list them (the registry's order).
RULER_ONLY = (
    "common_words, frequent_words, niah_single, niah_multikey, niah_multiquery, niah_multivalue, "
    "variable_tracking"
)


def test_training_rows_come_from_every_part_each_well_posed_and_at_least_its_smallest():
    data = make_data("ruler", train_lengths=[76, 226], test_lengths=[226])
    parts = data.task.parts
    assert list(parts) == RULER and data.task.min_length == 76
    seen = {name: 0 for name in RULER}
    for step in range(40):
        for prompt, answer in data.train_batch(seed=0, step=step, batch_size=16):
            (name,) = [n for n in RULER if _solves(n, prompt, answer)]
            seen[name] += 1
            assert len(prompt) >= parts[name].min_length
            assert len(prompt) <= data.task.prompt_length(226) == 226
            assert len(answer) <= data.task.answer_length(226)
    # 640 rows, each part drawn with probability 1/7: every part well represented
    assert min(seen.values()) > 50, seen
    assert data.longest_train_row() == 226 + 1 + max(p.answer_length(226) for p in parts.values())


def _solves(name: str, prompt: str, answer: str) -> bool:
    """``name``'s solver recovers the answer (single and multi-key told apart by needle count)."""
    if name in ("niah_single", "niah_multikey"):
        single = prompt.count("The magic number for") == 1
        if single != (name == "niah_single"):
            return False
    try:
        return SOLVERS[name](prompt) == answer
    except (TypeError, ValueError, AssertionError):
        return False


def test_a_parts_test_instances_are_its_own_fixed_and_apart_from_other_parts():
    data = make_data("ruler", train_lengths=[178, 226], test_lengths=[482], test_examples=3)
    multikey = data.examples("test", 482, 3, 0.5, "niah_multikey")
    assert multikey == data.examples("test", 482, 3, 0.5, "niah_multikey")  # data.seed fixes them
    for prompt, answer in multikey:
        assert len(prompt) == 482 and SOLVERS["niah_multikey"](prompt) == answer
    words = data.examples("test", 482, 3, None, "common_words")
    assert all(SOLVERS["common_words"](p) == a for p, a in words)
    other_seed = make_data("ruler", train_lengths=[178, 226], test_lengths=[482], seed=1)
    assert other_seed.examples("test", 482, 3, 0.5, "niah_multikey") != multikey
    with pytest.raises(
        PosexpError, match=r"^task 'copy' is not part of this ruler run; allowed: niah"
    ):
        data.part("copy")


def test_task_options_reach_their_task():
    data = make_data(
        "ruler",
        tasks=["niah_multikey", "variable_tracking"],
        task_options={"niah_multikey": {"haystack": "needles"}, "variable_tracking": {"hops": 1}},
        train_lengths=[178, 226],
        test_lengths=[226],
    )
    assert list(data.task.parts) == ["niah_multikey", "variable_tracking"]
    ((prompt, _),) = data.examples("test", 226, 1, 0.0, "niah_multikey")
    assert prompt.count("The magic number for") > 4  # every haystack line a needle
    ((prompt, answer),) = data.examples("test", 226, 1, None, "variable_tracking")
    assert len(answer.split()) == 2 and SOLVERS["variable_tracking"](prompt) == answer


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tasks": []}, r"^data\.tasks must be a list of task names, got \[\]$"),
        ({"tasks": ["copy"]}, rf"^data\.tasks: 'copy' is not a RULER task; allowed: {RULER_ONLY}$"),
        # An unknown name listed every task (copy, passkey, ruler...) under data.task.
        ({"tasks": ["nope"]}, rf"^data\.tasks: 'nope' is not a RULER task; allowed: {RULER_ONLY}$"),
        (
            {"tasks": ["ruler"]},
            rf"^data\.tasks: 'ruler' is not a RULER task; allowed: {RULER_ONLY}$",
        ),
        ({"tasks": ["niah_single", "niah_single"]}, r"names 'niah_single' twice"),
        (
            {"tasks": ["niah_single"], "task_options": {"common_words": {}}},
            r"^data\.task_options\.common_words sets a task the mixture does not draw; allowed: niah_single$",
        ),
        (
            {"task_options": {"niah_single": {"depth": 1}}},
            r"^unknown option data\.task_options\.niah_single\.depth for task 'niah_single'; "
            r"allowed: haystack, key_letters, value_digits, depths$",
        ),
        # A part's option values were named as if set alone (data.depths[0]).
        (
            {"task_options": {"niah_single": {"depths": [0.5, 1.5]}}},
            r"^data\.task_options\.niah_single\.depths\[1\] must be a finite number in \[0, 1\]",
        ),
        (
            {"task_options": {"niah_multikey": {"key_letters": 0}}},
            r"^data\.task_options\.niah_multikey\.key_letters must be an integer in \[1, 8\], got 0$",
        ),
        (
            {"task_options": {"common_words": {"rare_repeats": 5, "common_repeats": 3}}},
            r"^data\.task_options\.common_words\.rare_repeats=5 must be below "
            r"data\.task_options\.common_words\.common_repeats=3; ",
        ),
        ({"threshold": 0}, r"^data\.threshold must be a finite number in \(0, 1\], got 0$"),
        ({"loss_on": "prompt"}, r"^data\.loss_on must be one of answer, all, got 'prompt'$"),
    ],
)
def test_bad_mixture_settings_are_one_line_errors(options, message):
    with pytest.raises(PosexpError, match=message):
        make_data("ruler", **{"train_lengths": [178, 226], "test_lengths": [226], **options})


def test_loss_on_all_trains_on_the_prompt_too():
    """data.loss_on=all: every next token of a training row carries loss, not the answer only."""
    from posexp.objectives.synthetic import SyntheticTask

    tok = ByteTokenizer()
    rows = {}
    for loss_on in ("answer", "all"):
        data = make_data(
            "niah_single", train_lengths=[76, 100], test_lengths=[100], loss_on=loss_on
        )
        task = SyntheticTask.__new__(SyntheticTask)  # only what batch() reads
        task.data, task.tokenizer, task.seed, task.batch_size = data, tok, 0, 4
        task.row_tokens = data.longest_train_row()
        rows[loss_on] = task.batch(3)
    (x, y_answer), (x_all, y_all) = rows["answer"], rows["all"]
    assert np.array_equal(x, x_all)  # the same rows; only the loss mask differs
    for r in range(4):
        scored = (y_all[r] != IGNORE).nonzero().flatten()
        answer = (y_answer[r] != IGNORE).nonzero().flatten()
        # all: from the first token's prediction to eos; answer: the answer and eos only
        assert scored[0] == 0 and scored[-1] == answer[-1]
        assert 2 <= len(answer) <= 6 and len(scored) > 70
        assert y_all[r][answer].tolist() == y_answer[r][answer].tolist()
