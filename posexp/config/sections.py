"""The run config's sections, one frozen dataclass each, every value checked where it is built.

A section refuses keys it does not have and names each bad value (``train.lr``, ``heads``) in a
one-line error; ``posexp/config/run.py`` assembles them into the ``RunConfig``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from posexp import checks
from posexp.checks import number, positive_int
from posexp.errors import PosexpError, choose
from posexp.positions.pose import PoseConfig

DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("auto", "fp32", "bf16")
# train.resume_schedule: a resume that trains longer keeps the planned LR decay or stretches it
# (posexp/runtime/optim.py).
RESUME_SCHEDULES = ("keep", "stretch")  # train.precision: posexp/runtime/precision.py
# Config roots that define the network and its data: a fine-tune keeps its parent's.
NETWORK_ROOTS = ("model", "pe", "heads", "data", "tokenizer")
# A resumed run must not change them, nor the extension its weights were trained with.
RESUME_ROOTS = (*NETWORK_ROOTS, "extension")
MISSING = "???"  # Hydra's mark for a value the user must give
SEED_MAX = (
    2**63 - 1
)  # numpy takes no negative seed, torch none past 2**64 - 1; int64 keeps it exact
# train.warmup_steps=null: a tenth of train.max_steps (the 60 of the default 600-step run).
WARMUP_SHARE, WARMUP_SHARE_TEXT = 10, "a tenth"
# train.eval_interval=null: about this many validation points over the run (plus step 0), so
# a 60-step smoke run draws a curve as a 6000-step one does.
EVAL_POINTS = 20
THREADS_MAX = 1024  # more CPU threads than any machine has: torch spawns them and the OS refuses


def _section(name: str, value: Any, cls: type) -> dict[str, Any]:
    """A section's mapping, refusing keys the dataclass ``cls`` does not have or lacks."""
    d = dict(checks.mapping(name, value))
    allowed = [f.name for f in dataclasses.fields(cls)]
    checks.known_keys(name, d, allowed)
    for key in allowed:
        if key not in d:
            raise PosexpError(f"missing setting {name}.{key}")
    return d


def named_entry(group: str, value: Any, key: str) -> tuple[str, dict[str, Any]]:
    """(name, params) of a config-group entry such as ``pe`` ({name: rope, base: ...})."""
    if not isinstance(value, Mapping) or not isinstance(value.get(key), str):
        raise PosexpError(
            f"{group} must name its {key} (e.g. {group}={_EXAMPLES[group]}), got {value!r}"
        )
    params = {str(k): v for k, v in value.items() if k != key}
    for k, v in params.items():
        if v == MISSING:
            raise PosexpError(
                f"{group}.{k} must be set for {group}={value[key]} (e.g. {group}.{k}=...)"
            )
    return value[key], params


_EXAMPLES = {"pe": "rope", "data": "kjv", "tokenizer": "byte", "model": "small"}


@dataclass(frozen=True)
class ModelSpec:
    """The ``model`` group: a named size (tiny, small, base) and its dimensions."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int | None
    dropout: float

    @classmethod
    def from_dict(cls, value: Any) -> ModelSpec:
        """Validate the ``model`` mapping (``n_heads`` is the user's ``heads``)."""
        d = _section("model", value, cls)
        return cls(
            name=str(d["name"]),
            d_model=positive_int("model.d_model", d["d_model"]),
            n_layers=positive_int("model.n_layers", d["n_layers"]),
            n_heads=positive_int("heads", d["n_heads"]),
            d_ff=positive_int("model.d_ff", d["d_ff"], allow_none=True),
            dropout=number("model.dropout", d["dropout"], "in [0, 1)"),
        )


@dataclass(frozen=True)
class NamedConfig:
    """A config-group entry chosen by name (pe, data, tokenizer) plus its own parameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, key: str = "name") -> dict[str, Any]:
        """The YAML layout: ``{name: ..., **params}``."""
        return {key: self.name, **self.params}


@dataclass(frozen=True)
class TrainConfig:
    """The ``train`` section: optimisation, lengths and intervals."""

    max_steps: int
    batch_size: int
    seq_len: int
    lr: float
    min_lr: float
    warmup_steps: int
    weight_decay: float
    betas: tuple[float, float]
    grad_clip: float
    eval_interval: int
    eval_tokens: int
    log_interval: int
    checkpoint_interval: int
    compile: bool
    threads: int | None
    precision: str
    linear: str  # the kernel of fp32 linear layers on a CPU (posexp/kernels/onednn_linear.py)
    stop_grace_s: float | None
    resume_schedule: str
    deterministic: bool  # torch's deterministic kernels: a GPU run repeats bit for bit
    pose: PoseConfig  # PoSE: positions skipped up to a target length (posexp/positions/pose.py)

    @classmethod
    def from_dict(cls, value: Any) -> TrainConfig:
        """Validate ``train.*``: positive sizes, finite rates in range, two betas in [0, 1),
        min_lr <= lr and warmup < max_steps."""
        d = _section("train", value, cls)
        for key in (
            "max_steps",
            "batch_size",
            "seq_len",
            "eval_tokens",
            "log_interval",
            "checkpoint_interval",
        ):
            positive_int(f"train.{key}", d[key])
        every = checks.integer("train.eval_interval", d["eval_interval"], low=1, allow_none=True)
        d["eval_interval"] = max(1, d["max_steps"] // EVAL_POINTS) if every is None else every
        warmup = checks.integer("train.warmup_steps", d["warmup_steps"], low=0, allow_none=True)
        if warmup is None:  # follows the run's length: a 50-step smoke run still decays
            d["warmup_steps"] = d["max_steps"] // WARMUP_SHARE
        elif warmup >= d["max_steps"]:
            raise PosexpError(
                f"train.warmup_steps={warmup} must be below train.max_steps={d['max_steps']} "
                f"(the learning rate would only rise, never decay); lower it, or "
                f"train.warmup_steps=null for {WARMUP_SHARE_TEXT} of the run"
            )
        betas = d["betas"]
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise PosexpError(f"train.betas must be two numbers in [0, 1), got {betas!r}")
        checks.boolean("train.compile", d["compile"])
        checks.boolean("train.deterministic", d["deterministic"])
        choose("train.precision", d["precision"], PRECISIONS)
        from posexp.kernels.onednn_linear import CHOICES as LINEAR_CHOICES

        choose("train.linear", d["linear"], LINEAR_CHOICES)
        choose("train.resume_schedule", d["resume_schedule"], RESUME_SCHEDULES)
        if d["eval_tokens"] <= d["seq_len"]:
            raise PosexpError(
                f"train.eval_tokens={d['eval_tokens']} is too few for one validation window of "
                f"train.seq_len={d['seq_len']}; allowed: train.eval_tokens > {d['seq_len']}"
            )
        return cls(
            **{
                k: d[k]
                for k in (
                    "max_steps",
                    "batch_size",
                    "seq_len",
                    "warmup_steps",
                    "eval_interval",
                    "eval_tokens",
                    "log_interval",
                    "checkpoint_interval",
                    "compile",
                    "deterministic",
                )
            },
            lr=number("train.lr", d["lr"], "> 0"),
            min_lr=_min_lr(d["min_lr"], d["lr"]),
            weight_decay=number("train.weight_decay", d["weight_decay"], ">= 0"),
            grad_clip=number("train.grad_clip", d["grad_clip"], "> 0"),
            betas=(
                number("train.betas[0]", betas[0], "in [0, 1)"),
                number("train.betas[1]", betas[1], "in [0, 1)"),
            ),
            threads=_threads(d["threads"]),
            precision=d["precision"],
            linear=d["linear"],
            stop_grace_s=number("train.stop_grace_s", d["stop_grace_s"], "> 0", allow_none=True),
            resume_schedule=d["resume_schedule"],
            pose=PoseConfig.from_dict(d["pose"]),
        )


def _min_lr(value: Any, lr: Any) -> float:
    """``train.min_lr``: the cosine decay's floor, at most ``train.lr`` (above it the "decay"
    would climb)."""
    min_lr = number("train.min_lr", value, ">= 0")
    if min_lr > number("train.lr", lr, "> 0"):
        raise PosexpError(
            f"train.min_lr={min_lr:g} is above train.lr={lr:g}: the cosine decay would climb "
            f"instead of decaying; allowed: train.min_lr <= {lr:g}"
        )
    return min_lr


def _threads(value: Any) -> int | None:
    """``train.threads``: null, or a positive integer up to ``THREADS_MAX``."""
    threads = positive_int("train.threads", value, allow_none=True)
    if threads is not None and threads > THREADS_MAX:
        raise PosexpError(f"train.threads must be at most {THREADS_MAX} (or null), got {threads}")
    return threads


@dataclass(frozen=True)
class TranslateConfig:
    """The ``translate`` section: decoding for BLEU/chrF on parallel corpora."""

    bleu_examples: int
    test_examples: int | None
    max_new_tokens: int | None
    batch_size: int
    samples: int
    beam_size: int
    length_penalty: float

    @classmethod
    def from_dict(cls, value: Any) -> TranslateConfig:
        """Validate ``translate.*``."""
        d = _section("translate", value, cls)
        return cls(
            bleu_examples=positive_int("translate.bleu_examples", d["bleu_examples"]),
            test_examples=positive_int(
                "translate.test_examples", d["test_examples"], allow_none=True
            ),
            max_new_tokens=positive_int(
                "translate.max_new_tokens", d["max_new_tokens"], allow_none=True
            ),
            batch_size=positive_int("translate.batch_size", d["batch_size"]),
            samples=checks.integer("translate.samples", d["samples"], low=0),
            beam_size=positive_int("translate.beam_size", d["beam_size"]),
            length_penalty=number("translate.length_penalty", d["length_penalty"], "any"),
        )


@dataclass(frozen=True)
class AttentionConfig:
    """The ``attention`` section: the kernel for PEs that add a bias (``posexp/kernels/flex.py``),
    and for causal attention without one while training (``posexp/runtime/kernel_choice.py``)."""

    backend: str
    causal: str
    # Which keys every layer sees (part of the network, carried into ``ModelConfig``): a sliding
    # window of W keys (the query's own included), the first N tokens always, and a learned
    # per-head sink logit (gpt-oss). pe=layered may set them per layer.
    window: int | None = None
    sinks: int = 0
    sink_logit: bool = False
    # Gated attention (headwise | elementwise) and Scalable-Softmax's initial s and b; null: off.
    gate: str | None = None
    ssmax: float | None = None
    ssmax_bias: float | None = None

    @classmethod
    def from_dict(cls, value: Any) -> AttentionConfig:
        """Validate ``attention.*``."""
        from posexp.kernels.flex import BACKENDS
        from posexp.kernels.matmul_attention import CHOICES

        given = dict(checks.mapping("attention", value))
        if given.get("gate") is not None:
            choose("attention.gate", given["gate"], ("headwise", "elementwise"))
        d = _section("attention", given, cls)
        choose("attention.backend", d["backend"], BACKENDS)
        choose("attention.causal", d["causal"], CHOICES)
        return cls(
            backend=d["backend"],
            causal=d["causal"],
            window=positive_int("attention.window", d["window"], allow_none=True),
            sinks=checks.integer("attention.sinks", d["sinks"], low=0),
            sink_logit=checks.boolean("attention.sink_logit", d["sink_logit"]),
            gate=d["gate"],
            ssmax=number("attention.ssmax", d["ssmax"], "any", allow_none=True),
            ssmax_bias=number("attention.ssmax_bias", d["ssmax_bias"], "any", allow_none=True),
        )


@dataclass(frozen=True)
class PlacementConfig:
    """The ``placement`` section: how parallel sweep jobs share GPUs."""

    jobs_per_gpu: int
    pending_patience_min: float | None  # a Slurm job pending longer says why, once

    @classmethod
    def from_dict(cls, value: Any) -> PlacementConfig:
        """Validate ``placement.*``."""
        d = _section("placement", value, cls)
        return cls(
            jobs_per_gpu=positive_int("placement.jobs_per_gpu", d["jobs_per_gpu"]),
            pending_patience_min=number(
                "placement.pending_patience_min", d["pending_patience_min"], "> 0", allow_none=True
            ),
        )
