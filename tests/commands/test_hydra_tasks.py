"""posexp/commands/hydra_tasks.py: the task functions a launcher pickles load without torch."""

from __future__ import annotations

import pickle
import subprocess
import sys

from posexp.commands import hydra_tasks


def test_a_pickled_task_loads_without_importing_torch():
    # A Slurm job unpickles its task before submitit handles the time-limit signal: the module
    # named in the pickle must be quick to import (torch alone takes seconds under load).
    for task in (hydra_tasks.train, hydra_tasks.finetune):
        blob = pickle.dumps(task)  # by reference: module and name, as cloudpickle does
        code = (
            "import pickle, sys; "
            f"task = pickle.loads({blob!r}); "
            "print(task.__module__, task.__name__, 'torch' in sys.modules)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        assert out == ["posexp.commands.hydra_tasks", task.__name__, "False"]


def test_a_sweep_ends_with_how_its_jobs_ended_and_the_report_command(tmp_path, cache):
    from tests.helpers import TINY, posexp

    sweep = tmp_path / "sweep"
    proc = posexp(
        tmp_path, cache, "train", "-m", *TINY, "pe=rope,alibi", f"hydra.sweep.dir={sweep}"
    )
    tail = proc.stderr.strip().splitlines()[-2:]
    assert tail == [f"sweep {sweep}: 2 jobs, 2 completed", f"report: posexp report {sweep}"]
