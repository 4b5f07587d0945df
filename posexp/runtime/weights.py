"""A run's saved weights: its trained network, loaded from the run dir, and, when a run starts
from them (``resume=``, ``parent=``), whether the saved network fits the new run's.

The fit is checked from the saved run's ``meta.json`` before the data is built (a BPE trained, three splits
tokenized), so a mismatch is one line naming the first difference, not a late load error.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import Any

import torch

from posexp.config import RunConfig
from posexp.data.registry import load_corpus
from posexp.data.tokenizers import LEARNED_VOCABULARY
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.kernels.choice import KernelChoice
from posexp.model import GPT, ModelConfig
from posexp.pe import get_pe
from posexp.runtime.build import model_config
from posexp.store.checkpoint import load_weights
from posexp.store.rundir import RunDir

# ModelConfig fields that change how a network runs, not its weights: a run started from
# another's weights may change them. Every other field (a new one too) must match the parent's.
RUNTIME_FIELDS = frozenset({"dropout", "extension", "train_length"})
NETWORK_FIELDS = tuple(
    f.name for f in dataclasses.fields(ModelConfig) if f.name not in RUNTIME_FIELDS
)


# The encoding may change under the same weights (DroPE: RoPE dropped, ``posexp finetune pe=none``)
# when every weight keeps its name and shape; ``check_same_weights`` decides.
ENCODING_FIELDS = frozenset({"pe", "pe_params"})


def weight_shapes(mcfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every saved tensor's name and shape for a network of ``mcfg`` (built with the RNG put
    back, so checking draws no random numbers of the run's)."""
    with torch.random.fork_rng(devices=[]):
        return {k: tuple(t.shape) for k, t in GPT(mcfg).state_dict().items()}


def check_same_weights(parent: dict[str, Any], mcfg: ModelConfig) -> None:
    """Refuse an encoding change that alters the weights (a tensor added, dropped or reshaped),
    in one line naming the first difference."""
    theirs = weight_shapes(ModelConfig.from_dict(parent))
    mine = weight_shapes(mcfg)
    changed = sorted(set(theirs) ^ set(mine)) or sorted(k for k in theirs if theirs[k] != mine[k])
    if changed:
        key = changed[0]
        was, now = theirs.get(key, "none"), mine.get(key, "none")
        raise PosexpError(
            f"pe={mcfg.pe} changes the weights of the parent's pe={parent.get('pe')} ({key}: "
            f"{was} -> {now}); allowed: an encoding with the same weights (e.g. rope -> none, "
            f"DroPE)"
        )


def saved_model_config(run: RunDir) -> ModelConfig:
    """The network ``run``'s checkpoint was saved from, its extension typed."""
    return ModelConfig.from_dict(run.meta()["model"])


def check_tokenizer(run: RunDir, vocab_size: int) -> None:
    """Refuse a kept ``tokenizer.json`` that is not the one ``run``'s model trained with (copied
    from another run): its vocabulary differs from the model's (a larger one gave ids past the
    embedding, IndexError; a smaller one scored other text, silently), or, of the same size, its
    sha256 is not the one the checkpoint recorded."""
    from posexp.data.tokenizers import saved_tokenizer

    if not run.tokenizer_file.is_file():
        return
    kept = saved_tokenizer(run.tokenizer_file).vocab_size
    if kept != vocab_size:
        raise PosexpError(
            f"{str(run.tokenizer_file)!r} has a vocabulary of {kept:,} tokens and the run's "
            f"model {vocab_size:,}: it is not the tokenizer this run trained with (copied from "
            f"another run?); put the run's own back"
        )
    recorded = run.meta().get("tokenizer_sha256")
    if recorded is not None and run.tokenizer_digest() != recorded:
        raise PosexpError(
            f"{str(run.tokenizer_file)!r} is not the tokenizer this run trained with: its sha256 "
            f"differs from the one the checkpoint recorded ({recorded[:12]}); put the run's own "
            f"back"
        )


def load_model(
    run: RunDir,
    device: Any,
    extension: ExtensionConfig | None = None,
    kernels: KernelChoice | None = None,
) -> GPT:
    """``run``'s trained model in eval mode on ``device``; ``extension`` replaces the baked-in
    one; ``kernels``: the ``KernelChoice`` it runs on (None: the defaults)."""
    cfg = saved_model_config(run)
    check_tokenizer(run, cfg.vocab_size)
    if extension is not None:
        cfg = dataclasses.replace(cfg, extension=extension)
    model = GPT(cfg, kernels)
    load_weights(run.path, model)
    return model.to(device).eval()


def check_same_network(parent: dict[str, Any], mcfg: ModelConfig) -> None:
    """Refuse to load a parent's weights into a network of another shape (one line, the first key)."""
    mine = mcfg.to_dict()
    # A field added since the parent was saved has its default there (ModelConfig.from_dict).
    defaults = {
        f.name: f.default for f in dataclasses.fields(ModelConfig) if f.default is not MISSING
    }
    encoding_changed = False
    for key in NETWORK_FIELDS:
        theirs = parent.get(key, defaults.get(key))
        if theirs != mine[key] and key in ENCODING_FIELDS:
            encoding_changed = True
        elif theirs != mine[key]:
            raise PosexpError(
                f"parent run has {key}={parent.get(key)!r}, this run {key}={mine[key]!r}; "
                f"a run started from another's weights keeps its network (model, pe, "
                f"heads, tokenizer)"
            )
    if encoding_changed:
        check_same_weights(parent, mcfg)


def check_start_weights(cfg: RunConfig) -> None:
    """Refuse a resume or parent whose saved network does not fit this run's (from its meta only)."""
    what, path = ("resume=", cfg.resume) if cfg.resume else ("parent=", cfg.parent)
    if not path:
        return
    meta = RunDir.open_run(path, what).meta()  # a sweep dir: refused naming its runs
    saved, model = meta["config"], meta["model"]
    if cfg.parent and not cfg.resume:
        mine, theirs = cfg.tokenizer.to_dict(), dict(saved.get("tokenizer") or {})
        if mine != theirs:
            raise PosexpError(
                f"parent run has tokenizer {_spec(theirs)}, this run {_spec(mine)}; a run "
                f"started from another's weights keeps its tokenizer (drop tokenizer=)"
            )
        data = dict(saved.get("data") or {})
        if (
            cfg.tokenizer.name in LEARNED_VOCABULARY
            and cfg.data.to_dict("source") != data
            and not same_training_text(data, cfg)
        ):
            raise PosexpError(
                f"tokenizer={cfg.tokenizer.name} learns its vocabulary from the data: the parent's "
                f"(data {_spec(data)}) is not this run's (data {_spec(cfg.data.to_dict('source'))}); "
                f"use the parent's data, or tokenizer=byte for both"
            )
        check_same_network(model, model_config(cfg, vocab_size=int(model["vocab_size"])))
    # A learned position table's rows follow the training length when pe.max_len is null.
    pe_cls = get_pe(model["pe"])
    have = pe_cls.position_limit(dict(model.get("pe_params") or {}), int(model["train_length"]))
    want = pe_cls.position_limit(dict(cfg.pe.params), cfg.length0)
    if have != want:
        raise PosexpError(
            f"{what}{str(path)!r} has a pe={model['pe']} table of {have} positions "
            f"(trained at length {model['train_length']}); this run's would have {want} "
            f"(train.seq_len={cfg.train.seq_len}); keep train.seq_len={model['train_length']}"
            + ("" if cfg.resume else ", or extend it with `posexp finetune`")
        )


def same_training_text(parent_data: dict[str, Any], cfg: RunConfig) -> bool:
    """Whether the parent's data and this run's have the same train documents (a learned
    vocabulary trained on them is then the same: wyc2kjv_text pre-trains for wyc2kjv)."""
    params = {k: v for k, v in parent_data.items() if k != "source"}
    try:
        theirs = load_corpus(str(parent_data.get("source")), **params)
    except PosexpError:  # the parent's dataset is gone or refuses its params: not the same
        return False
    mine = load_corpus(cfg.data.name, **cfg.data.params)
    return theirs.train_text_fingerprint() == mine.train_text_fingerprint()


def _spec(section: dict[str, Any]) -> str:
    """``byte``, or ``bpe(vocab_size=512)``: a config group entry in one word."""
    items = list(section.items())
    if not items:
        return "?"
    extra = ", ".join(f"{k}={v}" for k, v in items[1:])
    return f"{items[0][1]}({extra})" if extra else str(items[0][1])
