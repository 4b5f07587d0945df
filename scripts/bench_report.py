"""How long `posexp report` takes on a sweep, against the sweep's own training time.

    python -m scripts.bench_report                      # experiment=extrapolation, seeds 0,1,2
    python -m scripts.bench_report --seeds 0 --pes rope,alibi
    python -m scripts.bench_report --sweep outputs/sweeps/<time> --training-seconds 1560

Three timed commands, each a fresh process, run one after another on an otherwise idle machine:

1. ``posexp train -m experiment=extrapolation pe=... seed=...`` into ``<out>/sweep`` (skipped
   with ``--sweep``: an existing sweep, its training time given by ``--training-seconds``, else
   read from its jobs' provenance);
2. ``posexp report <sweep>``: the first report scores every cell the preset asks for
   (``extrapolate:`` in configs/experiment/extrapolation.yaml) in worker processes;
3. ``posexp report <sweep>`` again: every cell is measured, so nothing is scored.

Printed: each wall time, the first report as a fraction of the training time (the targets: the
first report <= 25% of it, the second <= 10 s), the cells the first report scored and their
summed scoring time (above the wall time when workers score side by side). A copy goes to
``<out>/bench_report.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from scripts.bench_common import machine_header

PRESET_PES = "sinusoidal,learned,none,rope,alibi,t5,kerple,p_rope,xpos,sandwich,cope"


def timed(args: list[str]) -> float:
    """Run `posexp ARGS` as its own process; its wall time in seconds (stop if it fails)."""
    print("$ posexp " + " ".join(args), flush=True)
    start = time.perf_counter()
    code = subprocess.run([sys.executable, "-m", "posexp", *args]).returncode
    seconds = time.perf_counter() - start
    if code:
        sys.exit(f"stopped: `posexp {' '.join(args)}` exited {code}")
    return seconds


def training_seconds(sweep: Path) -> float:
    """The jobs' training time as their provenance records it (the sum of their sessions)."""
    from datetime import datetime

    total = 0.0
    for path in sweep.rglob("provenance.json"):
        for session in json.loads(path.read_text()).get("sessions", []):
            if session.get("started") and session.get("ended"):
                ended = datetime.fromisoformat(session["ended"])
                total += (ended - datetime.fromisoformat(session["started"])).total_seconds()
    return total


def scored(sweep: Path) -> tuple[int, float]:
    """(cells, their summed scoring seconds) of every record under ``sweep``."""
    cells, seconds = 0, 0.0
    for path in sweep.rglob("eval/extrapolate.json"):
        for r in json.loads(path.read_text()):
            cells += 1
            seconds += float(r.get("seconds") or 0.0)
    return cells, seconds


def main() -> None:
    """Parse options, run the three commands, print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="default outputs/bench_report/<time>")
    p.add_argument(
        "--pes", default=PRESET_PES, help="the encodings swept (the preset's by default)"
    )
    p.add_argument("--seeds", default="0,1,2", help="the seeds swept")
    p.add_argument("--sweep", type=Path, default=None, help="report on this sweep (no training)")
    p.add_argument("--training-seconds", type=float, default=None, help="its training time")
    a = p.parse_args()
    out = a.out or Path("outputs/bench_report") / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    print(machine_header(), flush=True)
    if a.sweep is None:
        sweep = out / "sweep"
        train = timed(
            [
                "train",
                "-m",
                "experiment=extrapolation",
                f"pe={a.pes}",
                f"seed={a.seeds}",
                f"hydra.sweep.dir={sweep}",
            ]
        )
    else:
        sweep = a.sweep
        train = a.training_seconds or training_seconds(sweep)
    first = timed(["report", str(sweep)])
    cells, cell_seconds = scored(sweep)
    second = timed(["report", str(sweep)])
    figures = {
        "sweep": str(sweep),
        "jobs": sum(1 for _ in sweep.rglob("checkpoint/meta.json")),
        "training_s": round(train, 1),
        "first_report_s": round(first, 1),
        "first_report_over_training": round(first / train, 3),
        "second_report_s": round(second, 1),
        "cells_scored": cells,
        "cell_seconds_summed": round(cell_seconds, 1),
    }
    for key, value in figures.items():
        print(f"{key:>28}: {value}")
    print(
        f"first report {first / train:.1%} of the training time (target <= 25%); "
        f"second {second:.1f} s (target <= 10 s); {cells} cells scored",
        flush=True,
    )
    (out / "bench_report.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
