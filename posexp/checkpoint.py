"""Checkpoints: weights as safetensors, training state as a torch file, written atomically.

Layout of ``<run>/checkpoint/``: ``model.safetensors`` (weights, tied tensors stored once),
``state.pt`` (optimizer, scheduler, RNG states, step) and ``meta.json`` (model config, step).
A new checkpoint is assembled in ``checkpoint.tmp`` and swapped in by renames, so a run killed
at any moment leaves either the old or the new checkpoint, never a mix.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from posexp.errors import PosexpError

CHECKPOINT = "checkpoint"


def rng_state() -> dict[str, Any]:
    """Every random generator training touches, as tensors and plain types only.

    So ``state.pt`` loads with ``torch.load(weights_only=True)``, which runs no code from the file.
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)],
        "python": [version, list(internal), gauss_next],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path, model: torch.nn.Module, meta: dict[str, Any], state: dict[str, Any] | None = None
) -> Path:
    """Write ``<run>/checkpoint`` atomically; ``state`` holds optimizer/scheduler/RNG if training."""
    run_dir = Path(run_dir)
    final, tmp, old = run_dir / CHECKPOINT, run_dir / f"{CHECKPOINT}.tmp", run_dir / f"{CHECKPOINT}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))
    if state is not None:
        torch.save(state, tmp / "state.pt")
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
    mode = 0o666 & ~_umask()
    for f in tmp.iterdir():
        os.chmod(f, mode)  # safetensors writes 0600; every file gets the usual mode
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def checkpoint_dir(run_dir: Path) -> Path:
    """The run's checkpoint folder, falling back to the previous one if a swap was interrupted."""
    run_dir = Path(run_dir)
    for name in (CHECKPOINT, f"{CHECKPOINT}.old"):
        if (run_dir / name / "meta.json").exists():
            return run_dir / name
    raise PosexpError(f"no checkpoint in {str(run_dir)!r} (expected {CHECKPOINT}/meta.json)")


def has_checkpoint(run_dir: Path) -> bool:
    """True when ``run_dir`` holds a checkpoint (the current one, or the previous after a cut swap)."""
    try:
        checkpoint_dir(run_dir)
    except PosexpError:
        return False
    return True


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The checkpoint's metadata (model config, step, ...)."""
    path = checkpoint_dir(run_dir) / "meta.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PosexpError(f"corrupt checkpoint {str(path)!r}: {e}") from None


def load_weights(run_dir: Path, model: torch.nn.Module) -> None:
    """Load the checkpoint's weights into ``model`` (strict)."""
    path = checkpoint_dir(run_dir) / "model.safetensors"
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except (OSError, SafetensorError, RuntimeError, ValueError) as e:
        raise PosexpError(f"corrupt checkpoint {str(path)!r}: {str(e).splitlines()[0]}") from None
    # The tied LM head is stored once, under the embedding's name.
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise PosexpError(
            f"checkpoint {str(path)!r} does not match the model: missing {missing}, unexpected {unexpected}"
        )


def load_state(run_dir: Path) -> dict[str, Any]:
    """The checkpoint's training state (optimizer, scheduler, RNG, step)."""
    path = checkpoint_dir(run_dir) / "state.pt"
    try:
        # weights_only: a checkpoint may come from someone else; unpickling it must run no code.
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001  any unreadable file is a corrupt checkpoint
        raise PosexpError(f"corrupt checkpoint {str(path)!r}: {str(e).splitlines()[0]}") from None
