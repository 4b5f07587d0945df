"""Encodings composed per layer (``pe=layered``): iRoPE (Llama 4) and any other pattern.

Layer i uses the encoding ``layers[i mod len(layers)]``, so ``[rope, rope, rope, none]`` is
Llama 4's "NoPE in every fourth layer" at any depth. Each name of the pattern is built once, with
its own defaults overridden by ``layer_params[name]``, and acts in all of its layers, as a
single-PE model's one encoding acts in all of its: T5 keeps one table for its layers, FoX one
gate per layer it acts in (numbered within them), and a rotation's tables are computed once
per forward. An extension method is built into the children that take it only.

Local attention per layer (``windows``, a list cycled like ``layers``: a window of W keys, or
null for full attention; ``sinks``, ``sink_logit`` in every windowed layer) gives the local/global
hybrids (gpt-oss, Gemma, SWAN-GPT, RNoPE-SWA); the model's attention applies it.

Two extras of iRoPE, off by default, wrap the children through the existing hooks:

* ``chunk``: a rotation layer's query at position p attends only to the keys of its own chunk,
  positions ⌊p/chunk⌋·chunk..p (``_Chunked``, attention of its own, one call per chunk);
* ``temperature`` a, ``floor_scale`` F: a NoPE layer's queries are multiplied by
  s(p) = 1 + a·ln(1 + ⌊(p + 1)/F⌋) (``_Tempered``): 1 up to p = F - 2, then log-growing.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
from collections import Counter
from functools import cache
from typing import Any

import torch
from torch import Tensor, nn

from posexp import checks
from posexp.errors import PosexpError, choose
from posexp.extension import EXTENSIONS, ExtensionConfig
from posexp.pe.base import (
    PE_REGISTRY,
    LocalAttention,
    LogitTerm,
    PEContext,
    PositionalEncoding,
    build_pe,
    get_pe,
    register_pe,
    takes_extension,
)

log = logging.getLogger("posexp")

DEFAULT_LAYERS = ("rope", "none")
QK = tuple[Tensor, Tensor]


MAX_LAYERS = 4096  # deeper than any model posexp trains by far


def parse_layers(value: Any) -> tuple[str, ...]:
    """The pattern as names: a list, or text such as ``rope*3,none`` (``,`` or ``+`` between
    entries, ``name*n`` for n repeats); a one-line error for anything else."""
    if isinstance(value, str):
        items: list[Any] = re.split(r"[,+]", value)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise PosexpError(
            f"pe.layers must be a list of PE names or text like rope*3+none, got {value!r}"
        )
    runs: list[tuple[str, int]] = []
    for item in items:
        name, star, count = str(item).partition("*")
        count = count.strip() if star else "1"
        if not isinstance(item, str) or not name.strip() or not count.isdigit() or count == "0":
            raise PosexpError(
                f"pe.layers: {item!r} is not a PE name; allowed: name or name*n (n >= 1)"
            )
        runs.append((name.strip(), int(count)))
    # Counted before the names are spelt out: rope*100000000 would take gigabytes to list.
    if (total := sum(n for _, n in runs)) > MAX_LAYERS:
        raise PosexpError(
            f"pe.layers={value!r} names {total:,} layers; a pattern is at most one entry per "
            f"layer of the model (model.n_layers), and at most {MAX_LAYERS:,}"
        )
    names = [name for name, n in runs for _ in range(n)]
    if not names:
        raise PosexpError(f"pe.layers must name at least one PE, got {value!r}")
    return tuple(names)


def parse_windows(value: Any) -> tuple[int | None, ...] | None:
    """``pe.windows``: a list of windows (positive integers, null for full attention) repeated
    cyclically over the layers, like ``pe.layers``; null: the model's ``attention.window``."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value:
        raise PosexpError(
            f"pe.windows must be a list of window sizes or nulls (e.g. [64, null]), got {value!r}"
        )
    return tuple(checks.positive_int("pe.windows", w, allow_none=True) for w in value)


def allowed_children() -> list[str]:
    """The encodings a layer may use: every registered one but embeddings and compositions."""
    return sorted(
        n for n, c in PE_REGISTRY.items() if c.kind != "embedding" and not issubclass(c, Layered)
    )


def check_children(pattern: tuple[str, ...]) -> None:
    """Refuse a name that is unknown, an embedding (it acts once, on the input) or a composition."""
    allowed = ", ".join(allowed_children())
    for name in dict.fromkeys(pattern):
        if name not in PE_REGISTRY:
            raise PosexpError(f"pe.layers: unknown pe {name!r}; allowed: {allowed}")
        cls = PE_REGISTRY[name]
        if cls.kind == "embedding":
            raise PosexpError(
                f"pe.layers: {name!r} is an embedding (it acts once, on the input, not per "
                f"layer); allowed: {allowed}"
            )
        if issubclass(cls, Layered):
            raise PosexpError(f"pe.layers: {name!r} cannot be nested; allowed: {allowed}")


def pattern_text(layers: Any) -> str:
    """The pattern's shortest repeating unit, runs counted: ``rope*3+none`` (labels, errors)."""
    names = parse_layers(layers)
    n = len(names)
    period = next(
        p for p in range(1, n + 1) if n % p == 0 and all(names[i] == names[i % p] for i in range(n))
    )
    runs = [(name, len(list(group))) for name, group in itertools.groupby(names[:period])]
    return "+".join(name if count == 1 else f"{name}*{count}" for name, count in runs)


def query_temperature(positions: torch.Tensor, a: float, floor_scale: int) -> torch.Tensor:
    """s(p) = 1 + a·ln(1 + ⌊(p + 1)/floor_scale⌋) at absolute positions p (fp32)."""
    steps = torch.div(positions + 1, floor_scale, rounding_mode="floor")
    return 1.0 + a * torch.log1p(steps.float())


def _per_query(scale: torch.Tensor) -> torch.Tensor:
    # One factor per query: positions (T,) broadcast over (B, H); per-row (B, T) need a head axis.
    return scale[:, None, :, None] if scale.dim() == 2 else scale[:, None]


class _Wrapped(PositionalEncoding):
    """A child with one change (not registered). It holds the child unregistered, so the
    composition owns each parameter once, and forwards what the model asks of a layer of the
    child's kind apart from what it changes: the kernels get the child itself."""

    def __init__(self, inner: PositionalEncoding) -> None:
        super().__init__(inner.ctx)
        self.__dict__["inner"] = inner
        self.name, self.kind, self.label = inner.name, inner.kind, inner.label
        self.logit_term, self.rotates_cached_keys = inner.logit_term, inner.rotates_cached_keys

    def accepted(self) -> frozenset[str]:  # type: ignore[override]  # the child's, per instance
        """What extension methods may change: the child's."""
        return self.inner.accepted()

    @property
    def max_positions(self) -> int | None:
        return self.inner.max_positions

    def prepare(self, length: int, device: torch.device) -> Any:
        return self.inner.prepare(length, device)


class _Tempered(_Wrapped):
    """A NoPE layer whose queries are scaled by s(p) (``query_temperature``); keys unchanged."""

    def __init__(self, inner: PositionalEncoding, a: float, floor_scale: int) -> None:
        super().__init__(inner)
        self.a, self.floor_scale = a, floor_scale

    def scaled(self, q: Tensor, positions: Tensor) -> Tensor:
        """Queries (B, H, T, d) at ``positions`` times s(p)."""
        return q * _per_query(query_temperature(positions, self.a, self.floor_scale)).to(q.dtype)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, state: Any = None) -> QK:
        q, k = self.inner.rotate(q, k, q_pos, k_pos, state)
        return self.scaled(q, q_pos), k

    def rotate_qk(self, qk: Tensor, positions: Tensor, state: Any = None) -> QK:
        q, k = self.inner.rotate_qk(qk, positions, state)
        return self.scaled(q, positions), k


class _Chunked(_Wrapped):
    """A rotation layer whose queries see only the keys of their own chunk: the model's attention
    reads ``attention_chunk`` (posexp/model/attention.py); rotations are the child's."""

    def __init__(self, inner: PositionalEncoding, chunk: int) -> None:
        super().__init__(inner)
        self.attention_chunk = chunk

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, state: Any = None) -> QK:
        return self.inner.rotate(q, k, q_pos, k_pos, state)

    def rotate_qk(self, qk: Tensor, positions: Tensor, state: Any = None) -> QK:
        return self.inner.rotate_qk(qk, positions, state)

    def rotate_at(self, x: Tensor, positions: Tensor) -> Tensor:
        return self.inner.rotate_at(x, positions)


@cache
def _warn_unused(text: str, n_layers: int, unused: tuple[str, ...]) -> None:
    """Say once per process that part of a pattern acts nowhere (a model built directly)."""
    log.warning(
        f"pe.layers={text} is longer than the model's {n_layers} layers: "
        f"{', '.join(unused)} acts in no layer"
    )


@register_pe("layered")
class Layered(PositionalEncoding):
    """Layer i's encoding is ``layers[i mod len(layers)]`` (``layer``), with iRoPE's extras."""

    # It offers what its most capable child may take (``accepted``): a rotation's methods.
    kind = "rotation"
    label, order, family = "Layered", 90, "composition"

    @classmethod
    def label_for(cls, params: dict[str, Any]) -> str:
        """The pattern and what else makes runs differ (chunk, query temperature and its floor
        scale when set): ``rope*3+none (chunk 64, temperature 0.1)``."""
        text = pattern_text(params.get("layers", DEFAULT_LAYERS))
        extras = [
            f"{word} {params[key]:g}"
            for key, word in (("chunk", "chunk"), ("temperature", "temperature"))
            if params.get(key)
        ]
        if params.get("temperature") and params.get("floor_scale"):
            extras.append(f"floor {params['floor_scale']:g}")
        if params.get("windows"):
            extras.append(
                "window " + "/".join("full" if w is None else str(w) for w in params["windows"])
            )
        if params.get("sinks"):
            extras.append(f"sinks {params['sinks']}")
        if params.get("sink_logit"):
            extras.append("sink logit")
        if params.get("gate"):
            extras.append(f"{params['gate']} gate")
        if params.get("ssmax") is not None:
            extras.append(f"SSMax {params['ssmax']:g}")
        return f"{text} ({', '.join(extras)})" if extras else text

    @classmethod
    def accepted(cls) -> frozenset[str]:
        """Every method some child may take; ``check_built`` refuses one no layer takes."""
        return frozenset().union(*(get_pe(n).accepted() for n in allowed_children()))

    @classmethod
    def accepted_for(cls, params: dict[str, Any]) -> frozenset[str]:
        """What the children of this pattern take, together."""
        pattern = parse_layers(params.get("layers", DEFAULT_LAYERS))
        return frozenset().union(*(get_pe(n).accepted() for n in set(pattern)))

    @classmethod
    def uses_causal_kernel(cls, params: dict[str, Any]) -> bool:
        """Whether any layer's encoding leaves its attention to the model."""
        pattern = parse_layers(params.get("layers", DEFAULT_LAYERS))
        return any(get_pe(n).uses_causal_kernel({}) for n in set(pattern))

    @classmethod
    def check_depth(cls, params: dict[str, Any], n_layers: int) -> None:
        """Refuse a pattern longer than the model: its last entries would act in no layer
        (``pe=irope`` on a 2-layer model never reaches its NoPE layer)."""
        pattern = parse_layers(params.get("layers", DEFAULT_LAYERS))
        if len(pattern) > n_layers:
            unused = list(dict.fromkeys(pattern[n_layers:]))
            raise PosexpError(
                f"pe.layers={pattern_text(pattern)} has {len(pattern)} entries and the model "
                f"{n_layers} layer{'s' * (n_layers != 1)}: entries {n_layers + 1}-{len(pattern)} "
                f"({', '.join(unused)}) would act in no layer; allowed: a pattern of at most "
                f"{n_layers} entries, or model.n_layers >= {len(pattern)}"
            )

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """The pattern's names, each child's settings, and the extras (one-line errors)."""
        pattern = parse_layers(params.get("layers", DEFAULT_LAYERS))
        check_children(pattern)
        per_child = checks.mapping("pe.layer_params", params.get("layer_params"))
        for name in per_child:
            if name not in pattern:
                raise PosexpError(
                    f"pe.layer_params.{name}: no layer uses {name!r}; allowed: "
                    f"{', '.join(dict.fromkeys(pattern))}"
                )
        for name in dict.fromkeys(pattern):
            settings = checks.mapping(f"pe.layer_params.{name}", per_child.get(name))
            checks.known_keys(f"pe.layer_params.{name}", settings, get_pe(name).settings())
            get_pe(name).check_params(settings, seq_len)
        parse_windows(params.get("windows"))
        checks.integer("pe.sinks", params.get("sinks", 0), low=0)
        checks.boolean("pe.sink_logit", params.get("sink_logit", False))
        if params.get("gate") is not None:
            choose("pe.gate", params["gate"], ("headwise", "elementwise"))
        checks.number("pe.ssmax", params.get("ssmax"), "any", allow_none=True)
        chunk = checks.positive_int("pe.chunk", params.get("chunk"), allow_none=True)
        checks.number("pe.temperature", params.get("temperature", 0.0), ">= 0")
        checks.positive_int("pe.floor_scale", params.get("floor_scale"), allow_none=True)
        if chunk is not None and params.get("randomized") is True:
            raise PosexpError(
                "pe.chunk needs positions shared by the batch, and pe.randomized=true draws "
                "them per row; allowed: pe.chunk=null, or pe.randomized=false"
            )

    def __init__(
        self,
        ctx: PEContext,
        layers: Any = DEFAULT_LAYERS,
        layer_params: dict[str, Any] | None = None,
        chunk: int | None = None,
        temperature: float = 0.0,
        floor_scale: int | None = None,
        windows: Any = None,
        sinks: int = 0,
        sink_logit: bool = False,
        gate: str | None = None,
        ssmax: float | None = None,
    ) -> None:
        super().__init__(ctx)
        given = {k: v for k, v in locals().items() if k in self.settings()}  # the arguments
        self.check_params(given, ctx.train_length)
        self.pattern = parse_layers(layers)
        self.text = pattern_text(self.pattern)
        self.windows = parse_windows(windows)
        self.sinks, self.sink_logit = int(sinks), bool(sink_logit)
        self.gate, self.ssmax = gate, ssmax
        need = [n for n in dict.fromkeys(self.pattern) if get_pe(n).needs_even_head_dim]
        if need and ctx.head_dim % 2:  # before a child is built with it
            others = [n for n in allowed_children() if not get_pe(n).needs_even_head_dim]
            raise PosexpError(
                f"pe.layers={self.text}: {', '.join(need)} need{'s' * (len(need) == 1)} an even "
                f"head dim, got "
                f"d_model/heads = {ctx.d_model}/{ctx.n_heads} = {ctx.head_dim}; allowed "
                f"with it: {', '.join(others)}"
            )
        acting = [self.pattern[i % len(self.pattern)] for i in range(ctx.n_layers)]
        self.names = list(dict.fromkeys(acting))
        if unused := tuple(n for n in dict.fromkeys(self.pattern) if n not in self.names):
            _warn_unused(self.text, ctx.n_layers, unused)  # a run's config refuses it first
        method, params = ctx.extension.method, layer_params or {}
        children = []
        for name in self.names:
            # A child that cannot take the run's method is built as if the run had none.
            ext = ctx.extension if takes_extension(get_pe(name), method) else ExtensionConfig()
            child_ctx = dataclasses.replace(ctx, extension=ext, n_layers=acting.count(name))
            children.append(build_pe(name, child_ctx, **dict(params.get(name) or {})))
        self.encodings = nn.ModuleList(children)
        # Layer i: its child's own j-th layer (per-layer children), wrapped once per distinct one.
        extras: dict[int, PositionalEncoding] = {}
        seen: Counter[str] = Counter()
        self._layers: list[PositionalEncoding] = []
        for name in acting:
            pe = children[self.names.index(name)].layer(seen[name])
            seen[name] += 1
            if id(pe) not in extras:
                if chunk is not None and pe.kind == "rotation":
                    extras[id(pe)] = _Chunked(pe, chunk)
                elif temperature and pe.kind == "none":
                    extras[id(pe)] = _Tempered(pe, temperature, floor_scale or ctx.train_length)
                else:
                    extras[id(pe)] = pe
            self._layers.append(extras[id(pe)])
        # What attention must be ready for over all layers (a bias first: it decides the kernel
        # the run's log names, then anything else that is not plain scores).
        terms = {pe.logit_term for pe in self._layers}
        order = (LogitTerm.POSITION_BIAS, LogitTerm.FROM_SCORES, LogitTerm.OWN)
        self.logit_term = next((t for t in order if t in terms), LogitTerm.NONE)

    def local_attention(self, index: int, default: LocalAttention) -> LocalAttention:
        """Layer ``index``'s options: the model's, with what the pattern sets in their place:
        the window ``windows[index mod len(windows)]`` (null: full attention) and the sinks,
        the sink logit, the gate and SSMax."""
        changes: dict[str, Any] = {}
        if self.windows is not None:
            changes["window"] = self.windows[index % len(self.windows)]
            changes["sinks"] = self.sinks
        if self.sink_logit:
            changes["sink_logit"] = True
        if self.gate is not None:
            changes["gate"] = self.gate
        if self.ssmax is not None:
            changes["ssmax"] = self.ssmax
        return dataclasses.replace(default, **changes)

    def layer(self, index: int) -> PositionalEncoding:
        """The encoding acting in layer ``index``."""
        return self._layers[index]

    @property
    def max_positions(self) -> int | None:
        """The fewest positions a layer's encoding can represent (None: any)."""
        limits = [pe.max_positions for pe in self._layers]
        return min((x for x in limits if x is not None), default=None)

    def check_built(self) -> None:
        """Refuse a method that no layer of the model takes."""
        method = self.ctx.extension.method
        if not any(takes_extension(pe, method) for pe in self._layers):
            taken = [m for m in EXTENSIONS if any(takes_extension(pe, m) for pe in self._layers)]
            raise PosexpError(
                f"extension {method!r} applies to no layer of pe.layers={self.text}; "
                f"allowed for this pattern: {', '.join(taken)}"
            )
