"""BABILong-style qa1-qa3 (posexp/data/synthetic/babilong.py and babilong_qa1/2/3.py): answers
checked by a reference solver that replays the facts found in the prompt, exact sizes, facts in
order in KJV filler of the instance's split, hash splits, bad settings."""

from __future__ import annotations

import re

import pytest

from posexp.data.synthetic import make_data
from posexp.data.synthetic.base import build_task, split_of
from posexp.errors import PosexpError

AGENT = r"(Sandra|Fred|Julie|Emily)"
FACT = re.compile(
    AGENT + r" (?:(went|moved|journeyed|travelled) to|(picked up|grabbed|got)|"
    r"(dropped|put down|discarded)) the (\w+)\."
)


def replay(prompt: str) -> tuple[dict, dict, dict]:
    """Every fact of the prompt in order: where agents are, where objects are, object trails."""
    where, holder, place, trail = {}, {}, {}, {}

    def put(obj, loc):
        place[obj] = loc
        if not trail.get(obj) or trail[obj][-1] != loc:
            trail.setdefault(obj, []).append(loc)

    for agent, move, take, _drop, thing in FACT.findall(prompt):
        if move:
            assert where.get(agent) != thing  # no move is a no-op
            where[agent] = thing
            for obj in [o for o, a in holder.items() if a == agent]:
                put(obj, thing)
        elif take:
            assert thing not in holder and place.get(thing, where[agent]) == where[agent]
            holder[thing] = agent
            put(thing, where[agent])
        else:
            assert holder.pop(thing) == agent  # only what it holds
    return where, place, trail


def solve(prompt: str) -> str:
    where, place, trail = replay(prompt)
    if m := re.search(r" Where is " + AGENT + r"\? Answer:$", prompt):
        return where[m[1]]
    if m := re.search(r" Where is the (\w+)\? Answer:$", prompt):
        return place[m[1]]
    m = re.search(r" Where was the (\w+) before the (\w+)\? Answer:$", prompt)
    path = trail[m[1]]
    assert path.count(m[2]) == 1  # asked about a place visited once: one answer
    return path[path.index(m[2]) - 1]


QA = ["babilong_qa1", "babilong_qa2", "babilong_qa3"]


@pytest.mark.parametrize("task", QA)
def test_answers_match_the_solver_and_sizes_are_exact(task):
    data = make_data(task, train_lengths=[3000, 3001], test_lengths=[300])
    t = data.task
    for n in (t.min_length, t.min_length + 7, 512, 2039):
        for prompt, answer in data.examples("test", n, 25):
            assert answer == solve(prompt)
            assert len(prompt) == t.prompt_length(n) == n
            assert len(answer) <= t.answer_length(n)
            assert len(FACT.findall(prompt)) == t.facts  # the story's facts, none from the filler


def test_each_task_asks_what_its_name_says():
    asked = {
        task: {
            re.sub(
                r"Sandra|Fred|Julie|Emily|apple|football|milk|\w+room|kitchen|hallway|garden|office",
                "X",
                p[p.rindex(" Where") :],
            )
            for p, _ in make_data(task, train_lengths=[900, 901], test_lengths=[300]).examples(
                "test", 400, 30
            )
        }
        for task in QA
    }
    assert asked == {
        "babilong_qa1": {" Where is X? Answer:"},
        "babilong_qa2": {" Where is the X? Answer:"},
        "babilong_qa3": {" Where was the X before the X? Answer:"},
    }


def test_qa2_and_qa3_need_more_than_the_last_move():
    # The carried object's place is often not where the asked object's last taker stood: the
    # holder's later moves matter (two facts); qa3's answer is not the object's current place.
    data = make_data("babilong_qa3", train_lengths=[900, 901], test_lengths=[300])
    differs = 0
    for prompt, answer in data.examples("test", 600, 60):
        _, place, _ = replay(prompt)
        obj = re.search(r"Where was the (\w+) before", prompt)[1]
        differs += place[obj] != answer
    assert differs > 30


def test_the_filler_is_the_splits_kjv_text():
    from posexp.data.synthetic.haystack import kjv_text

    data = make_data("babilong_qa1", train_lengths=[900, 901], test_lengths=[300])
    for prompt, _ in data.examples("test", 1015, 5):
        filler = FACT.sub("", prompt[: prompt.rindex(" Where")])
        for chunk in filter(None, (c.strip() for c in filler.split("  "))):
            assert chunk[:40] in kjv_text("test")


def test_held_out_instances_hash_to_their_split():
    data = make_data("babilong_qa1", train_lengths=[162, 247], test_lengths=[247])
    assert all(split_of(p) == "test" for p, _ in data.examples("test", 200, 10))
    assert all(split_of(p) == "train" for p, _ in data.train_batch(0, 1, 16))


@pytest.mark.parametrize(
    ("task", "options", "words"),
    [
        ("babilong_qa1", {"facts": 0}, "data.facts"),
        ("babilong_qa3", {"facts": 2}, "data.facts"),
        ("babilong_qa2", {"depths": [0.5]}, "unknown option data.depths"),
    ],
)
def test_bad_settings_are_refused_in_one_line(task, options, words):
    with pytest.raises(PosexpError) as e:
        build_task(task, options)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_size_below_the_facts_and_question_is_refused():
    t = build_task("babilong_qa2", {"facts": 6})
    with pytest.raises(PosexpError, match=f"needs sizes >= {t.min_length}"):
        make_data("babilong_qa2", train_lengths=[t.min_length - 1, 247], facts=6)
