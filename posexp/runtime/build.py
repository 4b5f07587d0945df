"""What a run is built from: its data (corpus, tokenizer, token arrays) and its network's config."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posexp.config import RunConfig
from posexp.data import build_tokenizer, load_corpus, tokenize_splits
from posexp.data.tokenizers import saved_tokenizer
from posexp.model import ModelConfig

log = logging.getLogger("posexp")


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
        extension=run.extension,
        train_length=run.length0,
        window=run.attention.window,
        sinks=run.attention.sinks,
        sink_logit=run.attention.sink_logit,
        gate=run.attention.gate,
        ssmax=run.attention.ssmax,
        ssmax_bias=run.attention.ssmax_bias,
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


def build_data(run: RunConfig, tokenizer_file: Path | None = None) -> Data:
    """Load the corpus, tokenizer and cached token arrays a run asks for; ``tokenizer_file``: the
    learned tokenizer a run kept (its own on a resume or an evaluation, its parent's for a
    fine-tune), used as it is rather than learned again from today's data files."""
    cache_dir = Path(run.cache_dir)
    corpus = load_corpus(run.data.name, **run.data.params)
    if tokenizer_file is not None and tokenizer_file.is_file():
        tokenizer = saved_tokenizer(tokenizer_file)
    else:
        tokenizer = build_tokenizer(run.tokenizer.name, corpus, cache_dir, **run.tokenizer.params)
    tokens = tokenize_splits(corpus, tokenizer, cache_dir, key=data_key(run))
    return Data(corpus, tokenizer, tokens)
