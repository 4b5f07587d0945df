"""The Chomsky-hierarchy tasks (posexp/data/synthetic/: duplicate_string, odd_first, bucket_sort,
missing_duplicate, interlocked_pairing, stack_manipulation, binary_addition, modular_arithmetic;
symbols.py), their mixture (chomsky.py, mixture.py) and experiment=chomsky: answers checked by
reference solvers written from the task descriptions, exact sizes, hash splits, bad settings."""

from __future__ import annotations

from collections import Counter

import pytest

from posexp.data.synthetic import TASKS, make_data
from posexp.data.synthetic.base import build_task, split_of
from posexp.errors import PosexpError

# Reference solvers: each reads the prompt text alone and uses no task code.


def solve_duplicate(p: str) -> str:
    return "".join([p, p])


def solve_odd_first(p: str) -> str:
    odd = [c for i, c in enumerate(p, start=1) if i % 2 == 1]
    even = [c for i, c in enumerate(p, start=1) if i % 2 == 0]
    return "".join(odd + even)


def solve_bucket_sort(p: str) -> str:
    counts = Counter(p)
    return "".join(c * counts[c] for c in "abcdefghijklmnopqrstuvwxyz")


def solve_missing(p: str) -> str:
    half = len(p) // 2
    (at,) = [i for i, c in enumerate(p) if c == "_"]
    return p[at + half] if at < half else p[at - half]


def solve_interlocked(p: str) -> str:
    half = len(p) // 2
    u, v = p[:half], p[half:]
    assert set(u) <= {"a", "b"} and set(v) <= {"c", "d"}
    wrong = sum(1 for x, y in zip(u, v, strict=True) if "abcd".index(y) - "abcd".index(x) != 2)
    assert wrong <= 1  # a negative differs from the language at exactly one place
    return "1" if wrong == 0 else "0"


def solve_stack(p: str) -> str:
    start, actions = p.split(":")
    stack = list(reversed(start))  # top at the end of the list
    for act in actions:
        if act == "x":
            assert len(stack) > 1  # never a pop that empties the stack
            stack.pop()
        else:
            stack.append(act.lower())
    return "".join(reversed(stack))


def solve_binary_addition(p: str, order: str = "lsb") -> str:
    x, y = p.split("+")
    if order == "lsb":
        x, y = x[::-1], y[::-1]
    for number in (x, y):
        assert number == "0" or number[0] == "1"  # no leading zero
    total = bin(int(x, 2) + int(y, 2))[2:]
    return total[::-1] if order == "lsb" else total


def evaluate(text: str, modulus: int = 5) -> int:
    """Recursive descent over expr/term/factor with the usual precedence, mod ``modulus``."""
    at = 0

    def peek() -> str:
        return text[at] if at < len(text) else ""

    def expr() -> int:
        nonlocal at
        value = term()
        while peek() in ("+", "-") and peek():
            op = peek()
            at += 1
            rhs = term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term() -> int:
        nonlocal at
        value = factor()
        while peek() == "*":
            at += 1
            value *= factor()
        return value

    def factor() -> int:
        nonlocal at
        c = peek()
        at += 1
        if c == "-":
            return -factor()
        if c == "(":
            value = expr()
            assert peek() == ")"
            at += 1
            return value
        assert c.isdigit() and int(c) < modulus
        return int(c)

    value = expr()
    assert at == len(text)  # the whole prompt is one expression
    return value % modulus


def solve_modular(p: str) -> str:
    return str(evaluate(p))


SOLVERS = {
    "duplicate_string": solve_duplicate,
    "odd_first": solve_odd_first,
    "bucket_sort": solve_bucket_sort,
    "missing_duplicate": solve_missing,
    "interlocked_pairing": solve_interlocked,
    "stack_manipulation": solve_stack,
    "binary_addition": solve_binary_addition,
    "modular_arithmetic": solve_modular,
}
FIXED_ANSWER = {"duplicate_string", "odd_first", "bucket_sort", "missing_duplicate"}
FIXED_ANSWER |= {"interlocked_pairing", "modular_arithmetic"}


@pytest.mark.parametrize("task", SOLVERS)
def test_answers_match_the_solver_and_sizes_are_exact(task):
    data = make_data(task, train_lengths=[70, 80], test_lengths=[40])  # every size untrained
    t = data.task
    for n in (2, 3, 5, 8, 13, 21, 40, 64):
        for prompt, answer in data.examples("test", n, 40):
            assert answer == SOLVERS[task](prompt)
            assert len(prompt) == t.prompt_length(n)
            assert len(answer) <= t.answer_length(n)
            if task in FIXED_ANSWER:
                assert len(answer) == t.answer_length(n)
            assert set(prompt) <= set(t.prompt_symbols())


def test_the_worked_examples_of_the_docstrings():
    assert solve_stack("ab:Axx") == "b"
    assert solve_binary_addition("011+1") == "111"
    assert solve_modular("(3-4)*2") == "3"
    assert solve_odd_first("abcde") == "acebd"
    assert solve_missing("ab_aba") == "a" and solve_missing("abbab_") == "b"
    assert solve_interlocked("abbcdd") == "1" and solve_interlocked("abbcdc") == "0"


def test_the_expression_evaluator_agrees_with_python():
    # The solver's own parser against Python's (the grammar is Python's precedence), on shallow
    # expressions whose nesting Python's parser takes.
    data = make_data("modular_arithmetic", train_lengths=[70, 80], test_lengths=[30])
    for n in (1, 2, 7, 30):
        for prompt, _ in data.examples("test", n, 30):
            assert set(prompt) <= set("01234+-*()")
            assert evaluate(prompt) == eval(prompt) % 5  # noqa: S307 (digits and operators only)


def test_answers_are_not_constant():
    # Well-posed and not degenerate: the one-symbol answers take every value.
    seen = {
        task: {a for _, a in make_data(task, test_lengths=[20]).examples("test", 20, 200)}
        for task in ("missing_duplicate", "interlocked_pairing", "modular_arithmetic")
    }
    assert seen == {
        "missing_duplicate": {"a", "b"},
        "interlocked_pairing": {"0", "1"},
        "modular_arithmetic": set("01234"),
    }


def test_binary_addition_msb_writes_numbers_as_usual():
    data = make_data("binary_addition", train_lengths=[2, 6], test_lengths=[20], order="msb")
    for prompt, answer in data.examples("test", 20, 50):
        assert answer == solve_binary_addition(prompt, "msb")


@pytest.mark.parametrize("task", SOLVERS)
def test_held_out_instances_hash_to_their_split(task):
    data = make_data(task, train_lengths=[2, 8], test_lengths=[8])
    assert all(split_of(p) == "test" for p, _ in data.examples("test", 8, 30))
    assert all(split_of(p) == "val" for p, _ in data.examples("val", 7, 30))
    assert all(split_of(p) == "train" for p, _ in data.train_batch(0, 3, 64))


@pytest.mark.parametrize(
    ("task", "options", "words"),
    [
        ("duplicate_string", {"symbols": 1}, "data.symbols"),
        ("bucket_sort", {"symbols": 27}, "data.symbols"),
        ("binary_addition", {"order": "middle"}, "data.order"),
        ("modular_arithmetic", {"modulus": 1}, "data.modulus"),
        ("odd_first", {"queries": 3}, "unknown option data.queries"),
    ],
)
def test_bad_settings_are_refused_in_one_line(task, options, words):
    with pytest.raises(PosexpError) as e:
        build_task(task, options)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_sizes_outside_a_tasks_range_are_refused():
    with pytest.raises(PosexpError, match="needs sizes >= 2"):
        make_data("stack_manipulation", train_lengths=[1, 4])
    data = make_data("modular_arithmetic", train_lengths=[1, 4], test_lengths=[2048, 2049])
    assert len(data.examples("test", 2048, 1)[0][0]) == 2048
    with pytest.raises(PosexpError, match="sizes <= 2048"):
        data.examples("test", 2049, 1)


# The mixture


def chomsky(**options):
    return make_data("chomsky", train_lengths=[2, 8], test_lengths=[8, 40], **options)


TAGS = {
    "modular_arithmetic": "M",
    "stack_manipulation": "S",
    "duplicate_string": "D",
    "missing_duplicate": "G",
    "odd_first": "O",
    "binary_addition": "P",
    "bucket_sort": "K",
    "interlocked_pairing": "I",
}


def solve_tagged(prompt: str) -> str:
    """A mixture's prompt: the tag names the task, the rest is the task's prompt."""
    (task,) = [name for name, tag in TAGS.items() if tag == prompt[0]]
    return SOLVERS[task](prompt[1:])


def test_the_mixture_draws_every_task_and_scores_each_apart():
    data = chomsky()
    assert set(data.task.parts) == set(SOLVERS)
    for name, part in data.task.parts.items():
        # The tag is a symbol no task writes, so a tagged prompt names one task.
        assert all(TAGS[name] not in TASKS[t]().prompt_symbols() for t in SOLVERS)
        for prompt, answer in data.examples("test", 40, 10, part=name):
            assert prompt[0] == TAGS[name]  # the part's own instances, nothing else
            assert answer == SOLVERS[name](prompt[1:])
            assert len(prompt) == part.prompt_length(40) == 1 + TASKS[name]().prompt_length(40)
    rows = [r for step in range(20) for r in data.train_batch(0, step, 32)]
    assert all(solve_tagged(p) == a for p, a in rows)
    assert {p[0] for p, _ in rows} == set(TAGS.values())  # training draws every task


def test_tags_make_prompts_that_tasks_share_alone_unambiguous():
    # Alone, duplicate_string and odd_first read the same prompts and answer differently.
    dup, odd = chomsky().task.parts["duplicate_string"], chomsky().task.parts["odd_first"]
    prompts = {p[1:] for p, _ in chomsky().examples("test", 12, 100, part="duplicate_string")}
    alone = {p for p, _ in make_data("odd_first", test_lengths=[12]).examples("test", 12, 400)}
    assert prompts & alone  # the same strings...
    assert dup.prompt_symbols() != odd.prompt_symbols()  # ...told apart by the tag


def test_the_mixture_bounds_every_row_it_can_draw():
    data = chomsky()
    t = data.task
    rows = [r for s in range(30) for r in data.train_batch(1, s, 32)]
    assert max(len(p) + 1 + len(a) for p, a in rows) <= t.row_tokens(8)
    assert t.row_tokens(8) == data.longest_train_row() == 1 + 3 * 8 + 1  # tag, w, sep, ww
    assert t.scored_row_tokens(40) == 1 + 3 * 40 + 1  # duplicate_string's row at 40


def test_the_mixture_passes_options_to_its_tasks_and_refuses_bad_ones():
    data = chomsky(tasks=["binary_addition"], task_options={"binary_addition": {"order": "msb"}})
    for prompt, answer in data.examples("test", 20, 20, part="binary_addition"):
        assert answer == solve_binary_addition(prompt[1:], "msb")
    for options, words in [
        ({"tasks": ["copy"]}, "'copy' is not a Chomsky-hierarchy task"),
        ({"tasks": ["odd_first", "odd_first"]}, "twice"),
        ({"task_options": {"mqar": {}}}, "data.task_options.mqar"),
        (
            {"task_options": {"bucket_sort": {"symbols": 1}}},
            "data.task_options.bucket_sort.symbols",
        ),
        ({"tasks": []}, "data.tasks"),
    ]:
        with pytest.raises(PosexpError) as e:
            chomsky(**options)
        assert words in str(e.value) and "\n" not in str(e.value)


def test_the_preset_composes_every_job(monkeypatch, tmp_path):
    # Every job of experiment=chomsky built as `posexp train -m` checks it: the encodings Ruoss
    # et al. compared, each randomized but NoPE, three seeds, every test row within the
    # positions a randomized run draws from.
    from posexp.cli.sweep_check import check_jobs
    from posexp.commands.train import check_config
    from posexp.config import from_composed

    monkeypatch.chdir(tmp_path)
    jobs = []

    def build(cfg, overrides):
        run = from_composed(cfg)
        check_config(run)
        jobs.append((run.pe.name, run.positions.randomized, run.seed))
        data = make_data(**run.data.params)
        assert data.task.name == "chomsky" and set(data.task.parts) == set(SOLVERS)
        longest = max(data.task.scored_row_tokens(n) for n in data.test_lengths)
        if run.positions.randomized:
            assert longest <= run.positions.max_position
        assert longest <= run.train.seq_len

    check_jobs(["-m", "experiment=chomsky"], "train", build)
    pes = {"none", "sinusoidal", "learned", "rope", "alibi", "t5"}
    expected = {(p, r, s) for p in pes for r in (False, True) for s in (0, 1, 2)}
    assert sorted(jobs) == sorted(expected - {("none", True, s) for s in (0, 1, 2)})
