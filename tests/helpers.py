"""Running the real `posexp` command: through its entry point in this process, or as a new one."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

# Tiny, fast settings shared by CLI tests (seconds per run on 2 cores).
TINY = [
    "model=tiny",
    "heads=2",
    "train.max_steps=6",
    "train.seq_len=32",
    "train.batch_size=4",
    "train.eval_interval=3",
    "train.eval_tokens=512",
    "train.log_interval=1",
    "train.checkpoint_interval=3",
    "train.warmup_steps=2",
    # fp32 everywhere: `auto` takes bf16 on CPUs whose bf16 matmuls are faster, and a test's
    # numbers (and the FlexAttention kernels compiled for them) should not depend on the CPU;
    # nor should the linear layers' kernel (tests/kernels/test_onednn_linear.py trains on oneDNN).
    "train.precision=fp32",
    "train.linear=torch",
    "device=cpu",
]


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """The module ``scripts.<name>`` (scripts/ is a package: the root is on pytest's path)."""
    return importlib.import_module(f"scripts.{name}")


def posexp_env(cache: Path) -> dict[str, str]:
    """Environment for a CLI subprocess: shared token cache, offline hub, 1 thread each."""
    return {**os.environ, "POSEXP_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def checked(proc: subprocess.CompletedProcess, check: bool) -> subprocess.CompletedProcess:
    """``proc``, or the test failed with its stderr when ``check`` and it exited non-zero."""
    if check and proc.returncode != 0:
        raise AssertionError(
            f"posexp {' '.join(proc.args[1:])} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return proc


def posexp_command(
    cwd: Path, cache: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess:
    """Run `python -m posexp ARGS` in ``cwd`` (a new process); fail the test if it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "posexp", *args],
        cwd=cwd,
        env=posexp_env(cache),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return checked(
        subprocess.CompletedProcess(["posexp", *args], proc.returncode, proc.stdout, proc.stderr),
        check,
    )


def posexp(cwd: Path, cache: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`posexp ARGS` through the command's own entry point (``posexp.cli.main``) in this process:
    the same code, exit status and output as ``posexp``, without a torch start-up per call. For
    paths that end in this process; signals, a full disk and Slurm need ``posexp_command``."""
    import io
    import logging
    from unittest import mock

    import torch
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from posexp.cli import main

    threads = torch.get_num_threads()
    loggers = [logging.getLogger(), logging.getLogger("posexp")]
    saved_logging = [(lg, lg.handlers[:], lg.level) for lg in loggers]
    out, err, code = io.StringIO(), io.StringIO(), 0
    env = {"POSEXP_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    try:  # the whole environment, cwd and argv come back as they were
        with (
            mock.patch.dict(os.environ, env),
            contextlib.chdir(cwd),
            mock.patch.object(sys, "argv", ["posexp", *args]),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        torch.set_num_threads(threads)
        for lg, handlers, level in saved_logging:  # Hydra's job logging, closed (its train.log)
            for h in lg.handlers:
                if h not in handlers:
                    h.close()
            lg.handlers[:] = handlers
            lg.setLevel(level)
        GlobalHydra.instance().clear()
        # A job's Hydra config outlives it: left set, a later run_training in this process
        # would place itself as a job of that sweep (its launcher's threads).
        HydraConfig.instance().cfg = None
    proc = subprocess.CompletedProcess(["posexp", *args], code, out.getvalue(), err.getvalue())
    return checked(proc, check)


def posexp_in_own_group(
    cwd: Path, cache: Path, script: str, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``python -c SCRIPT ARGS`` (a posexp command with a stop patched in) as the leader of a
    process group of its own, which it may signal whole (as Slurm signals a job). It returns
    once every process holding its output has ended (its workers inherit it), so a worker left
    behind fails the test (at ``timeout``); whatever is left of the group is then killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=posexp_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# A second process that holds a dir's writer lock until its stdin closes (a pipe: no sleeps).
HOLD_LOCK = (
    "import sys; from posexp.store import runlock; runlock.lock(sys.argv[1]); "
    "print('locked', flush=True); sys.stdin.read()"
)


@contextlib.contextmanager
def lock_held_elsewhere(run_dir: Path) -> Iterator[subprocess.Popen]:
    """Another process writing ``run_dir`` (holding its lock) for the ``with`` body."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below ``folder``: mtime and bytes, to show that nothing was written."""
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def run_dirs(cwd: Path) -> list[Path]:
    """Run dirs created under ``cwd/outputs/runs``, oldest first."""
    root = cwd / "outputs" / "runs"
    return sorted(root.iterdir(), key=lambda p: p.stat().st_mtime) if root.exists() else []


def run_config(*overrides: str):
    """The typed RunConfig of ``train.yaml`` composed with ``overrides``, in-process."""
    from hydra import compose, initialize_config_dir

    from posexp.config import from_composed
    from posexp.config.paths import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return from_composed(compose("train", list(overrides)))


def weights_sha256(run_dir: Path) -> str:
    """sha256 over a run's saved weights (names and bytes, sorted): equal means bit-identical."""
    import hashlib

    import torch
    from safetensors.torch import load_file

    weights = load_file(str(run_dir / "checkpoint" / "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(
            name.encode() + weights[name].contiguous().view(torch.uint8).numpy().tobytes()
        )
    return digest.hexdigest()


class Killed(Exception):
    """Raised in place of a kill, right after a checkpoint (``train_killed_halfway``)."""


def train_killed_halfway(cfg, run_dir: Path, monkeypatch) -> None:
    """Train ``cfg`` into ``run_dir`` and stop it right after its middle checkpoint, as a kill
    would (the run dir is left as it was then)."""
    import pytest

    from posexp.commands import train as train_module
    from posexp.commands.train import run_training

    save = train_module.Trainer.save

    def save_then_stop(self):
        save(self)
        if self.step == cfg.train.max_steps // 2:
            raise Killed

    monkeypatch.setattr(train_module.Trainer, "save", save_then_stop)
    with pytest.raises(Killed):
        run_training(cfg, run_dir)
    monkeypatch.undo()


def bf16_step_matches_sdpa(monkeypatch, cfg: dict, x, kernel: str = "matmul") -> int:
    """One bf16 training step of ``GPT(ModelConfig(**cfg))`` on the causal kernel ``kernel`` and of
    the same weights on SDPA: the losses agree within 1% and every gradient within 5% of its
    largest (bf16 rounding). Returns how many times the matmul kernel ran."""
    import pytest
    import torch

    from posexp.kernels import matmul_attention
    from posexp.kernels.choice import KernelChoice
    from posexp.model import GPT, ModelConfig

    calls = []
    real = matmul_attention.causal_attention
    monkeypatch.setattr(
        matmul_attention, "causal_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    chosen = GPT(ModelConfig(**cfg), KernelChoice(causal=kernel))
    reference = GPT(ModelConfig(**cfg))
    reference.load_state_dict(chosen.state_dict())
    losses = []
    for model in (chosen, reference):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x, x)["loss"]
        loss.backward()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-2)
    for (name, a), (_, b) in zip(
        chosen.named_parameters(), reference.named_parameters(), strict=True
    ):
        assert (a.grad - b.grad).abs().max() <= 0.05 * b.grad.abs().max() + 1e-6, name
    return len(calls)


def record_view(label: str, **fields: object) -> dict[str, object]:
    """A record as the views read it (``Record.view``), for a hand-made fixture: ``method`` the
    display label, ``name``, ``baked`` and ``order`` those of the spec the label writes."""
    import dataclasses

    from posexp.extension.spec import parse_spec

    baked = label.startswith("baked:")
    spec = dataclasses.replace(parse_spec(label.removeprefix("baked:"), baked=False), baked=baked)
    return {"method": label, "name": spec.name, "baked": baked, "order": spec.sort_key, **fields}
