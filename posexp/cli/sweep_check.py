"""Every job of a sweep checked before the sweep starts (``-m``), and a single run before Hydra
makes its dir.

Hydra makes the sweep dir, then each job's dir, and only then does a job build (and check) its
config: a command line whose third job names a PE that does not exist would leave a sweep of
failed jobs behind, one dir each, perhaps after hours in a Slurm queue. So, before Hydra runs,
each job's overrides are worked out as Hydra's basic sweeper does (the command line's sweeps,
and the ``hydra.sweeper.params`` a preset such as ``experiment=extrapolation`` brings), each
config is composed, and the config the job would build is built. Refused jobs are one line
(how many, the first named with its error); nothing is written. A grid whose product holds
combinations known to fail (``heads=3`` beside a width it does not divide) may still run the
others, recording those as failed, with ``POSEXP_SWEEP_CHECK=0``. An override Hydra cannot
compose at all is left to Hydra's launch, which refuses it before any job runs. A sweeper other
than the basic one (a plugin's search) chooses its jobs as it goes, so it checks them itself.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from posexp.config.paths import config_dir
from posexp.errors import PosexpError

MAX_JOBS = 2000  # composing a job takes milliseconds; past this, the first ones stand for all
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
SKIP_ENV = "POSEXP_SWEEP_CHECK"  # 0: launch every job, each failing on its own


def is_multirun(args: list[str]) -> bool:
    """Whether the command line asks Hydra for a sweep."""
    return any(a in ("-m", "--multirun") for a in args)


def check_sweep_jobs(
    args: list[str], config_name: str, build: Callable[[Any, list[str]], Any]
) -> int:
    """Compose each job of the sweep ``args`` ask for and ``build(cfg, overrides)`` it (a
    ``PosexpError`` names the job); the number of jobs checked (0: not a sweep, or not one the
    basic sweeper runs)."""
    if not is_multirun(args) or os.environ.get(SKIP_ENV, "1") == "0":
        return 0
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    given = [a for a in args if not a.startswith("-")]
    checked, refused = 0, []
    with initialize_config_dir(str(config_dir()), version_base="1.3", job_name="posexp"):
        from hydra.core.global_hydra import GlobalHydra

        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        try:
            jobs = expand(parser, given)
            for job in jobs:
                cfg = compose(config_name, overrides=job, return_hydra_config=True)
                if OmegaConf.select(cfg, "hydra.sweeper._target_") != BASIC_SWEEPER:
                    return checked
                preset = preset_sweeps(cfg, job)
                for extra in expand(parser, preset) if preset else [[]]:
                    overrides = [*extra, *job]  # the command line wins over a preset's params
                    if checked == MAX_JOBS:
                        return checked
                    composed = compose(config_name, overrides=overrides) if extra else cfg
                    if "hydra" in composed:
                        composed = OmegaConf.masked_copy(
                            composed, [k for k in composed if k != "hydra"]
                        )
                    checked += 1
                    try:
                        check_job(build, composed, overrides)
                    except PosexpError as e:
                        refused.append(str(e))
        except HydraException:  # an override Hydra itself refuses: refused at launch as ever
            return checked
    if refused:
        some = "" if len(refused) == checked else f" of {checked}"
        raise PosexpError(
            f"{len(refused)}{some} sweep job{'s' * (len(refused) > 1)} refused, e.g. "
            f"{refused[0]}; fix the grid, or run the others and record these as failed with "
            f"{SKIP_ENV}=0"
        )
    return checked


# Flags after which Hydra runs nothing (prints a config, help or a completion script): unchecked.
NO_RUN_FLAGS = ("--cfg", "-c", "--info", "-i", "--shell-completion", "-sc", "--hydra-help")


def check_jobs(args: list[str], config_name: str, build: Callable[[Any, list[str]], Any]) -> int:
    """Every job ``args`` ask for checked before Hydra makes any dir: a sweep's (above), or the
    single run's, whose refusal is its own one-line error; the number of jobs checked."""
    if is_multirun(args):
        return check_sweep_jobs(args, config_name, build)
    given = [a for a in args if not a.startswith("-")]
    if (
        os.environ.get(SKIP_ENV, "1") == "0"
        or any(a.split("=", 1)[0] in NO_RUN_FLAGS for a in args)
        # A resume builds its config from the run's saved one, in the task.
        or any(a.split("=", 1)[0].lstrip("+") == "resume" for a in given)
    ):
        return 0
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    with initialize_config_dir(str(config_dir()), version_base="1.3", job_name="posexp"):
        try:
            cfg = compose(config_name, overrides=given)
        except HydraException:  # refused by Hydra at launch, as ever
            return 0
    with quietly():
        build(cfg, given)
    return 1


def expand(parser: Any, overrides: list[str]) -> list[list[str]]:
    """Each job's overrides: the product of every sweep's values, as the basic sweeper runs it."""
    choices = []
    for override in parser.parse_overrides(overrides):
        key = override.get_key_element()
        if override.is_sweep_override():
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([f"{key}={override.get_value_element_as_str()}"])
    return [list(job) for job in itertools.product(*choices)]


def preset_sweeps(cfg: Any, job: list[str]) -> list[str]:
    """The ``hydra.sweeper.params`` of the composed config (a preset's sweep), less the keys the
    command line sets."""
    from omegaconf import OmegaConf

    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    set_here = {o.split("=", 1)[0].lstrip("+~") for o in job}
    return [f"{k}={v}" for k, v in params.items() if str(k).lstrip("+~") not in set_here]


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """posexp's warnings held back while a config is built to check it: the job builds it
    again and says them then, once."""
    logger = logging.getLogger("posexp")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_job(build: Callable[[Any, list[str]], Any], cfg: Any, overrides: list[str]) -> None:
    """``build(cfg, overrides)``; its one-line error names the job."""
    try:
        with quietly():
            build(cfg, overrides)
    except PosexpError as e:
        shown = " ".join(o for o in overrides if not o.startswith("hydra"))
        raise PosexpError(f"job {shown}: {e}") from None
