"""What every task shares: device choice, config checks, data and model construction, run dirs."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from posexp.checkpoint import load_weights, read_meta
from posexp.data import build_tokenizer, load_corpus, tokenize_splits
from posexp.errors import PosexpError, choose
from posexp.extension import ExtensionConfig
from posexp.model import GPT, ModelConfig
from posexp.pe import check_extension, get_pe

log = logging.getLogger("posexp")

DEVICES = ("auto", "cpu", "cuda", "mps")

# Config roots that define the network or its data; a resumed run must not change them.
MODEL_KEYS = ("model", "pe", "heads", "extension", "data", "tokenizer")


def resolve_device(name: str, gpu: int | None = None) -> torch.device:
    """auto picks cuda, then mps, then cpu; an explicit device must exist.

    ``gpu``: the CUDA device index to use (a sweep job's placement, a torchrun local rank); it
    becomes the current device before CUDA is first used, so no context lands on GPU 0.
    """
    choose("device", name, DEVICES)
    if gpu is not None and name in ("auto", "cuda") and torch.cuda.is_available():
        torch.cuda.set_device(gpu)
        return torch.device("cuda", gpu)
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise PosexpError("device 'cuda' requested but no CUDA GPU is visible; allowed here: auto, cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise PosexpError("device 'mps' requested but MPS is not available; allowed here: auto, cpu")
    return torch.device(name)


def require_positive(name: str, value: Any) -> None:
    """Raise a one-line error unless ``value`` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PosexpError(f"{name} must be a positive integer, got {value!r}")


def require_number(name: str, value: Any, rule: str) -> float:
    """Raise a one-line error unless ``value`` is a finite number obeying ``rule``: > 0, >= 0, [0, 1)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok:
        ok = {"> 0": value > 0, ">= 0": value >= 0, "in [0, 1)": 0 <= value < 1}[rule]
    if not ok:
        raise PosexpError(f"{name} must be a finite number {rule}, got {value!r}")
    return float(value)


def check_train_config(train: DictConfig) -> None:
    """Reject non-positive lengths, steps and sizes and out-of-range rates before any work starts."""
    for key in ("max_steps", "batch_size", "seq_len", "eval_interval", "eval_tokens",
                "log_interval", "checkpoint_interval"):
        require_positive(f"train.{key}", train[key])
    if isinstance(train.warmup_steps, bool) or not isinstance(train.warmup_steps, int) \
            or train.warmup_steps < 0:
        raise PosexpError(f"train.warmup_steps must be an integer >= 0, got {train.warmup_steps!r}")
    require_number("train.lr", train.lr, "> 0")
    require_number("train.min_lr", train.min_lr, ">= 0")
    require_number("train.weight_decay", train.weight_decay, ">= 0")
    require_number("train.grad_clip", train.grad_clip, "> 0")
    betas = list(train.betas) if isinstance(train.betas, (list, tuple, ListConfig)) else None
    if betas is None or len(betas) != 2:
        raise PosexpError(f"train.betas must be two numbers in [0, 1), got {train.betas!r}")
    for i, beta in enumerate(betas):
        require_number(f"train.betas[{i}]", beta, "in [0, 1)")


def check_run_config(cfg: DictConfig) -> None:
    """Checks of the composed config that need no data: seed, heads, model sizes, train.*."""
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int):
        raise PosexpError(f"seed must be an integer, got {cfg.seed!r}")
    require_positive("heads", cfg.model.n_heads)
    require_number("model.dropout", cfg.model.get("dropout", 0.0), "in [0, 1)")
    if cfg.model.get("d_ff") is not None:
        require_positive("model.d_ff", cfg.model.d_ff)
    check_train_config(cfg.train)


def extension_dict(cfg: DictConfig, train_length: int) -> dict[str, Any]:
    """The run's extension settings as plain data, original_length defaulting to ``train_length``."""
    ext = OmegaConf.to_container(cfg.get("extension") or {"method": "none"}, resolve=True)
    # ExtensionConfig validates method, factor and params now, before any data is loaded.
    return ExtensionConfig.from_dict(ext).with_original_length(train_length).to_dict()


def model_config(cfg: DictConfig, vocab_size: int) -> ModelConfig:
    """Build the typed model config from a composed Hydra config (validating it)."""
    pe_params = {k: v for k, v in OmegaConf.to_container(cfg.pe, resolve=True).items() if k != "name"}
    train_length = int(cfg.get("train_length") or cfg.train.seq_len)
    ext = extension_dict(cfg, train_length)
    check_extension(cfg.pe.name, ext["method"])
    get_pe(cfg.pe.name).check_params(pe_params, int(cfg.train.seq_len))
    mcfg = ModelConfig(
        vocab_size=vocab_size,
        d_model=cfg.model.d_model,
        n_layers=cfg.model.n_layers,
        n_heads=cfg.model.n_heads,
        d_ff=cfg.model.get("d_ff"),
        dropout=cfg.model.get("dropout", 0.0),
        pe=cfg.pe.name,
        pe_params=pe_params,
        extension=ext,
        train_length=train_length,
    )
    return mcfg


def config_hash(*parts: Any) -> str:
    """Short stable hash of JSON-able parts (used to key caches)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class Data:
    """A run's corpus, tokenizer and token arrays (memory-mapped)."""

    corpus: Any
    tokenizer: Any
    tokens: dict[str, np.ndarray]


def build_data(cfg: DictConfig) -> Data:
    """Load the corpus, tokenizer and cached token arrays a config asks for."""
    data = OmegaConf.to_container(cfg.data, resolve=True)
    tok = OmegaConf.to_container(cfg.tokenizer, resolve=True)
    cache_dir = Path(cfg.cache_dir)
    corpus = load_corpus(**data)
    tokenizer = build_tokenizer(tok.pop("name"), corpus, cache_dir, **tok)
    tokens = tokenize_splits(corpus, tokenizer, cache_dir, key=config_hash(data, cfg.tokenizer))
    return Data(corpus, tokenizer, tokens)


@dataclass
class LoadedRun:
    """A trained run: its effective config, model on a device, and checkpoint metadata."""

    run_dir: Path
    cfg: DictConfig
    model: GPT
    meta: dict[str, Any]


def load_run(run_dir: Path | str, device: torch.device, extension: dict | None = None) -> LoadedRun:
    """Rebuild a run's model from its checkpoint; ``extension`` overrides the baked-in method."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise PosexpError(f"run dir not found: {str(run_dir)!r}")
    meta = read_meta(run_dir)
    mdict = dict(meta["model"])
    if extension is not None:
        mdict["extension"] = extension
    model = GPT(ModelConfig(**mdict))
    load_weights(run_dir, model)
    return LoadedRun(run_dir, OmegaConf.create(meta["config"]), model.to(device).eval(), meta)


def latest_run(root: Path = Path("outputs")) -> Path:
    """The most recently written run dir (one holding a checkpoint) under ``root``."""
    metas = list(root.glob("**/checkpoint/meta.json"))
    if not metas:
        raise PosexpError(f"no trained run under {str(root)!r}; train one with `posexp train` or pass --run")
    return max(metas, key=os.path.getmtime).parent.parent
