"""Checkpoints: weights as safetensors, training state as a torch file, written atomically.

Layout of ``<run>/checkpoint/``: ``model.safetensors`` (weights, tied tensors stored once),
``state.pt`` (optimizer, scheduler, RNG states, step) and ``meta.json`` (model config, step).
A new checkpoint is assembled in ``checkpoint.tmp`` and swapped in by ``files.staged_dir``, so a
run killed at any moment leaves either the old or the new checkpoint, never a mix, and a save
after a swap that was cut first puts the previous checkpoint back.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from posexp.errors import PosexpError, UnreadableFile, first_line
from posexp.store.files import disk_full, read_json, staged_dir

CHECKPOINT = "checkpoint"


def rng_state() -> dict[str, Any]:
    """Every random generator training touches, as tensors and plain types only.

    So ``state.pt`` loads with ``torch.load(weights_only=True)``, which runs no code from the file.
    """
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [
            kind,
            torch.from_numpy(keys.astype(np.int64)),
            int(pos),
            int(has_gauss),
            float(gauss),
        ],
        "python": [version, list(internal), gauss_next],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state(
        (kind, np.asarray(keys, dtype=np.int64).astype(np.uint32), pos, has_gauss, gauss)
    )
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path, model: torch.nn.Module, meta: dict[str, Any], state: dict[str, Any] | None = None
) -> Path:
    """Write ``<run>/checkpoint`` atomically; ``state`` holds optimizer/scheduler/RNG if training."""
    final = Path(run_dir) / CHECKPOINT
    try:
        with staged_dir(final) as tmp:
            save_model(model, str(tmp / "model.safetensors"))
            if state is not None:
                torch.save(state, tmp / "state.pt")
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
            mode = 0o666 & ~_umask()
            for f in tmp.iterdir():
                os.chmod(f, mode)  # safetensors writes 0600; every file gets the usual mode
    except Exception as e:
        if not disk_full(e):
            raise
        then = (
            "the previous checkpoint is kept); free some space, then resume"
            if has_checkpoint(run_dir)
            else "no checkpoint yet); free some space, then rerun"
        )
        raise PosexpError(f"no space left on device writing {str(final)!r} ({then}") from None
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
        meta = read_json(path, meta_problem)
    except UnreadableFile as e:
        raise PosexpError(f"corrupt checkpoint {str(path)!r}: {e.reason}") from None
    if meta is None:  # removed between the two looks: a checkpoint swap of a live run
        raise PosexpError(f"no checkpoint in {str(run_dir)!r} (its meta.json went away)")
    return meta


def meta_problem(meta: Any) -> str | None:
    """What is wrong with a loaded ``meta.json`` (None: nothing): a step and mappings."""
    if not isinstance(meta, dict):
        return f"expected a mapping, found {type(meta).__name__}"
    step = meta.get("step")
    if "step" in meta and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        return f"step must be an integer >= 0, found {step!r}"
    for key in ("model", "config"):
        if key in meta and not isinstance(meta[key], dict):
            return f"{key} must be a mapping, found {type(meta[key]).__name__}"
    return None


def load_weights(run_dir: Path, model: torch.nn.Module) -> None:
    """Load the checkpoint's weights into ``model`` (strict)."""
    path = checkpoint_dir(run_dir) / "model.safetensors"
    try:
        with safe_open(str(path), framework="pt") as f:
            saved = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118
    except (OSError, SafetensorError, RuntimeError, ValueError) as e:
        raise PosexpError(f"corrupt checkpoint {str(path)!r}: {first_line(e)}") from None
    # A readable file whose tensors have other shapes holds another network, not a corrupt file:
    # name the first tensor that differs (torch's own message is cut after its first line).
    wanted = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    differ = [key for key in saved if key in wanted and saved[key] != wanted[key]]
    if differ:
        key, more = differ[0], f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
        raise PosexpError(
            f"checkpoint {str(path)!r} does not match the model: size mismatch for {key}: "
            f"checkpoint {saved[key]}, model {wanted[key]}{more}"
        )
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except (OSError, SafetensorError, RuntimeError, ValueError) as e:
        raise PosexpError(f"corrupt checkpoint {str(path)!r}: {first_line(e)}") from None
    # The tied LM head is stored once, under the embedding's name.
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise PosexpError(
            f"checkpoint {str(path)!r} does not match the model: missing {missing}, unexpected {unexpected}"
        )


def load_state(run_dir: Path, params: list[torch.Tensor] | None = None) -> dict[str, Any]:
    """The checkpoint's training state (optimizer, scheduler, RNG, step), checked against its
    ``meta.json`` and, given the model's ``params``, against their shapes."""
    path = checkpoint_dir(run_dir) / "state.pt"
    try:
        # weights_only: a checkpoint may come from someone else; unpickling it must run no code.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        # torch's first line suggests weights_only=False (running the file's code): keep the cause.
        cause = re.search(r"Unpickler error:\s*(\S[^\n]*)", str(e))
        detail = cause.group(1).strip() if cause else first_line(e)
        raise PosexpError(
            f"corrupt checkpoint {str(path)!r}: not a training state posexp can read ({detail})"
        ) from None
    except Exception as e:  # noqa: BLE001  any unreadable file is a corrupt checkpoint
        raise PosexpError(f"corrupt checkpoint {str(path)!r}: {first_line(e)}") from None
    problem = state_problem(state, read_meta(run_dir).get("step"), params)
    if problem:
        raise PosexpError(
            f"corrupt checkpoint {str(path)!r}: {problem}; it cannot resume "
            f"(start a new run, or finetune from its weights)"
        )
    return state


STATE_KEYS = ("optimizer", "scheduler", "rng", "step", "best_val", "last_val")


def state_problem(state: Any, step: Any, params: list[torch.Tensor] | None) -> str | None:
    """What is wrong with a loaded ``state.pt`` (None: nothing), so a damaged one is refused
    before it silently restarts training from step 0 or fails deep inside the optimizer."""
    if not isinstance(state, dict):
        return f"expected a mapping of {', '.join(STATE_KEYS)}, found {type(state).__name__}"
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(state["step"], int) or isinstance(state["step"], bool) or state["step"] < 0:
        return f"step must be an integer >= 0, found {state['step']!r}"
    if state["step"] != step:
        return f"state.pt is at step {state['step']} but meta.json at step {step!r}"
    for key in ("best_val", "last_val"):
        if not isinstance(state[key], (int, float)) or isinstance(state[key], bool):
            return f"{key} must be a number, found {state[key]!r}"
    rng = state["rng"]
    if not (
        isinstance(rng, dict)
        and isinstance(rng.get("torch"), torch.Tensor)
        and isinstance(rng.get("numpy"), list)
        and len(rng["numpy"]) == 5
        and isinstance(rng.get("python"), list)
        and len(rng["python"]) == 3
    ):
        return "rng must hold the torch, numpy and python generator states"
    if not isinstance(state["scheduler"], dict) or state["scheduler"].get("last_epoch") != step:
        return f"the scheduler's position does not match step {step}"
    return optimizer_problem(state["optimizer"], params)


def optimizer_problem(optimizer: Any, params: list[torch.Tensor] | None) -> str | None:
    """What is wrong with an AdamW state dict for ``params`` (None: nothing)."""
    if not (
        isinstance(optimizer, dict)
        and isinstance(optimizer.get("state"), dict)
        and isinstance(optimizer.get("param_groups"), list)
        and all(
            isinstance(g, dict) and isinstance(g.get("params"), list)
            for g in optimizer["param_groups"]
        )
    ):
        return "the optimizer state is not an optimizer's state dict"
    if params is None:
        return None
    ids = [i for g in optimizer["param_groups"] for i in g["params"]]
    if len(ids) != len(params):
        return f"the optimizer state covers {len(ids)} parameters, the model has {len(params)}"
    by_id = dict(zip(ids, params, strict=True))
    for i, moments in optimizer["state"].items():
        if i not in by_id or not isinstance(moments, dict):
            return f"the optimizer state names an unknown parameter {i!r}"
        for name in ("exp_avg", "exp_avg_sq"):
            value = moments.get(name)
            if not isinstance(value, torch.Tensor) or value.shape != by_id[i].shape:
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else value
                return (
                    f"the optimizer's {name} of parameter {i} has shape {shape}, the "
                    f"parameter {tuple(by_id[i].shape)}"
                )
    return None


def checkpoint_problem(run_dir: Path) -> str | None:
    """Why the run's checkpoint could not be loaded, found from file sizes and headers alone
    (``runs`` and ``report`` list many runs and load none); None when it looks whole, or when
    the run has no checkpoint at all (its status says so)."""
    try:
        ckpt = checkpoint_dir(run_dir)
        read_meta(run_dir)
    except PosexpError as e:
        return None if not (Path(run_dir) / "checkpoint").exists() else str(e)
    weights, state = ckpt / "model.safetensors", ckpt / "state.pt"
    try:
        size = weights.stat().st_size
        with open(weights, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or 8 + n > size:
                return f"{weights} is cut short ({size:,} bytes)"
            header = json.loads(f.read(n))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
        if 8 + n + max(ends, default=0) != size:
            return f"{weights} is cut short: {size:,} bytes of {8 + n + max(ends, default=0):,}"
        size = state.stat().st_size if state.exists() else None  # none: weights only
        if size is not None:
            with open(state, "rb") as f:  # torch.save writes a zip: its end record closes it
                f.seek(max(0, size - 65536))
                if b"PK\x05\x06" not in f.read():
                    return f"{state} is cut short ({size:,} bytes)"
    except FileNotFoundError as e:
        return f"{e.filename} is missing"
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        return f"{weights} is unreadable ({first_line(e)})"
    return None
