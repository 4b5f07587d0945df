"""The run config, typed: one frozen dataclass per section, built and validated in one place.

The YAML files under ``configs/`` stay the user's interface and the one home of every default;
Hydra composes them, and ``RunConfig.from_dict`` turns the composed (plain) mapping into these
objects, refusing any bad value with a one-line error that names it. Every task receives a
``RunConfig``; a run dir saves ``RunConfig.to_dict()`` and reads it back with ``from_saved``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posexp import checks
from posexp.checks import positive_int
from posexp.config.extrapolate import ExtrapolateConfig
from posexp.config.sections import (
    DEVICES,
    SEED_MAX,
    AttentionConfig,
    ModelSpec,
    NamedConfig,
    PlacementConfig,
    TrainConfig,
    TranslateConfig,
    named_entry,
)
from posexp.errors import PosexpError, choose
from posexp.extension import ExtensionConfig
from posexp.positions.pose import PoseConfig, check_pose_run
from posexp.positions.randomized import PositionSampling


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
    def from_dict(cls, value: Mapping[str, Any], saved: bool = False) -> RunConfig:
        """Validate a composed, resolved config mapping; the one place a run config is built.

        ``saved``: a run dir's config, read back: its data files need not exist any more, and its
        kernels need not run on this machine."""
        from posexp.data import check_dataset, check_tokenizer
        from posexp.pe import PEContext, build_pe, get_pe

        d = {str(k): v for k, v in value.items() if k != "hydra"}
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in d:
            if key not in allowed:
                raise PosexpError(
                    f"unknown setting {key}; allowed at the top level: {', '.join(allowed)}"
                )
        seed = checks.integer("seed", d.get("seed"))
        if not 0 <= seed <= SEED_MAX:
            raise PosexpError(
                f"seed must be in [0, 2**63 - 1] (what torch and numpy both accept), got {seed}"
            )
        choose("device", d.get("device"), DEVICES)
        model = ModelSpec.from_dict(d.get("model"))
        train = TrainConfig.from_dict(d.get("train"))
        train_length = positive_int("train_length", d.get("train_length"), allow_none=True)
        pe_name, pe_params = named_entry("pe", d.get("pe"), "name")
        pe_cls = get_pe(pe_name)  # unknown pe: one-line error naming the registered ones
        check_pe_keys(pe_name, pe_cls.settings(), pe_params)
        pe_cls.check_params(pe_params, train.seq_len)
        if hasattr(pe_cls, "check_depth"):  # a per-layer pattern: no longer than the model
            pe_cls.check_depth(pe_params, model.n_layers)
        ext = ExtensionConfig.from_dict(d.get("extension") or {"method": "none"})
        check_trainable(pe_name, ext.method)
        tok_name, tok_params = named_entry("tokenizer", d.get("tokenizer"), "name")
        check_tokenizer(tok_name, tok_params)
        data_name, data_params = named_entry("data", d.get("data"), "source")
        rows = check_dataset(data_name, data_params, tok_name, train.seq_len, inputs=not saved)
        if pe_cls.reads_digits:
            check_numeric(pe_name, data_name, data_params)
        # Randomized positions cover the rows actually trained on (a task's can be shorter).
        positions = PositionSampling.from_pe(
            pe_name, pe_params, train.seq_len, rows or train.seq_len
        )
        if data_params.get("doc_mask"):
            check_doc_mask(data_name, train.pose.enabled, positions.randomized, pe_name, pe_cls)
            local = checks.mapping("attention", d.get("attention") or {})
            if local.get("window") is not None or local.get("sinks") or local.get("sink_logit"):
                raise PosexpError(
                    "data.doc_mask=true does not apply here: attention.window/sinks/sink_logit "
                    "keep a mask of their own; set data.doc_mask=false or leave them unset"
                )
        ctx_length = train_length or train.seq_len
        # The positions the PE can represent (a learned table's rows, stretched by PI), for PoSE.
        limit = pe_cls.position_limit(pe_params, ctx_length)
        if model.d_model % model.n_heads == 0:  # else the model's own one-line error, later
            # Settings only the built encoding can judge (NeoX's rotated dims, LongRoPE's lists
            # against them) fail here, before any run dir is made.
            built = build_pe(
                pe_name,
                PEContext(
                    model.d_model,
                    model.n_heads,
                    model.d_model // model.n_heads,
                    ctx_length,
                    ext.with_original_length(ctx_length),
                    model.n_layers,
                ),
                **pe_params,
            )
            limit = built.max_positions
            check_dropout(pe_name, built, model.n_layers, model.dropout)
        check_pose_run(
            train.pose,
            pe_name,
            limit,
            positions.randomized,
            data_name,
            data_params,
            train.seq_len,
            rows,
        )
        attention = AttentionConfig.from_dict(d.get("attention"))
        if attention.causal == "matmul" and train.precision == "fp32":
            raise PosexpError(
                "attention.causal=matmul is a bf16 kernel, and train.precision=fp32; "
                "allowed: attention.causal=auto or sdpa, or train.precision=bf16"
            )
        if not saved:  # a run trained elsewhere still loads here
            check_linear_kernel(train, str(d["device"]))
        for key in ("resume", "parent", "cache_dir"):
            checks.path(key, d.get(key))
        if not d.get("cache_dir"):  # its default is configs/train.yaml's, not one written here
            raise PosexpError("cache_dir must be a folder path, got an empty value")
        return cls(
            model=model,
            pe=NamedConfig(pe_name, pe_params),
            extension=ext.with_original_length(train_length or train.seq_len),
            data=NamedConfig(data_name, data_params),
            tokenizer=NamedConfig(tok_name, tok_params),
            train=train,
            translate=TranslateConfig.from_dict(d.get("translate")),
            attention=attention,
            placement=PlacementConfig.from_dict(d.get("placement")),
            extrapolate=ExtrapolateConfig.from_dict(d.get("extrapolate")),
            heads=model.n_heads,
            seed=seed,
            device=d["device"],
            cache_dir=str(d["cache_dir"]),
            resume=d.get("resume"),
            parent=d.get("parent"),
            train_length=train_length,
            positions=positions,
        )

    @classmethod
    def from_saved(cls, value: Mapping[str, Any]) -> RunConfig:
        """A run dir's saved config (``from_dict`` with ``saved``)."""
        return cls.from_dict(value, saved=True)

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
            "extrapolate": self.extrapolate.to_dict(),
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


def check_linear_kernel(train: TrainConfig, device: str) -> None:
    """Refuse ``train.linear=onednn`` where it cannot run: bf16, a GPU, a compiled model, or a
    torch without oneDNN's linear op."""
    if train.linear != "onednn":
        return
    import torch

    from posexp.kernels import onednn_linear

    clash = (
        "train.precision=bf16"
        if train.precision == "bf16"
        else f"device={device}"
        if device not in ("auto", "cpu")
        else "train.compile=true"
        if train.compile
        else None
    )
    if clash is not None:
        raise PosexpError(
            f"train.linear=onednn is a kernel for fp32 on a CPU, uncompiled, and {clash}; "
            f"allowed: train.linear=auto or torch"
        )
    if not onednn_linear.available():
        raise PosexpError(
            f"train.linear=onednn needs oneDNN's linear op, which torch {torch.__version__} "
            f"lacks here; allowed: train.linear=auto or torch"
        )


def check_dropout(pe: str, built: Any, n_layers: int, dropout: float) -> None:
    """Refuse attention dropout where attention is not SDPA's: an encoding that computes its own
    (kind ``attention``) or attends within chunks would leave it out without a word."""
    if dropout == 0:
        return
    for i in range(n_layers):
        layer = built.layer(i)
        if layer.kind == "attention" or layer.attention_chunk is not None:
            what = (
                "computes its own attention" if layer.kind == "attention" else "attends in chunks"
            )
            raise PosexpError(
                f"model.dropout={dropout:g} is not applied in layer {i}, whose encoding "
                f"{what} (pe={pe}); allowed: model.dropout=0 with pe={pe}"
            )


def check_pe_keys(pe: str, settings: tuple[str, ...], params: Mapping[str, Any]) -> None:
    """Refuse a ``pe.*`` key the encoding does not take (another encoding's, or a typo)."""
    allowed = [*settings, *PositionSampling.KEYS]
    for key in params:
        if key not in allowed:
            raise PosexpError(
                f"pe.{key} is not a setting of pe={pe}; allowed: {', '.join(allowed)}"
            )


def check_trainable(pe: str, method: str) -> None:
    """Refuse an extension method ``pe`` cannot take, or one no run can train with (one line)."""
    from posexp.extension import get_extension
    from posexp.pe import accepted_extensions, check_extension

    check_extension(pe, method)
    if get_extension(method).training_free:
        trainable = [m for m in accepted_extensions(pe) if not get_extension(m).training_free]
        raise PosexpError(
            f"extension {method!r} is training-free (it changes attention at evaluation); "
            f"use it with eval-extrapolate or generate --method {method}; "
            f"a run trains with: {', '.join(trainable)}"
        )


def check_doc_mask(source: str, pose: bool, randomized: bool, pe_name: str, pe_cls: Any) -> None:
    """data.doc_mask masks attention to the documents of a text corpus's training windows, with
    positions restarting at each: refused where the rows are not such windows, the positions
    are drawn otherwise (PoSE, randomized positions), or the encoding computes its attention
    itself (the mask is applied where the kernel is chosen: posexp.model.doc_mask)."""
    from posexp.data import dataset_kind
    from posexp.pe import LogitTerm

    # A per-layer pattern (it has a depth to check) may hold encodings of either kind.
    own = hasattr(pe_cls, "check_depth") or getattr(pe_cls, "logit_term", LogitTerm.NONE) in (
        LogitTerm.FROM_SCORES,
        LogitTerm.OWN,
    )
    why = (
        f"data={source} is not a text corpus (its rows are not windows of documents)"
        if dataset_kind(source) != "lm"
        else "train.pose draws its own positions"
        if pose
        else "pe.randomized draws its own positions"
        if randomized
        else f"pe={pe_name} computes its attention its own way"
        if own
        else None
    )
    if why:
        raise PosexpError(f"data.doc_mask=true does not apply here: {why}; set data.doc_mask=false")


def check_numeric(pe: str, source: str, params: Mapping[str, Any]) -> None:
    """An encoding that reads digit tokens needs a synthetic task with numbers (synthetic
    tasks already require the byte tokenizer, whose ids the encoding reads)."""
    from posexp.data.synthetic.base import TASKS

    numeric = sorted(name for name, task in TASKS.items() if task.numeric)
    task = params.get("task") if source == "synthetic" else None
    if task not in numeric:
        got = f"data.task={task}" if source == "synthetic" else f"data={source}"
        raise PosexpError(
            f"pe={pe} reads digit tokens, so it needs a synthetic task with numbers, "
            f"got {got}; allowed: data={', '.join(numeric)}"
        )


def from_composed(cfg: Any) -> RunConfig:
    """The typed config of a Hydra-composed DictConfig (interpolations resolved)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise PosexpError(f"config: {str(e).splitlines()[0]}") from None
    return RunConfig.from_dict(plain)


def known_keys() -> list[str]:
    """Every override key the run config has (``train.max_steps``, ``pe.base``, ``heads``):
    what a misspelt key is matched against."""
    from posexp.extension import EXTENSIONS
    from posexp.pe import PE_REGISTRY

    hidden = {"positions", "train_length"}  # filled in by posexp, never given
    keys = [f.name for f in dataclasses.fields(RunConfig) if f.name not in hidden]
    sections = {
        "model": ModelSpec,
        "train": TrainConfig,
        "translate": TranslateConfig,
        "attention": AttentionConfig,
        "placement": PlacementConfig,
        "extrapolate": ExtrapolateConfig,
    }
    for name, cls in sections.items():
        keys += [f"{name}.{f.name}" for f in dataclasses.fields(cls)]
    pe_keys = {k for pe in PE_REGISTRY.values() for k in pe.settings()}
    keys += [f"train.pose.{k}" for k in PoseConfig.KEYS]
    keys += sorted(f"pe.{k}" for k in pe_keys | set(PositionSampling.KEYS))
    ext_keys = {"factor", *(s.name for m in EXTENSIONS.values() for s in m.settings)}
    keys += sorted(f"extension.{k}" for k in ext_keys)
    return keys
