"""Synthetic tasks: generators, held-out splits, determinism, config checks."""

from __future__ import annotations

import pytest

from posexp.data import load_corpus
from posexp.data.synthetic import TASKS, make_data
from posexp.data.synthetic.base import check_prompt, split_of
from posexp.data.synthetic.passkey import QUESTION, needle
from posexp.errors import PosexpError

SYMBOL_TASKS = ["copy", "reverse", "sort", "addition", "parity"]


def expected_answer(task: str, prompt: str, order: str = "msb") -> str:
    """The answer computed independently of the task modules."""
    if task == "copy":
        return prompt
    if task == "reverse":
        return "".join(reversed(prompt))
    if task == "sort":
        return "".join(sorted(prompt))
    if task == "parity":
        return "1" if sum(int(b) for b in prompt) % 2 else "0"
    a, b = prompt.split("+")
    total = str(int(a) + int(b))
    return total if order == "msb" else total[::-1]


def test_every_listed_task_is_registered():
    ruler = {"niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery"}
    ruler |= {"variable_tracking", "common_words", "frequent_words", "ruler"}
    chomsky = {"modular_arithmetic", "stack_manipulation", "duplicate_string", "missing_duplicate"}
    chomsky |= {"odd_first", "binary_addition", "bucket_sort", "interlocked_pairing", "chomsky"}
    more = {"mqar", "babilong_qa1", "babilong_qa2", "babilong_qa3"}
    basic = {"copy", "reverse", "sort", "addition", "parity", "passkey"}
    assert set(TASKS) == basic | ruler | chomsky | more


@pytest.mark.parametrize("task", SYMBOL_TASKS)
def test_instances_are_right_and_sized(task):
    data = make_data(task, train_lengths=[10, 12], test_lengths=[9, 25])  # sizes below: untrained
    for n in (1, 6, 9, 25):
        for prompt, answer in data.examples("test", n, 20):
            assert len(prompt) == data.task.prompt_length(n)
            assert len(answer) <= data.task.answer_length(n)
            assert answer == expected_answer(task, prompt)


def test_addition_operands_have_exactly_n_digits_and_lsb_order_reverses():
    msb = make_data("addition", train_lengths=[1, 3], test_lengths=[30])
    lsb = make_data("addition", train_lengths=[1, 3], test_lengths=[30], answer_order="lsb")
    for (p, a), (p2, a2) in zip(
        msb.examples("test", 30, 20), lsb.examples("test", 30, 20), strict=True
    ):
        assert p == p2 and all(len(x) == 30 and x[0] != "0" for x in p.split("+"))
        assert a == str(sum(map(int, p.split("+")))) and a2 == a[::-1]


def test_addition_lsb_operands_reverse_every_number():
    msb = make_data("addition", train_lengths=[1, 3], test_lengths=[7])
    both = make_data(
        "addition",
        train_lengths=[1, 3],
        test_lengths=[7],
        answer_order="lsb",
        operand_order="lsb",
    )
    for (p, a), (p2, a2) in zip(
        msb.examples("test", 7, 20), both.examples("test", 7, 20), strict=True
    ):
        first, second = p2.split("+")
        assert p == f"{first[::-1]}+{second[::-1]}" and a2 == a[::-1]
        # the worked place values: digit k of each reversed operand is 10^k, so is the answer's
        total = sum(int(d) * 10**k for x in (first, second) for k, d in enumerate(x))
        assert total == int(a2[::-1])


def test_passkey_prompt_length_depth_and_key():
    data = make_data(
        "passkey", train_lengths=[150, 200], test_lengths=[400], depths=[0.0, 0.5, 1.0]
    )
    for depth in (0.0, 0.5, 1.0):
        for prompt, key in data.examples("test", 400, 5, depth):
            assert len(prompt) == 400 and prompt.endswith(QUESTION)
            assert len(key) == 5 and key.isdigit() and prompt.count(key) == 1
            assert sum(c.isdigit() for c in prompt) == 5  # the only number in the prompt
            where = prompt.index(needle(key))
            room = 400 - len(needle(key)) - len(QUESTION)
            assert where == round(depth * room)


def test_passkey_filler_comes_from_the_instances_split():
    data = make_data("passkey", train_lengths=[150, 200], test_lengths=[400])
    test_text = " ".join(load_corpus("kjv").splits["test"])
    prompt, key = data.examples("test", 400, 1, 0.0)[0]
    filler = prompt[len(needle(key)) : -len(QUESTION)]
    assert filler[:40] in test_text


def test_instances_are_deterministic_per_seed_split_and_step():
    data = make_data("copy", train_lengths=[5, 10], test_lengths=[20])
    assert data.examples("test", 20, 10) == data.examples("test", 20, 10)
    assert data.examples("test", 20, 10) != data.examples("val", 20, 10)
    assert data.examples("test", 20, 10) != make_data(
        "copy", train_lengths=[5, 10], test_lengths=[20], seed=1
    ).examples("test", 20, 10)
    assert data.train_batch(0, 7, 16) == data.train_batch(0, 7, 16)
    assert data.train_batch(0, 7, 16) != data.train_batch(0, 8, 16)
    assert data.train_batch(0, 7, 16) != data.train_batch(1, 7, 16)
    assert all(5 <= len(p) <= 10 for p, _ in data.train_batch(0, 3, 64))


def test_test_instances_at_trained_sizes_never_appear_in_training():
    data = make_data("parity", train_lengths=[8, 10], test_lengths=[9])  # 512 instances at size 9
    test = {p for p, _ in data.examples("test", 9, 30)}
    val = {p for p, _ in data.examples("val", 9, 30)}
    train = {p for step in range(300) for p, _ in data.train_batch(0, step, 32)}
    assert all(split_of(p) == "test" for p in test) and all(split_of(p) == "val" for p in val)
    assert not test & train and not val & train and not test & val
    assert sum(len(p) == 9 for p in train) > 300  # size 9 was trained on, just not these


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"task": "juggle"},
            # The registry's names (a new task needs no edit here).
            f"unknown data.task 'juggle'; allowed: {', '.join(sorted(TASKS))}",
        ),
        (
            {"task": "copy", "answer_order": "lsb"},
            "unknown option data.answer_order for task 'copy'; allowed: symbols",
        ),
        ({"task": "copy", "symbols": 40}, r"data.symbols must be an integer in \[2, 26\], got 40"),
        (
            {"task": "addition", "answer_order": "up"},
            "unknown data.answer_order 'up'; allowed: lsb, msb",
        ),
        ({"task": "copy", "train_lengths": [9, 3]}, r"min <= max, got \[9, 3\]"),
        ({"task": "copy", "train_lengths": 5}, r"data.train_lengths must be \[min, max\], got 5"),
        ({"task": "copy", "test_lengths": []}, "data.test_lengths must be a list of sizes"),
        ({"task": "passkey", "train_lengths": [10, 20]}, "task 'passkey' needs sizes >= "),
        (
            {"task": "passkey", "depths": [0.5, 2]},
            r"data.depths\[1\] must be a finite number in \[0, 1\], got 2",
        ),
        ({"task": "passkey", "depths": 0.5}, r"data.depths must be a list of numbers in \[0, 1\]"),
        (
            {"task": "passkey", "depths": [True]},
            r"data.depths\[0\] must be a finite number in \[0, 1\], got true",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(params, message):
    with pytest.raises(PosexpError, match=message):
        make_data(**params)


def test_config_checks_row_fit_and_tokenizer(tmp_path):
    from tests.helpers import run_config

    with pytest.raises(
        PosexpError,
        match="train.seq_len=30 is too short for copy rows of size 20 "
        r"\(41 tokens\); allowed: train.seq_len >= 41",
    ):
        run_config("data=copy", "train.seq_len=30")
    with pytest.raises(PosexpError, match="data=synthetic needs tokenizer byte"):
        run_config("data=copy", "tokenizer=bpe")
    assert run_config("data=addition").data.params["task"] == "addition"


@pytest.mark.parametrize(
    ("task", "good", "bad", "message"),
    [
        ("reverse", "jab", "abz", r"prompt has symbols the reverse task does not use: 'z'; "),
        ("copy", "abc", "a b!", r"does not use: ' ', '!'; allowed: a, b, c, d, e, f, g, h, i, j$"),
        ("parity", "0110", "0120", r"the parity task does not use: '2'; allowed: 0, 1$"),
        ("addition", "12+34", "12-34", r"the addition task does not use: '-'; allowed: 0, "),
    ],
)
def test_a_prompt_outside_the_tasks_symbols_is_refused(task, good, bad, message):
    # A model never trained on a symbol answers it with noise or nothing (generate printed "").
    data = make_data(task)
    check_prompt(data.task, good)
    with pytest.raises(PosexpError, match=message):
        check_prompt(data.task, bad)


def test_prose_prompts_take_any_text():
    check_prompt(TASKS.get("passkey")(), "What is the pass key? 123 !")
    check_prompt(TASKS.get("ruler")(), "The magic number for abc is")


@pytest.mark.parametrize("task", ["passkey", "niah_single", "niah_multikey", "niah_multivalue"])
def test_every_task_with_key_depths_checks_them_alike(task):
    # One check (base.depth_list) for each task's data.depths: one message for one bad value.
    with pytest.raises(
        PosexpError, match=r"^data.depths\[1\] must be a finite number in \[0, 1\], got 2$"
    ):
        TASKS.get(task)(depths=[0.5, 2])
    with pytest.raises(
        PosexpError, match=r"^data.depths must be a list of numbers in \[0, 1\], got 'x'$"
    ):
        TASKS.get(task)(depths="x")
