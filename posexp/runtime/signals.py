"""A graceful stop on SIGTERM and the time-limit signal: finish the step, checkpoint, exit.

Slurm, Kubernetes and ``kill`` send SIGTERM first (Slurm at a job's time limit, after
``scancel``, on preemption), and submitit asks Slurm for SIGUSR2 shortly before the limit. A
training that dies on them loses every step since its last periodic checkpoint. Inside
``GracefulStop`` the signal only sets a flag; the training loop reads it after each step (under
torchrun at logging steps, where the ranks agree on it), writes a checkpoint at that step and raises ``StopRequested``. Whoever
listened to the signal before (submitit's handler, which requeues the job) then gets it; with
nobody, the process exits with 128 + the signal number (143 for SIGTERM, 140 for SIGUSR2).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

import torch

from posexp.runtime import distributed

log = logging.getLogger("posexp")

STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGUSR2") if hasattr(signal, name)
)


class StopRequested(BaseException):
    """Raised by the training loop after the checkpoint of the step a stop signal arrived in.

    A BaseException, like KeyboardInterrupt: no ``except Exception`` on the way up may record it
    as a failure."""

    def __init__(self, signum: int, step: int, previous: Any) -> None:
        super().__init__(f"{signal.Signals(signum).name} at step {step}")
        self.signum, self.step, self.previous = signum, step, previous

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process the signal ended."""
        return 128 + self.signum

    def forward(self) -> None:
        """Hand the signal to the handler that was there before (submitit requeues the job
        from it), then exit with ``exit_code`` unless that handler ended the process."""
        if callable(self.previous):
            self.previous(self.signum, None)
        raise SystemExit(self.exit_code)


class GracefulStop:
    """Context manager: stop signals set a flag instead of ending the process."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():  # handlers live there only
            for sig in STOP_SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            if distributed.is_main():  # every torchrun rank gets it; one line says so
                log.warning(
                    "received %s: stopping after this step, with a checkpoint",
                    signal.Signals(signum).name,
                )

    def requested(self, device: torch.device) -> int | None:
        """The stop signal, if one arrived on any rank (a collective under torchrun, so every
        rank stops after the same step)."""
        return distributed.global_max(self.signum or 0, device) or None

    def stop(self, signum: int, step: int) -> StopRequested:
        """The exception to raise for ``signum`` at ``step``."""
        return StopRequested(signum, step, self.previous.get(signum))
