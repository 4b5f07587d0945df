"""The head ablation's plan: how many jobs share the device at once, and how many steps each gets.

Input: a measurement (``Measurement``) of one training step per job kind (head count x task),
alone on the device: its wall time, the part of it the device is busy, and its peak memory;
plus the machine's memory and cores and the packing speed-ups measured earlier. Output: a
``Plan`` that runs every kind x seed within the time given, with a margin, printed as a table by
``render_plan``. Pure arithmetic, no torch: tests/scripts/test_gpu_plan.py checks it.

The model behind it (each piece an assumption, named in ``Assumptions`` and in the printout):

* The jobs run in W waves. Each task's jobs are spread evenly over the waves (``ceil(jobs / W)``
  at once), and every wave gets the same share of the usable time, so all seeds and rows of a
  task train the same number of steps, whichever wave they are in: a fair comparison.
* A wave's jobs fit in device memory together: measured peak + CUDA context per job, plus the
  beam search's cache for a translation job, within the device's memory less a reserve.
* Packed, every job steps at the pace of the slowest: the slowest kind's step alone (longer
  when the jobs outnumber the cores, as each job's host side needs a core), or the device's
  busy time summed over the wave's jobs (the device runs one job's kernels at a time), divided
  by the packing efficiency measured with N tiny jobs (6.93x for 8 on one H200: 0.87).
* A job spends ``startup_s`` before its first step (process, data, model, the step-0
  evaluation) and ``final_<task>_s`` after its last (evaluation, checkpoint, test BLEU).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

TASKS = ("lm", "mt")
TASK_TEXT = {"lm": "language model (PPL)", "mt": "translation (BLEU, PPL)"}


class PlanError(ValueError):
    """The jobs cannot fit as asked: memory, or too few steps in the time given."""


@dataclass(frozen=True)
class Kind:
    """One job kind's measured training step, alone on the device."""

    heads: int
    task: str
    step_s: float  # wall seconds per step
    gpu_s: float  # seconds of it the device is busy (0: no separate device, the CPU)
    mem_gib: float  # peak device memory of the step


@dataclass(frozen=True)
class Measurement:
    """What the plan is made from: the kinds' steps, the machine, the packing speed-ups."""

    device: str
    mem_gib: float  # device memory (the RAM on the CPU)
    cores: int
    kinds: tuple[Kind, ...]
    packing: dict[int, float] = field(default_factory=lambda: {1: 1.0})  # jobs -> x one job
    prep_s: float = 0.0  # spent before planning (data, tokenizer, this measurement)
    simulated: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        """Inverse of ``to_dict``; a missing or bad field is one line."""
        try:
            kinds = tuple(Kind(**k) for k in d["kinds"])
            m = cls(
                device=str(d["device"]),
                mem_gib=float(d["mem_gib"]),
                cores=int(d["cores"]),
                kinds=kinds,
                packing={int(k): float(v) for k, v in d.get("packing", {1: 1.0}).items()},
                prep_s=float(d.get("prep_s", 0.0)),
                simulated=bool(d.get("simulated", False)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(
                f"measurement: {type(e).__name__} {e}; expected device, mem_gib, cores and kinds "
                f"of heads, task, step_s, gpu_s, mem_gib"
            ) from None
        bad = [k for k in kinds if k.task not in TASKS or min(k.step_s, k.mem_gib) <= 0]
        if bad:
            raise PlanError(f"measurement: bad kind {bad[0]}; tasks: {', '.join(TASKS)}")
        return m

    def to_dict(self) -> dict[str, Any]:
        """JSON-able."""
        return {**dataclasses.asdict(self), "kinds": [dataclasses.asdict(k) for k in self.kinds]}


@dataclass(frozen=True)
class Assumptions:
    """What the plan assumes where nothing was measured; ``--assume KEY=VALUE`` changes one."""

    margin: float = 0.2  # share of the time left unplanned
    startup_s: float = 45.0  # per job, before its first step
    final_lm_s: float = 15.0  # per language-model job, after its last step
    final_mt_s: float = 60.0  # per translation job: test BLEU by beam search
    context_gib: float = 1.0  # per process: CUDA context, allocator slack
    decode_mt_gib: float = 1.5  # per translation job: the beam search's cache
    decode_lm_gib: float = 0.0
    mem_reserve: float = 0.1  # share of device memory never planned
    host_cores: int = 1  # cores kept for this script and the sweeps' parent processes
    min_steps: int = 100  # fewer per job is no ablation: the plan refuses
    max_steps: int = 6000  # the preset's length: never more

    def with_overrides(self, pairs: list[str]) -> Assumptions:
        """These assumptions with ``KEY=VALUE`` pairs applied (one-line error for a bad one)."""
        names = {f.name: f.type for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key not in names:
                raise PlanError(
                    f"--assume {pair!r}: no such assumption; allowed: {', '.join(names)}"
                )
            try:
                changes[key] = int(value) if names[key] == "int" else float(value)
            except ValueError:
                raise PlanError(f"--assume {pair!r}: {key} must be a number") from None
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Job:
    """One planned job: a kind, a seed, its wave and its planned start and end (seconds)."""

    heads: int
    task: str
    seed: int
    steps: int
    wave: int
    start_s: float
    end_s: float
    mem_gib: float


@dataclass(frozen=True)
class Plan:
    """The chosen schedule and the figures it was chosen by."""

    budget_s: float
    usable_s: float
    waves: int
    slots: dict[str, int]  # task -> jobs of it in flight at once
    steps: dict[str, int]  # task -> steps per job
    step_s_packed: float
    wave_s: float
    wave_mem_gib: float
    mem_usable_gib: float
    jobs: tuple[Job, ...]
    measurement: Measurement
    assumptions: Assumptions
    considered: tuple[str, ...]  # one line per number of waves tried

    @property
    def in_flight(self) -> int:
        """Jobs on the device at once."""
        return sum(self.slots.values())

    @property
    def end_s(self) -> float:
        """When the last job is planned to end."""
        return max(j.end_s for j in self.jobs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, with the derived figures."""
        d = dataclasses.asdict(self)
        d["measurement"] = self.measurement.to_dict()
        return {**d, "in_flight": self.in_flight, "end_s": self.end_s}


def efficiency(packing: dict[int, float], n: int) -> float:
    """Aggregate speed of ``n`` packed jobs over n x one job: the measured speed-ups, linear
    between measured counts, held at the last one's beyond it."""
    points = sorted((k, v / k) for k, v in {1: 1.0, **packing}.items() if k >= 1)
    if n >= points[-1][0]:
        return points[-1][1]
    for (n0, e0), (n1, e1) in zip(points, points[1:], strict=False):
        if n0 <= n <= n1:
            return e0 + (e1 - e0) * (n - n0) / (n1 - n0)
    return 1.0


def job_mem(kind: Kind, a: Assumptions) -> float:
    """GiB one job of ``kind`` holds on the device."""
    return kind.mem_gib + a.context_gib + getattr(a, f"decode_{kind.task}_gib")


def packed_step(kinds: list[Kind], counts: dict[str, int], m: Measurement, a: Assumptions) -> float:
    """Seconds per step of every job when ``counts[task]`` jobs of each task share the device."""
    n = sum(counts.values())
    cores = max(1, m.cores - a.host_cores)
    host = max(k.step_s for k in kinds) * max(1.0, n / cores)
    device = 0.0
    for task, count in counts.items():  # the device's busy time, a task's kinds on average
        own = [k.gpu_s for k in kinds if k.task == task]
        device += count * sum(own) / len(own) if own else 0.0
    return max(host, device) / efficiency(m.packing, n)


def plan(
    m: Measurement, budget_s: float, heads: list[int], seeds: list[int], a: Assumptions
) -> Plan:
    """The plan with the most steps for the task that gets the fewest (ties: fewer waves)."""
    kinds = {(k.heads, k.task): k for k in m.kinds}
    tasks = [t for t in TASKS if any(k.task == t for k in m.kinds)]
    missing = [(h, t) for h in heads for t in tasks if (h, t) not in kinds]
    if missing or not tasks or not seeds:
        raise PlanError(
            f"measurement lacks heads={missing[0][0]} task={missing[0][1]}"
            if missing
            else "nothing to plan: no task measured, or no seed"
        )
    used = [kinds[h, t] for h in heads for t in tasks]
    per_task = {t: len(heads) * len(seeds) for t in tasks}
    usable = budget_s * (1 - a.margin)
    mem_usable = m.mem_gib * (1 - a.mem_reserve)
    best: Plan | None = None
    considered = []
    for waves in range(1, max(per_task.values()) + 1):
        slots = {t: math.ceil(n / waves) for t, n in per_task.items()}
        if any(math.ceil(per_task[t] / slots[t]) != waves for t in tasks):
            continue  # the same slots with fewer waves: already tried
        mem = sum(slots[t] * max(job_mem(kinds[h, t], a) for h in heads) for t in tasks)
        step = packed_step(used, slots, m, a)
        wave_s = usable / waves
        steps = {
            t: min(a.max_steps, int((wave_s - a.startup_s - getattr(a, f"final_{t}_s")) / step))
            for t in tasks
        }
        line = (
            f"{waves} wave(s) of {sum(slots.values())}: {mem:.0f} of {mem_usable:.0f} GiB, "
            f"{step:.3f} s a step packed, "
            + ", ".join(f"{t} {max(s, 0)} steps" for t, s in steps.items())
        )
        if mem > mem_usable:
            considered.append(line + ": does not fit in memory")
            continue
        if min(steps.values()) < a.min_steps:
            considered.append(line + f": under {a.min_steps} steps")
            continue
        considered.append(line)
        jobs = _jobs(a, wave_s, step, slots, steps, heads, seeds, kinds)
        candidate = Plan(
            budget_s, usable, waves, slots, steps, step, wave_s, mem, mem_usable, jobs, m, a, ()
        )
        if best is None or min(steps.values()) > min(best.steps.values()):
            best = candidate
    if best is None:
        raise PlanError(f"no plan fits {usable:.0f} s: " + "; ".join(considered))
    return dataclasses.replace(best, considered=tuple(considered))


def _jobs(
    a: Assumptions,
    wave_s: float,
    step: float,
    slots: dict[str, int],
    steps: dict[str, int],
    heads: list[int],
    seeds: list[int],
    kinds: dict[tuple[int, str], Kind],
) -> tuple[Job, ...]:
    """The jobs of a plan, placed in their waves seed by seed: a wave holds every head count of
    its first seed, so a run cut short still has whole rows of the ablation."""
    jobs = []
    for task, n in slots.items():
        order = [(h, s) for s in seeds for h in heads]
        for i, (h, s) in enumerate(order):
            wave = i // n
            start = wave * wave_s
            end = start + a.startup_s + steps[task] * step + getattr(a, f"final_{task}_s")
            jobs.append(Job(h, task, s, steps[task], wave, start, end, job_mem(kinds[h, task], a)))
    return tuple(jobs)


def render_plan(p: Plan) -> str:
    """The plan as text: what it assumes, what limited it, and a table row per job kind."""
    m, a = p.measurement, p.assumptions
    heads = sorted({j.heads for j in p.jobs})
    seeds = sorted({j.seed for j in p.jobs})
    tasks = list(p.slots)
    lines = [
        f"Head ablation plan: {len(p.jobs)} jobs (heads {', '.join(map(str, heads))} x seeds "
        f"{', '.join(map(str, seeds))} x {', '.join(tasks)}) on {m.device}"
        f"{' (SIMULATED measurement)' if m.simulated else ''}, {m.mem_gib:.0f} GiB, "
        f"{m.cores} cores.",
        f"Time: {p.budget_s:.0f} s for the jobs, {a.margin:.0%} kept as margin: {p.usable_s:.0f} s "
        f"planned in {p.waves} wave(s) of {p.wave_s:.0f} s; the last job ends at "
        f"{p.end_s:.0f} s.",
        f"Packing: {p.in_flight} jobs at once ("
        + ", ".join(f"{t} {n}" for t, n in p.slots.items())
        + f"), {p.wave_mem_gib:.0f} of {p.mem_usable_gib:.0f} GiB usable "
        f"({a.mem_reserve:.0%} of device memory reserved); each job steps every "
        f"{p.step_s_packed:.3f} s packed (packing efficiency "
        f"{efficiency(m.packing, p.in_flight):.2f}: {_packing_text(m.packing)}).",
        "Steps per job: "
        + ", ".join(f"{t} {p.steps[t]}" for t in tasks)
        + f" (at most {a.max_steps}).",
        f"Assumed: {a.startup_s:.0f} s start-up a job, "
        + ", ".join(f"{getattr(a, f'final_{t}_s'):.0f} s after the last step ({t})" for t in tasks)
        + f", {a.context_gib:.1f} GiB context a job"
        + (f", {a.decode_mt_gib:.1f} GiB beam-search cache (mt)" if "mt" in tasks else "")
        + f", {a.host_cores} core(s) kept for the host.",
        "",
        "| task | heads | seeds (wave) | steps | step s alone | device-busy s | GiB a job "
        "| starts s | ends s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    kinds = {(k.heads, k.task): k for k in m.kinds}
    for task in tasks:
        for h in heads:
            mine = [j for j in p.jobs if j.task == task and j.heads == h]
            k = kinds[h, task]
            lines.append(
                f"| {task} | {h} | {', '.join(f'{j.seed} ({j.wave + 1})' for j in mine)} "
                f"| {mine[0].steps} | {k.step_s:.4f} | {k.gpu_s:.4f} | {mine[0].mem_gib:.1f} "
                f"| {min(j.start_s for j in mine):.0f} | {max(j.end_s for j in mine):.0f} |"
            )
    lines += ["", "Waves considered:", *(f"  {c}" for c in p.considered)]
    return "\n".join(lines) + "\n"


def _packing_text(packing: dict[int, float]) -> str:
    measured = [f"{n} jobs {x:.2f}x one" for n, x in sorted(packing.items()) if n > 1]
    return "measured " + ", ".join(measured) if measured else "no packing measured, so 1"


# ---- the simulated measurement of --dry-run without a GPU ---------------------------------------

# The packing part's figures on one H200 (docs/performance.md, 2026-11-30): 1, 4 and 8 tiny
# jobs at 1.15 M, 4.17 M and 7.97 M tokens/s together.
H200_PACKING = {1: 1.0, 4: 3.63, 8: 6.93}


def simulated_h200(heads: list[int]) -> Measurement:
    """A stand-in for the measurement on one H200, for planning without a GPU.

    Not measured: estimated from the shapes. experiment=head_ablation's step (d_model 512,
    6 layers, BPE 4096, 64 x 256 tokens, bf16, eager) is about 2.1 TFLOP; at a third of the
    bf16 matmul rate the H200 measured (680 TFLOP/s) that is 11 ms of device time, and eager
    PyTorch's host side (some 900 kernel launches) about 12 ms more. One head (d_k 512) is past
    the flash kernels' 256 and takes a slower one; 32 heads (d_k 16) use the device less well.
    Memory: the step's lower bound (posexp.runtime.budget) is 2.7 GiB; 4 GiB allocated with
    the caching allocator's slack. The first run on a GPU replaces all of this.
    """
    busy = {1: 0.016, 2: 0.013, 4: 0.011, 8: 0.011, 16: 0.0115, 32: 0.013}
    mem = {1: 4.5, 32: 4.5}
    kinds = tuple(
        Kind(h, t, busy.get(h, 0.013) + 0.012, busy.get(h, 0.013), mem.get(h, 4.0))
        for t in TASKS
        for h in heads
    )
    return Measurement(
        device="NVIDIA H200",
        mem_gib=139.8,
        cores=16,
        kinds=kinds,
        packing=dict(H200_PACKING),
        prep_s=60.0,
        simulated=True,
    )
