"""Slurm sweeps that never wait on a request no node can satisfy.

Slurm accepts a job asking for more CPUs per node than any node of the partition has, then
keeps it pending forever (reason ``PartitionConfig``), and a sweep waiting on it waits forever
too. ``SlurmChecks`` (a Hydra callback beside hydra-submitit-launcher's Slurm launcher) first
compares the request with what ``sinfo`` says the partition offers (CPUs and memory per node, GPUs, time
limit, nodes) and refuses in one line naming both; then, while the jobs run, it reads their
pending reasons from ``squeue``: a reason that cannot clear without an administrator
(``NEVER_CLEARS``) is said in one line, those jobs are cancelled and the sweep ends; a job
pending longer than ``placement.pending_patience_min`` says why, once. Without ``sinfo``/``squeue``
(off-cluster) nothing is checked: submission fails or works as it did.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from posexp.errors import PosexpError

log = logging.getLogger("posexp")

# squeue's pending reasons that only an administrator (or a new request) can clear: the job
# asks for more than its partition, QOS or account allows, or names what does not exist.
NEVER_CLEARS = (
    "PartitionConfig",
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "QOSMaxCpuPerJobLimit",
    "QOSMaxGRESPerJob",
    "QOSMaxMemoryPerJob",
    "QOSMaxNodePerJobLimit",
    "QOSMaxWallDurationPerJobLimit",
    "AssocMaxCpuPerJobLimit",
    "AssocMaxMemPerJob",
    "AssocMaxNodesPerJobLimit",
    "AssocMaxWallDurationPerJobLimit",
)
POLL_S = 5.0  # how often squeue is asked while jobs wait


@dataclass(frozen=True)
class Partition:
    """What one partition offers, from ``sinfo``: its largest node and its limits."""

    name: str
    cpus: int  # per node
    memory_mb: int  # per node
    gpus: int  # per node (gres gpu:N)
    time_limit_min: float | None  # None: infinite
    nodes: int


def parse_sinfo(text: str) -> dict[str, Partition]:
    """Partitions from ``sinfo -h -o '%P|%c|%m|%G|%l|%D'`` lines (one per node group; the
    default partition's name ends in ``*``), the largest node of each, the default under ""."""
    found: dict[str, Partition] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6:
            continue
        name, cpus, memory, gres, limit, nodes = fields
        default, name = name.endswith("*"), name.rstrip("*")
        part = Partition(name, _int(cpus), _int(memory), _gpus(gres), _minutes(limit), _int(nodes))
        if name in found:  # node groups of one partition: the largest of each
            old = found[name]
            part = Partition(
                name,
                max(old.cpus, part.cpus),
                max(old.memory_mb, part.memory_mb),
                max(old.gpus, part.gpus),
                old.time_limit_min,
                old.nodes + part.nodes,
            )
        found[name] = part
        if default:
            found[""] = part
    if "" in found:
        found[""] = found[found[""].name]
    return found


def _int(text: str) -> int:
    return int("".join(ch for ch in text.split("(")[0] if ch.isdigit()) or 0)


def _gpus(gres: str) -> int:
    """GPUs per node in a gres string (``gpu:4``, ``gpu:a100:8(S:0-1)``; ``(null)``: 0)."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) > 1 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def _minutes(limit: str) -> float | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (or ``minutes``) in minutes; None: infinite."""
    if limit in ("infinite", "UNLIMITED", "n/a", ""):
        return None
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return int(days or 0) * 1440 + h * 60 + m + s / 60


def request_problem(params: dict[str, Any], part: Partition) -> str | None:
    """Why the launcher's request can never run on ``part`` (None: it can), in one line."""
    where = f"Slurm partition {part.name!r}"
    cpus = int(params.get("cpus_per_task") or 1) * int(params.get("tasks_per_node") or 1)
    if cpus > part.cpus:
        return (
            f"hydra.launcher.cpus_per_task={params.get('cpus_per_task')} (x tasks_per_node="
            f"{params.get('tasks_per_node') or 1}) cannot run on {where}: its largest node has "
            f"{part.cpus} CPUs; lower it, or pick another partition (hydra.launcher.partition=NAME)"
        )
    mem_gb = params.get("mem_gb")
    if mem_gb and float(mem_gb) * 1024 > part.memory_mb:
        return (
            f"hydra.launcher.mem_gb={mem_gb} cannot run on {where}: its largest node has "
            f"{part.memory_mb / 1024:.1f} GB; lower it, or pick another partition"
        )
    gpus = int(params.get("gpus_per_node") or 0)
    if gpus > part.gpus:
        return (
            f"hydra.launcher.gpus_per_node={gpus} cannot run on {where}: its nodes have "
            f"{part.gpus} GPUs; use hydra/launcher=submitit_slurm_cpu, or another partition"
        )
    timeout = params.get("timeout_min")
    if timeout and part.time_limit_min is not None and float(timeout) > part.time_limit_min:
        return (
            f"hydra.launcher.timeout_min={timeout} cannot run on {where}: its time limit is "
            f"{part.time_limit_min:g} min; lower it, or pick another partition"
        )
    nodes = int(params.get("nodes") or 1)
    if nodes > part.nodes:
        return (
            f"hydra.launcher.nodes={nodes} cannot run on {where}: it has {part.nodes} "
            f"node{'s' * (part.nodes != 1)}"
        )
    return None


def check_request(params: dict[str, Any], sinfo: str | None = None) -> None:
    """Refuse (``PosexpError``) a request the chosen partition can never satisfy; nothing is
    checked where ``sinfo`` cannot be asked."""
    if sinfo is None:
        sinfo = _ask(["sinfo", "-h", "-o", "%P|%c|%m|%G|%l|%D"])
        if sinfo is None:
            return
    partitions = parse_sinfo(sinfo)
    name = params.get("partition") or ""
    if name not in partitions:
        known = sorted(p for p in partitions if p)
        shown = f"{name!r}" if name else "(the default)"
        raise PosexpError(
            f"Slurm partition {shown} does not exist here; partitions: {', '.join(known)} "
            f"(hydra.launcher.partition=...)"
        )
    problem = request_problem(params, partitions[name])
    if problem:
        raise PosexpError(problem)


def _ask(command: list[str]) -> str | None:
    """A Slurm command's output, None where it is absent or fails."""
    if shutil.which(command[0]) is None:
        return None
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def parse_squeue(text: str) -> dict[str, tuple[str, str]]:
    """``squeue -h -o '%i|%T|%r'`` lines as {job id: (state, reason)}."""
    jobs = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) == 3:
            jobs[fields[0]] = (fields[1], fields[2])
    return jobs


class PendingWatch:
    """Reads the sweep's pending jobs from ``squeue`` until stopped (a thread): ends them on a
    reason that never clears, says once of each job pending past the patience why it waits."""

    def __init__(self, folder: Path, patience_min: float | None) -> None:
        self.folder, self.patience_s = folder, None if patience_min is None else patience_min * 60
        self.stopped = threading.Event()
        self.unsatisfiable: tuple[str, str] | None = None  # (job id, reason) that ended the sweep
        self.said: set[str] = set()
        self.started = time.monotonic()

    def job_ids(self) -> list[str]:
        """The sweep's job arrays, by the folders submitit makes (``.submitit/<id>_<task>``)."""
        names = [p.name for p in self.folder.glob("*") if p.is_dir() and p.name[:1].isdigit()]
        return sorted({n.split("_")[0] for n in names})

    def check(self, states: dict[str, tuple[str, str]]) -> None:
        """One look at the jobs' states (``parse_squeue``'s)."""
        waited = time.monotonic() - self.started
        stuck = [(j, r) for j, (s, r) in states.items() if s == "PENDING" and r in NEVER_CLEARS]
        if stuck and self.unsatisfiable is None:
            self.unsatisfiable = stuck[0]
            _ask(["scancel", *self.job_ids()])  # the whole sweep: it cannot complete
            return
        for job, (state, reason) in states.items():
            late = self.patience_s is not None and waited > self.patience_s
            if state == "PENDING" and late and job not in self.said:
                self.said.add(job)
                log.warning(
                    "Slurm job %s has been pending for %.0f min (reason %s); still waiting",
                    job,
                    waited / 60,
                    reason,
                )

    def run(self) -> None:
        """Poll until ``stopped`` is set."""
        while not self.stopped.wait(POLL_S):
            ids = self.job_ids()
            # -r: one line per array task (32_0), as scancel and submitit name them.
            text = (
                _ask(["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(ids)]) if ids else None
            )
            if text:
                self.check(parse_squeue(text))


SLURM_TARGET = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
# The sweep's watch, read by the CLI when a cancelled job ends the sweep (its one line).
WATCH: PendingWatch | None = None


class SlurmChecks(Callback):
    """Hydra callback (configs/train.yaml): with the Slurm launcher, the request is checked
    before anything is submitted and the jobs' pending reasons are watched until the sweep ends
    (Hydra runs launchers only from its own plugin package, so this hooks in beside it)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before any job is submitted: start the watch. (Hydra turns a callback's exception
        into a warning, so the request itself is checked by the CLI: ``launcher_params``.)"""
        global WATCH
        launcher = config.hydra.launcher
        if launcher.get("_target_") != SLURM_TARGET:
            return
        folder = Path(str(launcher.submitit_folder)).parent  # <sweep>/.submitit
        patience = (config.get("placement") or {}).get("pending_patience_min", 10.0)
        WATCH = PendingWatch(folder, patience)
        threading.Thread(target=WATCH.run, name="posexp-pending", daemon=True).start()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The sweep returned: the watch ends."""
        if WATCH is not None:
            WATCH.stopped.set()


def unsatisfiable_line() -> str | None:
    """The one line for a sweep the watch ended (None when it did not)."""
    if WATCH is None or WATCH.unsatisfiable is None:
        return None
    WATCH.stopped.set()
    job, reason = WATCH.unsatisfiable
    return (
        f"error: Slurm job {job} can never start (pending, reason {reason}: the request exceeds "
        f"what its partition, QOS or account allows); the sweep's jobs were cancelled; lower the "
        f"hydra.launcher request or pick another partition"
    )


# The launcher settings a request is made of (sbatch's), read from the composed config.
REQUEST_KEYS = (
    "partition",
    "cpus_per_task",
    "tasks_per_node",
    "mem_gb",
    "gpus_per_node",
    "timeout_min",
    "nodes",
)


def launcher_params(overrides: list[str], config_dir: str) -> dict[str, Any] | None:
    """The Slurm launcher's request for a ``-m`` command line (None: another launcher), from
    its ``hydra/launcher=`` and ``hydra.launcher.*`` overrides composed with posexp's configs."""
    from hydra import compose, initialize_config_dir

    keep = [
        a for a in overrides if a.lstrip("+").startswith(("hydra/launcher=", "hydra.launcher."))
    ]
    if not any(a.lstrip("+").startswith("hydra/launcher=submitit_slurm") for a in keep):
        return None
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose("train", overrides=keep, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    if launcher.get("_target_") != SLURM_TARGET:
        return None
    return {
        k: OmegaConf.select(launcher, k, throw_on_resolution_failure=False) for k in REQUEST_KEYS
    }
