"""Slurm sweeps that never wait on a request no node can satisfy.

Slurm accepts a job asking for more CPUs per node than any node of the partition has, then
keeps it pending forever (reason ``PartitionConfig``), and a sweep waiting on it waits forever
too. Before anything is submitted, the request (CPUs, memory, GPUs per node, time limit, nodes)
is compared with what ``sinfo`` says the partition offers and refused in one line naming both
(``check_request``: the CLI for ``hydra/launcher=`` on the command line, ``SlurmChecks`` for a
launcher chosen in a config). While the jobs wait, ``PendingWatch`` reads their pending reasons
from ``squeue``: a reason that cannot clear without an administrator changing the cluster's
configuration (``never_clears``) is said in one line, the sweep's jobs are cancelled and the
sweep ends; a job pending longer than ``placement.pending_patience_min`` says why, once.
Without ``sinfo``/``squeue`` (off-cluster) nothing is checked: submission fails or works as
it did. A launcher subclass would be the natural home, but Hydra instantiates launchers only
from the ``hydra_plugins`` package, so this is a Hydra callback beside the plugin's launcher.
"""

from __future__ import annotations

import _thread
import logging
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from posexp.errors import Abort, PosexpError

log = logging.getLogger("posexp")

# squeue's pending reasons (squeue(1) "JOB REASON CODES", slurm.schedmd.com/job_reason_codes)
# that only a new request or an administrator changing the configuration clears: the job asks
# for more than the partition's nodes or limits, or names an account/QOS/feature it may not use.
# Not here, as they clear by themselves or when a routine admin action ends: Resources,
# Priority, JobArrayTaskLimit, aggregate limits (QOSGrp*, AssocGrp*, *PerUser*, *PerAccount*),
# ReqNodeNotAvail (nodes busy, reserved, or down until they return), PartitionNodeLimit (also
# given while required nodes are DOWN or DRAINED; a node count over the partition's limit is
# refused before submission), PartitionDown/PartitionInactive (maintenance), JobHeld*.
NEVER_CLEARS = frozenset(
    {
        "PartitionConfig",
        "PartitionTimeLimit",
        "BadConstraints",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",
        "QOSNotAllowed",
        "DependencyNeverSatisfied",
    }
)
POLL_S = 5.0  # how often squeue is asked while jobs wait
SINFO = ["sinfo", "-h", "-e", "-o", "%P|%c|%m|%G|%l|%D|%s"]  # -e: no "64+" minima of node groups
ADVICE = {  # what to change, by reason (prefix)
    "PartitionConfig": "the CPUs, memory, GPUs or nodes asked exceed its partition's nodes",
    "PartitionTimeLimit": "lower hydra.launcher.timeout_min to the partition's MaxTime",
    "BadConstraints": "change hydra.launcher.constraint",
    "InvalidAccount": "set hydra.launcher.account to an account of yours",
    "AccountNotAllowed": "set hydra.launcher.account to an account the partition allows",
    "InvalidQOS": "set hydra.launcher.qos to a QOS of yours",
    "QOSNotAllowed": "set hydra.launcher.qos to a QOS the partition allows",
    "QOS": "the request exceeds a per-job limit of its QOS: lower it or pick another qos",
    "Assoc": "the request exceeds a per-job limit of its account: lower it or use another account",
    "DependencyNeverSatisfied": "a job it depends on failed: drop the dependency",
}


def never_clears(reason: str) -> bool:
    """True for a pending reason only a new request (or an admin's new configuration) clears."""
    if reason in NEVER_CLEARS:
        return True
    # QOSMax*/AssocMax* per-job and per-node limits weigh this one job's request, so they
    # never clear (QOSMax*PerUser and the like count other jobs too, and do); QOSMin*: too small.
    per_job = ("PerJob" in reason or "PerNode" in reason) and "PerUser" not in reason
    return reason.startswith(("QOSMin",)) or (reason.startswith(("QOSMax", "AssocMax")) and per_job)


@dataclass(frozen=True)
class Partition:
    """What one partition offers, from ``sinfo``: its largest node and its limits."""

    name: str
    cpus: int  # per node
    memory_mb: int  # per node
    gpus: int  # per node (gres gpu:N)
    time_limit_min: float | None  # None: infinite
    nodes: int
    max_job_nodes: int | None = None  # nodes one job may ask (None: no limit)


def parse_sinfo(text: str) -> dict[str, Partition]:
    """Partitions from ``SINFO``'s lines (one per node group; the default partition's name
    ends in ``*``), the largest node of each, the default also under ""."""
    found: dict[str, Partition] = {}
    default = None
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7:
            continue
        name, cpus, memory, gres, limit, nodes, size = fields
        if name.endswith("*"):
            default = name = name.rstrip("*")
        part = Partition(
            name, _int(cpus), _int(memory), _gpus(gres), _minutes(limit), _int(nodes), _size(size)
        )
        old = found.get(name)
        if old:  # node groups of one partition: the largest of each, all the nodes
            part = Partition(
                name,
                max(old.cpus, part.cpus),
                max(old.memory_mb, part.memory_mb),
                max(old.gpus, part.gpus),
                old.time_limit_min,
                old.nodes + part.nodes,
                old.max_job_nodes,
            )
        found[name] = part
    if default:
        found[""] = found[default]
    return found


def _int(text: str) -> int:
    return int("".join(ch for ch in text.split("(")[0] if ch.isdigit()) or 0)


def _gpus(gres: str | None) -> int:
    """GPUs per node in a gres string (``gpu:4``, ``gpu:a100:8(S:0-1)``; ``(null)``: 0)."""
    total = 0
    for item in (gres or "").split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu":  # a bare "gpu" asks one
            total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total


def _minutes(limit: str) -> float | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (or ``minutes``) in minutes; None: infinite."""
    if limit.lower() in ("infinite", "unlimited", "n/a", ""):
        return None
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    h, m, s = ([0] * (3 - len(parts)) + parts) if len(parts) > 1 else (0, parts[0], 0)
    return int(days or 0) * 1440 + h * 60 + m + s / 60


def _size(size: str) -> int | None:
    """The most nodes of sinfo's job size range (``1-infinite``, ``1-4``); None: no limit."""
    top = size.rpartition("-")[2]
    return int(top) if top.isdigit() else None


def problems(params: dict[str, Any], part: Partition) -> list[tuple[str, str]]:
    """What of the request ``part`` cannot give: (setting=value, what the partition has)."""
    tasks = int(params.get("tasks_per_node") or 1)
    gpus = max(
        int(params.get("gpus_per_node") or 0),
        _gpus(params.get("gres")),
        int(params.get("gpus_per_task") or 0) * tasks,
    )
    cpus = max(
        int(params.get("cpus_per_task") or 1) * tasks, int(params.get("cpus_per_gpu") or 0) * gpus
    )
    mem_gb, timeout = params.get("mem_gb"), params.get("timeout_min")
    nodes = int(params.get("nodes") or 1)
    most_nodes = min(part.nodes, part.max_job_nodes or part.nodes)
    found = []
    if cpus > part.cpus:
        key = (
            "cpus_per_task"
            if cpus == int(params.get("cpus_per_task") or 1) * tasks
            else "cpus_per_gpu"
        )
        times = f" (x tasks_per_node={tasks})" if key == "cpus_per_task" and tasks > 1 else ""
        found.append((f"{key}={params.get(key)}{times}", f"{part.cpus} CPUs"))
    if mem_gb and float(mem_gb) * 1024 > part.memory_mb:
        found.append((f"mem_gb={mem_gb}", f"{part.memory_mb / 1024:.1f} GB"))
    if gpus > part.gpus:
        key = next(k for k in ("gpus_per_node", "gres", "gpus_per_task") if params.get(k))
        found.append((f"{key}={params.get(key)}", f"{part.gpus} GPUs"))
    if timeout and part.time_limit_min is not None and float(timeout) > part.time_limit_min:
        found.append((f"timeout_min={timeout}", f"a time limit of {part.time_limit_min:g} min"))
    if nodes > most_nodes:
        found.append((f"nodes={nodes}", f"{most_nodes} node{'s' * (most_nodes != 1)} per job"))
    return found


def request_problem(params: dict[str, Any], partitions: dict[str, Partition]) -> str | None:
    """Why the launcher's request can never run on its partition (None: it can), in one line."""
    name = params.get("partition") or ""
    wanted = [p.strip() for p in name.split(",")] if name else [""]  # Slurm takes a list
    unknown = [p for p in wanted if p not in partitions]
    if unknown:
        shown = repr(unknown[0]) if unknown[0] else "(no default partition)"
        known = ", ".join(sorted(p for p in partitions if p))
        return f"Slurm partition {shown} does not exist here; partitions: {known} (hydra.launcher.partition=NAME)"
    found = {p: problems(params, partitions[p]) for p in wanted}
    if not all(found.values()):
        return None  # it fits one of them
    part = partitions[wanted[0]]
    settings, has = zip(*found[wanted[0]], strict=True)
    fits = sorted(p for p, v in partitions.items() if p and not problems(params, v))
    where = (
        f"hydra.launcher.partition={' or '.join(fits)} fits" if fits else "no partition here fits"
    )
    gpu = (
        " (hydra/launcher=submitit_slurm_cpu asks no GPU)"
        if part.gpus == 0 and any(s.startswith(("gpus", "gres")) for s in settings)
        else ""
    )
    return (
        f"hydra.launcher.{_join(settings)} cannot run on Slurm partition {part.name!r}: its "
        f"largest node has {_join(has)}; lower {'them' if len(has) > 1 else 'it'}{gpu}, or pick "
        f"another partition ({where})"
    )


def _join(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def check_request(params: dict[str, Any], sinfo: str | None = None) -> None:
    """Refuse (``PosexpError``) a request the chosen partition can never satisfy; nothing is
    checked where ``sinfo`` cannot be asked."""
    sinfo = _ask(SINFO) if sinfo is None else sinfo
    problem = request_problem(params, parse_sinfo(sinfo)) if sinfo else None
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
    """``squeue -h -r -o '%i|%T|%r'`` lines as {job id: (state, reason)}."""
    jobs = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) == 3:
            jobs[fields[0]] = (fields[1], fields[2])
    return jobs


def advice(reason: str) -> str:
    """What to change for a pending reason that never clears."""
    key = next((k for k in ADVICE if reason.startswith(k)), "PartitionConfig")
    return ADVICE[key]


class PendingWatch:
    """Reads the sweep's pending jobs from ``squeue`` until stopped (a thread): ends the sweep on
    a reason that never clears, says once of each job pending past the patience why it waits."""

    def __init__(self, folder: Path, patience_min: float | None) -> None:
        self.folder, self.patience_s = folder, None if patience_min is None else patience_min * 60
        self.stopped = threading.Event()
        self.unsatisfiable: tuple[str, str] | None = None  # (job id, reason) that ended the sweep
        self.said: set[str] = set()
        self.started, self.started_at = time.monotonic(), time.time()

    def job_ids(self) -> list[str]:
        """This sweep's job arrays, by the folders submitit makes (``.submitit/<id>_<task>``);
        a rerun into the same sweep dir leaves older arrays' folders, untouched since."""
        names = [
            p.name
            for p in self.folder.glob("*")
            if p.is_dir() and p.name[:1].isdigit() and p.stat().st_mtime >= self.started_at - 1
        ]
        return sorted({n.split("_")[0] for n in names})

    def check(self, states: dict[str, tuple[str, str]]) -> str | None:
        """One look at the jobs' states (``parse_squeue``'s): the line said, if any."""
        stuck = [(j, r) for j, (s, r) in states.items() if s == "PENDING" and never_clears(r)]
        if stuck and self.unsatisfiable is None:
            self.unsatisfiable = stuck[0]
            _ask(["scancel", *self.job_ids()])  # the whole sweep: it cannot complete
            return self.line()
        waited = time.monotonic() - self.started
        if self.patience_s is None or waited < self.patience_s:
            return None
        late: dict[str, list[str]] = {}  # by reason: one line for a whole array waiting
        for job, (state, reason) in states.items():
            if state == "PENDING" and job not in self.said:
                self.said.add(job)
                late.setdefault(reason, []).append(job)
        lines = []
        for reason, jobs in late.items():
            shown = ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
            lines.append(
                f"Slurm job{'s' * (len(jobs) > 1)} {shown} ha{'ve' if len(jobs) > 1 else 's'} "
                f"been pending for {waited / 60:.0f} min (reason {reason}); still waiting"
            )
            log.warning("%s", lines[-1])
        return "\n".join(lines) or None

    def line(self) -> str | None:
        """The one line for a sweep this watch ended (None while it has not)."""
        if self.unsatisfiable is None:
            return None
        job, reason = self.unsatisfiable
        return (
            f"Slurm job {job} can never start (pending, reason {reason}): {advice(reason)}; "
            f"the sweep's jobs were cancelled"
        )

    def run(self) -> None:
        """Poll until ``stopped`` is set; once the sweep cannot complete, end the main thread's
        wait (submitit's, which without accounting never sees a cancelled job end)."""
        while not self.stopped.wait(POLL_S):
            ids = self.job_ids()
            # -r: one line per array task (32_0), as scancel and submitit name them.
            text = (
                _ask(["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(ids)]) if ids else None
            )
            if text and self.unsatisfiable is None:
                self.check(parse_squeue(text))
            if self.unsatisfiable is not None:  # again each poll: a raise inside a try may be lost
                _thread.interrupt_main(END_SIGNAL)


SLURM_TARGET = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
# interrupt_main() runs this signal's Python handler in the main thread; no signal is sent.
END_SIGNAL = signal.SIGUSR1
# The sweep's watch, read by the CLI when a cancelled job ends the sweep (its one line).
WATCH: PendingWatch | None = None


class SlurmChecks(Callback):
    """Hydra callback (configs/train.yaml): with the Slurm launcher, the request is checked
    before anything is submitted and the jobs' pending reasons are watched until the sweep
    ends (Hydra instantiates launchers only from hydra_plugins.*, so this sits beside it)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before any job is submitted: check the request, start the watch."""
        global WATCH
        launcher = config.hydra.launcher
        if launcher.get("_target_") != SLURM_TARGET:
            return
        try:  # the CLI checked a launcher given on the command line; this one came from a config
            check_request({k: launcher.get(k) for k in REQUEST_KEYS})
        except PosexpError as e:
            raise Abort(str(e)) from None  # Hydra turns a callback's Exception into a warning
        folder = Path(str(launcher.submitit_folder)).parent  # <sweep>/.submitit
        patience = (config.get("placement") or {}).get("pending_patience_min", 10.0)
        WATCH = PendingWatch(folder, patience)
        self.previous = signal.signal(END_SIGNAL, _end_sweep)
        threading.Thread(target=WATCH.run, name="posexp-pending", daemon=True).start()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The sweep returned: the watch ends."""
        if WATCH is not None:
            WATCH.stopped.set()
            signal.signal(END_SIGNAL, getattr(self, "previous", signal.SIG_DFL))


def _end_sweep(signum: int, frame: Any) -> None:
    """END_SIGNAL's handler: the watch's one line as the sweep's error (a real SIGUSR1 from
    elsewhere gets its default action)."""
    line = WATCH.line() if WATCH is not None else None
    if line is None:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        return
    WATCH.stopped.set()
    raise PosexpError(line)


def unsatisfiable_line() -> str | None:
    """The one line (``error: ...``) for a sweep the watch ended (None when it did not)."""
    line = WATCH.line() if WATCH is not None else None
    if line is None:
        return None
    WATCH.stopped.set()
    return f"error: {line}"


# The launcher settings a request is made of (sbatch's), read from the composed config.
REQUEST_KEYS = (
    "partition",
    "cpus_per_task",
    "tasks_per_node",
    "mem_gb",
    "gpus_per_node",
    "gres",
    "gpus_per_task",
    "cpus_per_gpu",
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
