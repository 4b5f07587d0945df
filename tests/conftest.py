"""Shared test setup: small, deterministic, CPU-only."""

import logging
import os

import pytest
import torch

torch.set_num_threads(1)  # tiny models: more threads only add overhead

# The files that take minutes run first, each on its own worker (`--dist loadfile`), while the
# other worker works through the rest: started last, they would set the suite's wall time.
FIRST = ("tests/scripts/test_slurm_local.py", "tests/scripts/test_gpu_check.py")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the cores, for the tests that wait on posexp
    subprocesses, Slurm or a launcher (docs/contributing.md has what it measured)."""
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the slowest files first (a stable sort: every worker gets the same order)."""
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(FIRST)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _torch_threads():
    """Each test leaves torch's thread count as it found it. A command run in-process sets the
    count its config asks for; left behind, it changes the arithmetic of every later in-process
    run on the worker (fp32 sums split by thread), and an exact-resume test then compares runs
    made on different counts. The count is put back, and the test that changed it fails."""
    before = torch.get_num_threads()
    yield
    after = torch.get_num_threads()
    if after != before:
        torch.set_num_threads(before)
        pytest.fail(f"the test left torch's thread count at {after} (it was {before})")


@pytest.fixture(autouse=True)
def _logging_handlers():
    """Each test leaves the loggers' handlers as it found them. A command run in-process under
    Hydra adds a handler on the test's captured stdout, closed when the test ends; a later test
    on the same worker that logs would write "--- Logging error ---" into its own stderr."""
    loggers = [logging.getLogger(), logging.getLogger("posexp")]
    before = [list(lg.handlers) for lg in loggers]
    yield
    for lg, handlers in zip(loggers, before, strict=True):
        for handler in [h for h in lg.handlers if h not in handlers]:
            lg.removeHandler(handler)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """One token/tokenizer cache for every CLI test in the session."""
    return tmp_path_factory.mktemp("cache")
