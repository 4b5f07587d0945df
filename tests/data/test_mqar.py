"""MQAR (posexp/data/synthetic/mqar.py): answers checked by a reference solver reading the
prompt alone, exact sizes, distinct keys and queries, hash splits, bad settings."""

from __future__ import annotations

import pytest

from posexp.data.synthetic import make_data
from posexp.data.synthetic.base import build_task, split_of
from posexp.errors import PosexpError


def solve(prompt: str) -> str:
    """Pairs before " ?", keys after it: each key's value, in the order asked."""
    pairs, asked = prompt.split(" ? ")
    table = {}
    for pair in pairs.split(" "):
        key = "".join(c for c in pair if c.isalpha())
        value = pair[len(key) :]
        assert key not in table and value.isdigit()  # keys are distinct, values digits
        table[key] = value
    queries = asked.split(" ")
    assert len(set(queries)) == len(queries)  # every key asked once
    return " ".join(table[q] for q in queries)


@pytest.mark.parametrize(
    "options", [{}, {"queries": 1}, {"queries": 8, "key_letters": 3, "value_digits": 2}]
)
def test_answers_match_the_solver_and_sizes_are_exact(options):
    data = make_data("mqar", train_lengths=[300, 301], test_lengths=[8], **options)
    t = data.task
    for n in (t.queries, t.queries + 1, 16, 64, 200):
        for prompt, answer in data.examples("test", n, 30):
            assert answer == solve(prompt)
            assert len(prompt) == t.prompt_length(n)
            assert len(answer) == t.answer_length(n)
            assert prompt.count(" ") == (n - 1) + 1 + t.queries  # n pairs, "?", the queries
            assert set(prompt) <= set(t.prompt_symbols())


def test_the_defaults_sizes_in_closed_form():
    t = build_task("mqar", {})
    assert [t.prompt_length(n) for n in (4, 16)] == [4 * 4 + 13, 4 * 16 + 13]
    assert t.answer_length(4) == 7 and t.row_tokens(16) == 85


def test_queries_ask_about_keys_anywhere_in_the_list():
    # Not only the last pairs: the position of an asked pair is spread over the list.
    data = make_data("mqar", train_lengths=[300, 301], test_lengths=[32])
    where = []
    for prompt, _ in data.examples("test", 32, 100):
        pairs, asked = prompt.split(" ? ")
        keys = [p[:2] for p in pairs.split(" ")]
        where += [keys.index(q) for q in asked.split(" ")]
    assert min(where) < 4 and max(where) > 27


def test_held_out_instances_hash_to_their_split():
    data = make_data("mqar", train_lengths=[4, 16], test_lengths=[16])
    assert all(split_of(p) == "test" for p, _ in data.examples("test", 8, 30))
    assert all(split_of(p) == "train" for p, _ in data.train_batch(0, 1, 64))


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"queries": 0}, "data.queries"),
        ({"key_letters": 9}, "data.key_letters"),
        ({"value_digits": "x"}, "data.value_digits"),
        ({"hops": 2}, "unknown option data.hops"),
    ],
)
def test_bad_settings_are_refused_in_one_line(options, words):
    with pytest.raises(PosexpError) as e:
        build_task("mqar", options)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_sizes_outside_the_keys_are_refused():
    with pytest.raises(PosexpError, match="needs sizes >= 4"):
        make_data("mqar", train_lengths=[3, 8])
    data = make_data("mqar", train_lengths=[4, 8], test_lengths=[30], key_letters=1)
    with pytest.raises(PosexpError, match="sizes <= 26"):
        data.examples("test", 30, 1)
