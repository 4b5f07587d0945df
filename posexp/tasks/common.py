"""What every task shares: device choice, the model config of a run, its data."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posexp.config import DEVICES, RunConfig
from posexp.data import build_tokenizer, load_corpus, tokenize_splits
from posexp.errors import PosexpError, choose
from posexp.model import ModelConfig

log = logging.getLogger("posexp")

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


def model_config(run: RunConfig, vocab_size: int) -> ModelConfig:
    """The network's config for a run: its sizes, PE and extension, and the tokenizer's vocab."""
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=run.model.d_model,
        n_layers=run.model.n_layers,
        n_heads=run.model.n_heads,
        d_ff=run.model.d_ff,
        dropout=run.model.dropout,
        pe=run.pe.name,
        pe_params=dict(run.pe.params),
        extension=run.extension.to_dict(),
        train_length=run.length0,
        attention=run.attention.backend,
    )


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


def data_key(run: RunConfig) -> str:
    """What a run's corpus, tokenizer and token arrays depend on, as a cache key."""
    return config_hash(run.data.to_dict("source"), run.tokenizer.to_dict(), run.cache_dir)


def build_data(run: RunConfig) -> Data:
    """Load the corpus, tokenizer and cached token arrays a run asks for."""
    cache_dir = Path(run.cache_dir)
    corpus = load_corpus(run.data.name, **run.data.params)
    tokenizer = build_tokenizer(run.tokenizer.name, corpus, cache_dir, **run.tokenizer.params)
    tokens = tokenize_splits(corpus, tokenizer, cache_dir, key=data_key(run))
    return Data(corpus, tokenizer, tokens)
