"""RULER tasks (posexp/data/synthetic/haystack.py and the niah_*, variable_tracking,
common_words and frequent_words modules): sizes, determinism, options, well-posedness checked by
independent solvers, needle depths."""

from __future__ import annotations

import re
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest

from posexp.data.synthetic import TASKS, make_data
from posexp.data.synthetic.base import build_task
from posexp.data.synthetic.haystack import (
    NOISE,
    compose,
    kjv,
    kjv_text,
    noise,
    vocabulary,
    word_lengths,
)
from posexp.errors import PosexpError

RULER = [
    "niah_single",
    "niah_multikey",
    "niah_multivalue",
    "niah_multiquery",
    "variable_tracking",
    "common_words",
    "frequent_words",
]
NEEDLE = re.compile(r"The magic number for ([a-z]+) is (\d+)\.")


# Reference solvers: regexes and counting over the prompt alone, no task code.


def solve_niah(prompt: str) -> str:
    key = re.search(r"What is the magic number for ([a-z]+)\? Answer:$", prompt)[1]
    (value,) = [v for k, v in NEEDLE.findall(prompt) if k == key]
    return value


def solve_multivalue(prompt: str) -> str:
    key = re.search(r"What are all the magic numbers for ([a-z]+)\? Answer:$", prompt)[1]
    return " ".join(v for k, v in NEEDLE.findall(prompt) if k == key)


def solve_multiquery(prompt: str) -> str:
    keys = re.search(r"What are the magic numbers for ([a-z, ]+)\? Answer:$", prompt)[1]
    found = NEEDLE.findall(prompt)
    values = []
    for key in keys.split(", "):
        (value,) = [v for k, v in found if k == key]
        values.append(value)
    return " ".join(values)


def solve_variables(prompt: str) -> str:
    asked = re.search(r" Find all variables assigned the value (\d+)\. Answer:$", prompt)[1]
    held: dict[str, str] = {}
    names = []
    for name, value, source in re.findall(r"VAR ([A-Z]+) = (?:(\d+)|VAR ([A-Z]+))\.", prompt):
        assert name not in held  # every name is assigned once
        held[name] = value or held[source]  # a copy's source was assigned before it
        if held[name] == asked:
            names.append(name)
    return " ".join(names)


def solve_common(prompt: str) -> str:
    k = int(re.search(r" Question: the (\d+) most common words\? Answer:$", prompt)[1])
    words = prompt[len("Words:") : prompt.index(" Question:")].split()
    ranked = Counter(words).most_common()
    assert len(ranked) == k or ranked[k - 1][1] > ranked[k][1]  # no tie decides the answer
    top = {w for w, _ in ranked[:k]}
    return " ".join(dict.fromkeys(w for w in words if w in top))


def solve_frequent(prompt: str) -> str:
    k = int(re.search(r" Question: the (\d+) most frequent coded words\? Answer:$", prompt)[1])
    tokens = prompt[len("Text:") : prompt.index(" Question:")].split()
    counts = Counter(t for t in tokens if t != "...")
    ranked = [c for _, c in counts.most_common(k + 1)]
    assert all(a > b for a, b in pairwise(ranked)), ranked  # ranks 2..k+2 strictly fall
    assert tokens.count("...") >= ranked[0]
    return " ".join(w for w, _ in counts.most_common(k))


SOLVERS = {
    "niah_single": solve_niah,
    "niah_multikey": solve_niah,
    "niah_multivalue": solve_multivalue,
    "niah_multiquery": solve_multiquery,
    "variable_tracking": solve_variables,
    "common_words": solve_common,
    "frequent_words": solve_frequent,
}
CASES = [
    ("niah_single", {}),
    ("niah_single", {"haystack": "kjv", "value_digits": 7}),
    ("niah_multikey", {}),
    ("niah_multikey", {"haystack": "needles"}),
    ("niah_multikey", {"haystack": "needles", "key_letters": 1, "value_digits": 1}),
    ("niah_multikey", {"haystack": "kjv", "distractors": 5}),
    ("niah_multivalue", {}),
    ("niah_multivalue", {"values": 5, "value_digits": 1, "haystack": "kjv"}),
    ("niah_multiquery", {}),
    ("niah_multiquery", {"queries": 4, "key_letters": 1}),
    ("variable_tracking", {}),
    ("variable_tracking", {"chains": 3, "hops": 2}),
    ("variable_tracking", {"chains": 2, "hops": 12, "name_letters": 1, "value_digits": 1}),
    ("common_words", {}),
    ("common_words", {"common": 3, "common_repeats": 6, "rare_repeats": 3}),
    ("frequent_words", {}),
    ("frequent_words", {"alpha": 1.0, "top": 5}),
    ("frequent_words", {"alpha": 3.0, "top": 1}),
]


@pytest.mark.parametrize(("name", "options"), CASES)
def test_independent_solver_recovers_every_answer_at_exact_sizes(name, options):
    task = build_task(name, options)
    rng = np.random.default_rng(7)
    lo = task.min_length
    for i in range(200):
        n = max(lo, [lo, lo + 1, lo + 7, 256, 600, 2032][i % 6])
        n = n if i < 180 else int(rng.integers(lo, 900))
        prompt, answer = task.instance(rng, n, "test", None)
        assert len(prompt) == n == task.prompt_length(n)
        assert len(answer) <= task.answer_length(n)
        assert SOLVERS[name](prompt) == answer
        assert task.items(answer) == answer.split(" ") and all(task.items(answer))


@pytest.mark.parametrize("name", RULER)
def test_registered_with_ruler_scoring_and_items(name):
    task = TASKS.get(name)()
    assert (task.unit, task.scorer, task.report_view) == ("tokens", "string_match_all", "ruler")
    assert task.variants == ((0.0, 0.25, 0.5, 0.75, 1.0) if name.startswith("niah") else ())
    prompt, answer = task.instance(np.random.default_rng(0), 500, "test")
    items = task.items(answer)
    sizes = {"niah_multivalue": 3, "niah_multiquery": 2, "variable_tracking": 4}
    sizes |= {"common_words": 5, "frequent_words": 3}
    assert len(items) == sizes.get(name, 1)
    assert all(item and item in prompt for item in items)
    assert task.items("4817 0932") == ["4817", "0932"]


@pytest.mark.parametrize("name", RULER)
def test_instances_are_deterministic_per_seed(name):
    task = TASKS.get(name)()

    def instances(seed):
        rng = np.random.default_rng(seed)
        return [task.instance(rng, n, "test", None) for n in (task.min_length, 300, 2032)]

    assert instances(3) == instances(3)
    assert instances(3) != instances(4)
    data = make_data(name, train_lengths=[task.min_length, 240], test_lengths=[500])
    variant = task.variants[1] if task.variants else None
    assert data.examples("test", 500, 4, variant) == data.examples("test", 500, 4, variant)
    other = make_data(name, train_lengths=[task.min_length, 240], test_lengths=[500], seed=1)
    assert data.examples("test", 500, 4, variant) != other.examples("test", 500, 4, variant)
    assert data.train_batch(0, 1, 16) == data.train_batch(0, 1, 16)
    assert data.train_batch(0, 1, 16) != data.train_batch(0, 2, 16)
    assert all(task.min_length <= len(p) <= 240 for p, _ in data.train_batch(0, 1, 16))


@pytest.mark.parametrize(
    ("name", "minimum"),
    [
        ("niah_single", 76),
        ("niah_multikey", 178),
        ("niah_multivalue", 150),
        ("niah_multiquery", 117),
        ("variable_tracking", 125),
        ("common_words", 169),
        ("frequent_words", 132),
    ],
)
def test_too_short_lengths_are_one_line_errors(name, minimum):
    task = TASKS.get(name)()
    assert task.min_length == minimum
    with pytest.raises(
        PosexpError, match=rf"^{name} length {minimum - 1} is shorter than its "
    ) as e:
        task.instance(np.random.default_rng(0), minimum - 1, "test")
    assert str(e.value).endswith(f"; allowed: lengths >= {minimum}") and "\n" not in str(e.value)
    with pytest.raises(PosexpError, match=f"task '{name}' needs sizes >= {minimum} tokens"):
        make_data(name, train_lengths=[minimum - 1, 240], test_lengths=[500])


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        (
            "niah_single",
            {"haystack": "essay"},
            "unknown data.haystack 'essay'; allowed: kjv, noise",
        ),
        ("niah_single", {"haystack": "needles"}, "allowed: kjv, noise$"),
        ("niah_single", {"key_letters": 0}, r"data.key_letters must be an integer in \[1, 8\]"),
        ("niah_single", {"value_digits": 13}, r"data.value_digits must be an integer in \[1, 12\]"),
        ("niah_single", {"depths": [0.5, 2]}, r"data.depths\[1\] must be a finite number in \["),
        ("niah_single", {"depths": 0.5}, r"data.depths must be a list of numbers in \[0, 1\]"),
        ("niah_single", {"distractors": 3}, "unknown option data.distractors for task"),
        ("niah_multikey", {"haystack": "hay"}, "allowed: kjv, needles, noise$"),
        (
            "niah_multikey",
            {"distractors": -1},
            r"data.distractors must be an integer in \[0, 100\]",
        ),
        ("niah_multikey", {"key_letters": 1, "distractors": 26}, "allowed: data.distractors <= 25"),
        (
            "niah_multikey",
            {"key_letters": 1, "distractors": 25, "haystack": "needles"},
            "allowed: data.distractors <= 24",
        ),
        ("niah_multivalue", {"values": 0}, r"data.values must be an integer in \[1, 100\]"),
        ("niah_multivalue", {"values": 11, "value_digits": 1}, "allowed: data.values <= 10"),
        ("niah_multiquery", {"queries": 27, "key_letters": 1}, "allowed: data.queries <= 26"),
        ("variable_tracking", {"hops": 0}, r"data.hops must be an integer in \[1, 50\]"),
        ("variable_tracking", {"chains": 3, "hops": 12, "name_letters": 1}, "fewer names than 39"),
        ("variable_tracking", {"chains": 11, "value_digits": 1}, "allowed: data.chains <= 10"),
        ("common_words", {"common": 0}, r"data.common must be an integer in \[1, 100\]"),
        ("common_words", {"rare_repeats": 4}, "allowed: rare_repeats < common_repeats"),
        ("frequent_words", {"alpha": 0}, "data.alpha must be a finite number > 0, got 0"),
        ("frequent_words", {"alpha": True}, "data.alpha must be a finite number > 0, got true"),
        ("frequent_words", {"top": 0}, r"data.top must be an integer in \[1, 20\]"),
    ],
)
def test_bad_options_are_one_line_errors(name, options, message):
    with pytest.raises(PosexpError, match=message) as e:
        build_task(name, options)
    assert "\n" not in str(e.value)


def needle_offsets(prompt: str, needle_length: int) -> list[tuple[str, int]]:
    """Each needle's key and the haystack characters before it (other needles not counted)."""
    starts = [(m.start() - 1, m[1]) for m in NEEDLE.finditer(prompt)]
    return [(key, at - i * needle_length) for i, (at, key) in enumerate(starts)]


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("niah_single", {}),
        ("niah_multikey", {}),
        ("niah_multikey", {"haystack": "needles"}),
        ("niah_multivalue", {}),
        ("niah_multiquery", {}),
    ],
)
def test_the_queried_needle_sits_at_the_asked_depth(name, options):
    task = build_task(name, options)
    rng = np.random.default_rng(1)
    for depth in task.variants:
        for n in (300, 1000, 2032):
            for _ in range(5):
                prompt, _ = task.instance(rng, n, "test", depth)
                ask = re.search(r" What .*$", prompt)[0]
                key = re.search(r"magic numbers? for ([a-z]+)", ask)[1]  # the first one asked
                placed = {"niah_multikey": 4, "niah_multivalue": 3, "niah_multiquery": 2}
                room = n - len(ask) - placed.get(name, 1) * task.needle_length
                if options:  # a haystack of needles: up to 3 distractors may sit before the key
                    at = prompt.index(f" The magic number for {key} is")
                    assert depth * room - 17 <= at <= depth * room + 3 * task.needle_length + 17
                    continue
                # noise sentences are at most 22 characters: a boundary lies within 11
                offsets = [o for k, o in needle_offsets(prompt, task.needle_length) if k == key]
                assert min(abs(o - depth * room) for o in offsets) <= 11  # multivalue: any of 3


def test_single_needle_is_first_at_depth_0_and_last_at_depth_1_in_any_haystack():
    for haystack in ("noise", "kjv"):
        task = build_task("niah_single", {"haystack": haystack})
        rng = np.random.default_rng(2)
        for n in (100, 700, 2032):
            prompt, value = task.instance(rng, n, "test", 0.0)
            assert prompt.startswith(" The magic number for ") and f"is {value}." in prompt[:40]
            prompt, value = task.instance(rng, n, "test", 1.0)
            assert re.search(
                rf"is {value}\. What is the magic number for [a-z]+\? Answer:$", prompt
            )
            assert sum(c.isdigit() for c in prompt) == len(value)  # the haystack has no digit


def test_training_draws_depths_across_the_haystack():
    task = build_task("niah_single", {})
    rng = np.random.default_rng(3)
    depths = []
    for _ in range(200):
        prompt, value = task.instance(rng, 1000, "train", None)
        depths.append(prompt.index(f"is {value}.") / 1000)
    assert min(depths) < 0.05 and max(depths) > 0.9 and 0.4 < float(np.mean(depths)) < 0.6


def test_variable_chains_keep_their_order_and_distractors_hold_other_values():
    task = build_task("variable_tracking", {"chains": 3})
    rng = np.random.default_rng(4)
    for _ in range(50):
        prompt, answer = task.instance(rng, 700, "test")
        values = re.findall(r"VAR [A-Z]+ = (\d+)\.", prompt)
        assert len(set(values)) == 3 and len(re.findall(r"VAR [A-Z]+ = ", prompt)) == 3 * 4
        names = answer.split(" ")
        first = re.search(rf"VAR {names[0]} = (\d+)\.", prompt)
        assert first and prompt.endswith(f"value {first[1]}. Answer:")
        spots = [prompt.index(f"VAR {b} = VAR {a}.") for a, b in pairwise(names)]
        assert first.start() < spots[0] and spots == sorted(spots)


def test_word_counts_follow_the_options():
    common = build_task("common_words", {})
    rng = np.random.default_rng(5)
    for n in (169, 400, 2032):
        prompt, answer = common.instance(rng, n, "test")
        counts = Counter(prompt[len("Words:") : prompt.index(" Question:")].split())
        assert {counts[w] for w in answer.split()} == {4}
        assert set(counts.values()) <= {4, 2} and len(counts) - 5 == sum(
            c == 2 for c in counts.values()
        )
        listed = prompt[: prompt.index(" Question:")]
        pad = len(listed) - len(listed.rstrip(" "))  # spaces that make up the exact length
        assert pad <= (7 if n < 200 else 1)
    frequent = build_task("frequent_words", {})
    prompt, answer = frequent.instance(rng, 2032, "test")
    counts = Counter(prompt[len("Text:") : prompt.index(" Question:")].split())
    top = [counts[w] for w in answer.split()]
    assert counts["..."] > 3 * top[0] and top[0] > 2 * top[2]  # Zipf alpha 2: 1/r^2


def test_haystacks_are_exact_digit_free_and_start_at_sentences():
    rng = np.random.default_rng(6)
    for length in (0, 1, 50, 3000):
        text = noise(rng, length)
        assert len(text) == length and not any(c.isdigit() for c in text)
        if length > 30:
            assert any(text.startswith(s) for s in NOISE)
            assert set(re.findall(r" [^.]+\.", text[:-30])) <= set(NOISE)
    test_text = kjv_text("test")
    assert not any(c.isdigit() for c in kjv_text("train"))
    for length in (10, 5000):
        text = kjv(rng, length, "test")
        assert len(text) == length and text in test_text and text[0] == " "


def test_compose_puts_snippets_at_boundaries_nearest_their_depths():
    filler = " Aa bb. Cc dd, ee ff. Gg."  # boundaries: 0, 6, 13, 20, 24
    text, order = compose(filler, [(1.0, " X."), (0.0, " Y."), (0.3, " Z."), (0.3, " W.")])
    assert text == " Y. Aa bb. Z. W. Cc dd, ee ff. Gg. X."
    assert order == [1, 2, 3, 0]


def test_vocabulary_is_fixed_pronounceable_and_large():
    words = vocabulary()
    assert {k: len(v) for k, v in words.items()} == {3: 1200, 4: 2400, 5: 1200}
    every = [w for v in words.values() for w in v]
    assert len(set(every)) == len(every) == 4800
    assert all(
        re.fullmatch(r"([bcdfghjklmnprstvwz][aeiou])+[bcdfghjklmnprstvwz]?", w) for w in every
    )
    vocabulary.cache_clear()
    assert vocabulary() == words  # from a fixed seed, not the run's


def test_word_lengths_fill_exactly_but_for_a_small_pad():
    rng = np.random.default_rng(8)
    for repeats in (1, 2, 3):
        for chars in range(0, 300):
            lengths, pad = word_lengths(rng, chars, repeats)
            assert repeats * sum(k + 1 for k in lengths) + pad == chars
            assert set(lengths) <= {3, 4, 5} and 0 <= pad < 4 * repeats
            if chars >= 8 * repeats:
                assert pad == chars % repeats


def test_running_out_of_words_is_a_one_line_error():
    task = build_task("common_words", {"rare_repeats": 1, "common_repeats": 2})
    with pytest.raises(PosexpError, match=r"common_words length 40000 needs \d+ distinct .*"):
        task.instance(np.random.default_rng(0), 40000, "test")
