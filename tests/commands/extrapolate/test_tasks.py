"""eval-extrapolate on task runs: what each part is scored at, and --depths refused one way."""

from __future__ import annotations

from pathlib import Path

import pytest

from posexp.commands.extrapolate.tasks import depth_tasks, task_parts
from posexp.data.synthetic import make_data
from posexp.errors import PosexpError

RUN = Path("/runs/r")
# The one line every run without key depths gets (a task, a mixture, a language model).
ALLOWED = (
    "(no key depths); allowed: --depths only for runs of a task with key depths "
    "(niah_single, niah_multikey, niah_multiquery, niah_multivalue, passkey) "
    "or a ruler mixture drawing one$"
)


def test_the_tasks_with_key_depths_are_those_with_a_depths_option():
    assert sorted(depth_tasks()) == [
        "niah_multikey",
        "niah_multiquery",
        "niah_multivalue",
        "niah_single",
        "passkey",
    ]


@pytest.mark.parametrize(
    ("data", "what"),
    [
        ({"task": "reverse"}, "a reverse task run"),
        (
            {"task": "ruler", "tasks": ["variable_tracking", "common_words"]},
            "a ruler run of variable_tracking, common_words",
        ),
        (None, "a language-model run"),
    ],
)
def test_depths_on_a_run_without_key_depths_is_one_message(data, what):
    task = None if data is None else make_data(**data, train_lengths=[200, 226], test_lengths=[226])
    with pytest.raises(PosexpError) as e:
        task_parts(task, [0.5, 1.0], RUN)
    message = str(e.value)
    assert message.startswith(
        f"--depths 0.5,1 sets where a key sits in the filler, and '/runs/r' is {what} "
    )
    assert message.endswith(ALLOWED.rstrip("$"))


@pytest.mark.parametrize("name", ["passkey", "niah_single", "ruler"])
def test_depths_given_replace_the_tasks_own_where_it_has_them(name):
    task = make_data(name, train_lengths=[200, 226], test_lengths=[226])
    parts = task_parts(task, [0.3], RUN)
    own = task_parts(task, None, RUN)
    for (part, depths, least), (_, own_depths, _) in zip(parts, own, strict=True):
        assert depths == ((0.3,) if own_depths != (None,) else (None,)), part
        assert least == (task.task.parts[part] if part else task.task).min_length
