"""The run config, typed: one frozen dataclass per section, built and validated in one place.

The YAML files under ``configs/`` stay the user's interface and the one home of every default;
Hydra composes them, and ``RunConfig.from_dict`` turns the composed (plain) mapping into these
objects, refusing any bad value with a one-line error that names it. Every task receives a
``RunConfig``; a run dir saves ``RunConfig.to_dict()`` and reads it back with ``from_saved``,
which fills sections added to ``train.yaml`` since the run was made from ``train.yaml`` itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from posexp.errors import PosexpError, choose
from posexp.extension import ExtensionConfig
from posexp.positions import PositionSampling

DEVICES = ("auto", "cpu", "cuda", "mps")
# Config roots that define the network or its data; a resumed run must not change them.
MODEL_KEYS = ("model", "pe", "heads", "extension", "data", "tokenizer")
MISSING = "???"  # Hydra's mark for a value the user must give


# ---- value checks (one-line errors naming the key) ----------------------------------------------


def positive_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    """``value`` as a positive integer (None allowed when ``allow_none``), else a one-line error."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        extra = " or null" if allow_none else ""
        raise PosexpError(f"{name} must be a positive integer{extra}, got {value!r}")
    return value


def number(name: str, value: Any, rule: str) -> float:
    """``value`` as a finite float obeying ``rule`` (> 0, >= 0, in [0, 1), any), else an error."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if ok:
        ok = {"> 0": value > 0, ">= 0": value >= 0, "in [0, 1)": 0 <= value < 1, "any": True}[rule]
    if not ok:
        shown = "" if rule == "any" else f" {rule}"
        raise PosexpError(f"{name} must be a finite number{shown}, got {value!r}")
    return float(value)


def _section(name: str, value: Any, cls: type) -> dict[str, Any]:
    """A section's mapping, refusing keys the dataclass ``cls`` does not have."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise PosexpError(f"{name} must be a mapping of settings, got {value!r}")
    allowed = [f.name for f in dataclasses.fields(cls)]
    for key in value:
        if key not in allowed:
            raise PosexpError(f"unknown setting {name}.{key}; allowed: {', '.join(allowed)}")
    for key in allowed:
        if key not in value:
            raise PosexpError(f"missing setting {name}.{key}")
    return dict(value)


def _named(group: str, value: Any, key: str) -> tuple[str, dict[str, Any]]:
    """(name, params) of a config-group entry such as ``pe`` ({name: rope, base: ...})."""
    if not isinstance(value, Mapping) or not isinstance(value.get(key), str):
        raise PosexpError(f"{group} must name its {key} (e.g. {group}={_EXAMPLES[group]}), got {value!r}")
    params = {str(k): v for k, v in value.items() if k != key}
    for k, v in params.items():
        if v == MISSING:
            raise PosexpError(f"{group}.{k} must be set for {group}={value[key]} "
                              f"(e.g. {group}.{k}=...)")
    return value[key], params


_EXAMPLES = {"pe": "rope", "data": "kjv", "tokenizer": "byte", "model": "small"}


# ---- sections -----------------------------------------------------------------------------------


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

    @classmethod
    def from_dict(cls, value: Any) -> TrainConfig:
        """Validate ``train.*``: positive sizes, finite rates in range, two betas in [0, 1)."""
        d = _section("train", value, cls)
        for key in ("max_steps", "batch_size", "seq_len", "eval_interval", "eval_tokens",
                    "log_interval", "checkpoint_interval"):
            positive_int(f"train.{key}", d[key])
        warmup = d["warmup_steps"]
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise PosexpError(f"train.warmup_steps must be an integer >= 0, got {warmup!r}")
        betas = d["betas"]
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise PosexpError(f"train.betas must be two numbers in [0, 1), got {betas!r}")
        if not isinstance(d["compile"], bool):
            raise PosexpError(f"train.compile must be true or false, got {d['compile']!r}")
        if d["eval_tokens"] <= d["seq_len"]:
            raise PosexpError(
                f"train.eval_tokens={d['eval_tokens']} is too few for one validation window of "
                f"train.seq_len={d['seq_len']}; allowed: train.eval_tokens > {d['seq_len']}")
        return cls(
            **{k: d[k] for k in ("max_steps", "batch_size", "seq_len", "warmup_steps", "eval_interval",
                                 "eval_tokens", "log_interval", "checkpoint_interval", "compile")},
            lr=number("train.lr", d["lr"], "> 0"),
            min_lr=number("train.min_lr", d["min_lr"], ">= 0"),
            weight_decay=number("train.weight_decay", d["weight_decay"], ">= 0"),
            grad_clip=number("train.grad_clip", d["grad_clip"], "> 0"),
            betas=(number("train.betas[0]", betas[0], "in [0, 1)"),
                   number("train.betas[1]", betas[1], "in [0, 1)")),
            threads=positive_int("train.threads", d["threads"], allow_none=True),
        )


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
        samples = d["samples"]
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise PosexpError(f"translate.samples must be an integer >= 0, got {samples!r}")
        return cls(
            bleu_examples=positive_int("translate.bleu_examples", d["bleu_examples"]),
            test_examples=positive_int("translate.test_examples", d["test_examples"], allow_none=True),
            max_new_tokens=positive_int("translate.max_new_tokens", d["max_new_tokens"], allow_none=True),
            batch_size=positive_int("translate.batch_size", d["batch_size"]),
            samples=samples,
            beam_size=positive_int("translate.beam_size", d["beam_size"]),
            length_penalty=number("translate.length_penalty", d["length_penalty"], "any"),
        )


@dataclass(frozen=True)
class ExtrapolateConfig:
    """A preset's ``extrapolate`` section: defaults for ``posexp eval-extrapolate`` on its runs.

    Every field is optional (None: the command's own default); ``eval-extrapolate`` checks the
    values against the run when it plans the evaluation.
    """

    len: int | None = None
    lengths: list[int] | str | None = None
    method: list[str] | str | None = None
    factor: float | None = None
    protocol: str | None = None
    stride: int | None = None
    tokens: int | None = None

    @classmethod
    def from_dict(cls, value: Any) -> ExtrapolateConfig:
        """Validate the keys of an ``extrapolate`` section (absent keys stay None)."""
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise PosexpError(f"extrapolate must be a mapping of settings, got {value!r}")
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in value:
            if key not in allowed:
                raise PosexpError(f"unknown setting extrapolate.{key}; allowed: {', '.join(allowed)}")
        for key in ("len", "stride", "tokens"):
            positive_int(f"extrapolate.{key}", value.get(key), allow_none=True)
        return cls(**dict(value))


@dataclass(frozen=True)
class AttentionConfig:
    """The ``attention`` section: the kernel for PEs that add a bias (see ``posexp/flex.py``)."""

    backend: str

    @classmethod
    def from_dict(cls, value: Any) -> AttentionConfig:
        """Validate ``attention.*``."""
        from posexp.flex import BACKENDS

        d = _section("attention", value, cls)
        choose("attention.backend", d["backend"], BACKENDS)
        return cls(backend=d["backend"])


@dataclass(frozen=True)
class PlacementConfig:
    """The ``placement`` section: how parallel sweep jobs share GPUs."""

    jobs_per_gpu: int

    @classmethod
    def from_dict(cls, value: Any) -> PlacementConfig:
        """Validate ``placement.*``."""
        d = _section("placement", value, cls)
        return cls(jobs_per_gpu=positive_int("placement.jobs_per_gpu", d["jobs_per_gpu"]))


# ---- the whole run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunConfig:
    """Everything a run is made of, validated; ``to_dict`` gives back the YAML layout."""

    model: ModelSpec
    pe: NamedConfig
    extension: ExtensionConfig
    data: NamedConfig
    tokenizer: NamedConfig
    train: TrainConfig
    translate: TranslateConfig
    attention: AttentionConfig
    placement: PlacementConfig
    extrapolate: ExtrapolateConfig
    heads: int
    seed: int
    device: str
    cache_dir: str
    resume: str | None = None
    parent: str | None = None
    train_length: int | None = None  # a fine-tune's parent length L0; None = train.seq_len
    positions: PositionSampling = PositionSampling()

    @property
    def length0(self) -> int:
        """The training length L0 the positions were learned at (a fine-tune's parent's)."""
        return self.train_length or self.train.seq_len

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> RunConfig:
        """Validate a composed, resolved config mapping; the one place a run config is built."""
        from posexp.data import check_dataset, check_tokenizer
        from posexp.pe import check_extension, get_pe

        d = {str(k): v for k, v in value.items() if k != "hydra"}
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in d:
            if key not in allowed:
                raise PosexpError(f"unknown setting {key}; allowed at the top level: {', '.join(allowed)}")
        seed = d.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise PosexpError(f"seed must be an integer, got {seed!r}")
        choose("device", d.get("device"), DEVICES)
        model = ModelSpec.from_dict(d.get("model"))
        train = TrainConfig.from_dict(d.get("train"))
        train_length = positive_int("train_length", d.get("train_length"), allow_none=True)
        pe_name, pe_params = _named("pe", d.get("pe"), "name")
        pe_cls = get_pe(pe_name)  # unknown pe: one-line error naming the registered ones
        pe_cls.check_params(pe_params, train.seq_len)
        ext = ExtensionConfig.from_dict(d.get("extension") or {"method": "none"})
        check_extension(pe_name, ext.method)
        tok_name, tok_params = _named("tokenizer", d.get("tokenizer"), "name")
        check_tokenizer(tok_name, tok_params)
        data_name, data_params = _named("data", d.get("data"), "source")
        rows = check_dataset(data_name, data_params, tok_name, train.seq_len)
        # Randomized positions cover the rows actually trained on (a task's can be shorter).
        positions = PositionSampling.from_pe(pe_name, pe_params, train.seq_len, rows or train.seq_len)
        for key in ("resume", "parent", "cache_dir"):
            if d.get(key) is not None and not isinstance(d[key], str):
                raise PosexpError(f"{key} must be a path, got {d[key]!r}")
        return cls(
            model=model,
            pe=NamedConfig(pe_name, pe_params),
            extension=ext.with_original_length(train_length or train.seq_len),
            data=NamedConfig(data_name, data_params),
            tokenizer=NamedConfig(tok_name, tok_params),
            train=train,
            translate=TranslateConfig.from_dict(d.get("translate")),
            attention=AttentionConfig.from_dict(d.get("attention")),
            placement=PlacementConfig.from_dict(d.get("placement")),
            extrapolate=ExtrapolateConfig.from_dict(d.get("extrapolate")),
            heads=model.n_heads,
            seed=seed,
            device=d["device"],
            cache_dir=str(d.get("cache_dir") or "outputs/.cache"),
            resume=d.get("resume"),
            parent=d.get("parent"),
            train_length=train_length,
            positions=positions,
        )

    @classmethod
    def from_saved(cls, value: Mapping[str, Any]) -> RunConfig:
        """A run dir's saved config, with sections newer than the run filled from ``train.yaml``."""
        merged = dict(value)
        for key, default in saved_defaults().items():
            if isinstance(default, dict):
                merged[key] = {**default, **(merged.get(key) or {})}
            else:
                merged.setdefault(key, default)
        return cls.from_dict(merged)

    def to_dict(self) -> dict[str, Any]:
        """Plain data in the YAML layout (what a checkpoint's ``meta.json`` stores)."""
        return {
            "model": dataclasses.asdict(self.model),
            "pe": {**self.pe.to_dict(), **dataclasses.asdict(self.positions)},
            "extension": self.extension.to_dict(),
            "data": self.data.to_dict("source"),
            "tokenizer": self.tokenizer.to_dict(),
            "train": {**dataclasses.asdict(self.train), "betas": list(self.train.betas)},
            "translate": dataclasses.asdict(self.translate),
            "attention": dataclasses.asdict(self.attention),
            "placement": dataclasses.asdict(self.placement),
            "extrapolate": {k: v for k, v in dataclasses.asdict(self.extrapolate).items() if v is not None},
            "heads": self.heads,
            "seed": self.seed,
            "device": self.device,
            "cache_dir": self.cache_dir,
            "resume": self.resume,
            "parent": self.parent,
            "train_length": self.train_length,
        }

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with top-level fields changed (e.g. ``resume``, ``cache_dir``)."""
        return dataclasses.replace(self, **changes)


def from_composed(cfg: Any) -> RunConfig:
    """The typed config of a Hydra-composed DictConfig (interpolations resolved)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise PosexpError(f"config: {str(e).splitlines()[0]}") from None
    return RunConfig.from_dict(plain)


@cache
def saved_defaults() -> dict[str, Any]:
    """The sections of ``train.yaml`` with fixed keys (train, translate, ...), as plain data."""
    from omegaconf import OmegaConf

    from posexp.paths import config_dir

    yaml = OmegaConf.load(f"{config_dir()}/train.yaml")
    return {key: OmegaConf.to_container(yaml[key], resolve=False)
            for key in ("train", "translate", "attention", "placement")} | {"device": "auto", "resume": None,
                                                               "parent": None}
