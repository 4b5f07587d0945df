"""The interface every positional encoding implements, and the registry that names them.

A positional encoding can act at three points of a decoder, and each subclass overrides only
the hooks it needs (all default to "do nothing"):

* ``embed``   adds position information to the token embeddings (sinusoidal, learned);
* ``rotate``  transforms queries and keys per head (RoPE);
* ``bias``    returns an additive attention-logit bias (ALiBi, T5);
* ``score_bias`` returns an additive logit term computed from the queries and their scores
  (content-dependent positions: CoPE);
* ``own_attention`` computes attention itself from q, k, v and the layer's input (kind
  ``attention``: FoX's forget gate, stick-breaking, PaTH's Householder transitions).

An encoding may act differently in each layer (``layer(i)``: per-layer parameters, or a
composition of encodings such as iRoPE); by default every layer gets the encoding itself.

Each encoding declares its own constraints as class attributes, so no other module names it:
``kind`` (none, embedding, rotation or bias), the kinds of extension method it takes
(``accepts``; by default derived from its kind), and whether it needs an even head dim. A
config-level check (e.g. a maximum length) goes in ``check_params``. How reports show it is
declared too (``label``, ``order``, ``family``; read through ``describe_pe``). Positions are
integer tensors of shape ``(T,)`` shared by the batch, or ``(B, T)`` per row.

A new encoding is one module in this package, found by name when the package is imported,
plus ``configs/pe/<name>.yaml``.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from posexp.errors import PosexpError
from posexp.extension import EXTENSIONS, ExtensionConfig, get_extension
from posexp.kernels.choice import KernelChoice
from posexp.pe.distance_bias import DistanceBias, by_distance
from posexp.registry import Registry

KINDS = ("none", "embedding", "rotation", "bias", "content", "attention")
# What the extension methods may change, for each kind (see posexp/extension/registry.py).
# Scaling the logits ("logits") suits any attention; remapping relative distances
# ("relative_positions") needs a rotation that can be applied at any position (``rotate_at``).
ACCEPTS_BY_KIND = {
    "none": frozenset({"logits"}),
    "bias": frozenset({"logits"}),
    "content": frozenset({"logits"}),
    # Attention of its own (no softmax over q·k, or a data-dependent bias): no method applies.
    "attention": frozenset(),
    "embedding": frozenset({"positions", "logits"}),
    "rotation": frozenset({"positions", "frequencies", "relative_positions", "logits"}),
}


class LogitTerm(enum.Enum):
    """What an encoding adds to attention's logits q·k/√d: it decides which kernel can run it."""

    NONE = "none"  # nothing (a rotation, if any, acts on q and k first): SDPA's causal kernel
    POSITION_BIAS = "position_bias"  # a bias from the positions (``bias``): ALiBi, T5, FIRE...
    FROM_SCORES = "from_scores"  # a term computed from the scores themselves (``score_bias``):
    # an explicit softmax, one chunk of queries at a time (CoPE)
    OWN = "own"  # the encoding computes attention itself (``own_attention``; kind attention)


@dataclass
class PEContext:
    """What every positional encoding may need to know about the model it sits in."""

    d_model: int
    n_heads: int
    head_dim: int
    train_length: int
    # Checked where it was built; a null original_length becomes the training length here.
    extension: ExtensionConfig = field(default_factory=ExtensionConfig)
    n_layers: int = 1  # encodings with per-layer parameters or patterns (``layer``) need it

    def __post_init__(self) -> None:
        if not isinstance(self.extension, ExtensionConfig):
            raise TypeError(
                f"PEContext.extension must be an ExtensionConfig, got {self.extension!r}"
            )
        self.extension = self.extension.with_original_length(self.train_length)


@dataclass(frozen=True)
class LocalAttention:
    """One layer's attention options: the last ``window`` keys (the query's own included;
    None: every earlier key), the first ``sinks`` positions always, whether a learned per-head
    sink logit absorbs part of the attention mass (gpt-oss), an output ``gate`` (headwise,
    elementwise) and Scalable-Softmax's initial ``ssmax`` s and ``ssmax_bias`` b (None: off)."""

    window: int | None = None
    sinks: int = 0
    sink_logit: bool = False
    gate: str | None = None
    ssmax: float | None = None
    ssmax_bias: float | None = None

    def __post_init__(self) -> None:
        if self.window is not None and self.window < 1:
            raise PosexpError(f"window must be a positive integer or null, got {self.window}")
        if self.sinks < 0:
            raise PosexpError(f"sinks must be an integer >= 0, got {self.sinks}")

    @property
    def changes_attention(self) -> bool:
        """False when every layer sees every earlier key as plain softmax attention does."""
        return self.window is not None or self.sink_logit


class PositionOutOfRange(PosexpError):
    """A position the encoding cannot represent (past a learned table, past xPos's range).

    ``reason``: the same words at every length, for evaluation tables (default: the message)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class PositionalEncoding(nn.Module):
    """Base class: no position information at all (NoPE behaviour)."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "none"
    # What it adds to the logits, hence the attention kernel it needs (posexp/model/attention.py).
    logit_term: ClassVar[LogitTerm] = LogitTerm.NONE
    # What extension methods may change for this encoding (None: what its kind allows).
    accepts: ClassVar[frozenset[str] | None] = None
    needs_even_head_dim: ClassVar[bool] = False
    # True when the encoding reads digit tokens (Abacus): the run config then requires a task
    # with numbers (``Task.numeric``) and the byte tokenizer.
    reads_digits: ClassVar[bool] = False
    # Local attention (iRoPE's RoPE layers): a query at p sees only the keys of chunk
    # ⌊p/attention_chunk⌋; None: every earlier key. The model's attention applies it.
    attention_chunk: int | None = None
    # True when cached keys must be stored before rotation and re-rotated each step, because
    # the rotation depends on the current length (dynamic NTK).
    rotates_cached_keys: bool = False
    # The kernels the model runs on (set by ``GPT.use_kernels``): what an encoding with attention
    # of its own (FoX) may run, as the model's attention decides for the position biases.
    kernels: KernelChoice = KernelChoice()
    # How reports show it (posexp/commands/report), so no report names an encoding: its label
    # in tables and legends, its place in their order (lower first; undeclared ones go after
    # the declared), and the family that papers' findings name (configs/findings.yaml).
    label: ClassVar[str] = ""  # "": the registered name
    order: ClassVar[int] = 1000
    family: ClassVar[str] = ""  # "": its kind

    def __init__(self, ctx: PEContext) -> None:
        super().__init__()
        self.ctx = ctx

    @property
    def has_bias(self) -> bool:
        """True when attention needs ``bias``; SDPA then cannot use its is_causal fast path."""
        return self.logit_term is LogitTerm.POSITION_BIAS

    @property
    def flex_kind(self) -> str | None:
        """The FlexAttention kernel kind its attention can take ("bias", "gate"), or None."""
        return "bias" if self.has_bias else None

    @classmethod
    def accepted(cls) -> frozenset[str]:
        """What extension methods may change for this encoding."""
        return ACCEPTS_BY_KIND[cls.kind] if cls.accepts is None else cls.accepts

    @classmethod
    def label_for(cls, params: dict[str, Any]) -> str:
        """How reports name the encoding with these settings: the class label unless a setting
        makes another method of it (PaTH with a forget gate, a layered pattern)."""
        return cls.label or cls.name

    @classmethod
    def uses_causal_kernel(cls, params: dict[str, Any]) -> bool:
        """Whether training runs its attention on the kernel ``attention.causal`` chooses (the
        model's causal attention): not where the encoding computes attention itself."""
        return cls.logit_term in (LogitTerm.NONE, LogitTerm.POSITION_BIAS)

    @classmethod
    def accepted_for(cls, params: dict[str, Any]) -> frozenset[str]:
        """What extension methods may change under these settings: ``accepted`` unless the
        settings decide it (a layered pattern takes what its layers take)."""
        return cls.accepted()

    @property
    def max_positions(self) -> int | None:
        """How many positions the encoding can represent; None when any number."""
        return None

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """The ``pe.*`` keys this encoding takes: its constructor's arguments after ``ctx``."""
        return tuple(list(inspect.signature(cls.__init__).parameters)[2:])

    @classmethod
    def check_params(cls, params: dict[str, Any], seq_len: int) -> None:
        """Refuse settings that cannot work at training length ``seq_len`` (one-line errors)."""

    def check_built(self) -> None:
        """Refuse, at model build, settings only the built encoding can judge (one-line errors;
        e.g. per-pair lists against the rotated dims)."""

    @classmethod
    def position_limit(cls, params: dict[str, Any], seq_len: int) -> int | None:
        """How many positions these settings can represent (a learned table's rows); None: any."""
        return None

    def prepare(self, length: int, device: torch.device) -> Any:
        """Per-forward state for positions below ``length`` (RoPE: its cos/sin tables), or None.

        Called once per forward; what it returns is handed to ``rotate`` by the attention of
        every layer, so the encoding keeps no hidden state between calls.
        """
        return None

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Return token embeddings ``x`` (B, T, d) with position information added."""
        return x

    def embed_tokens(
        self,
        x: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        memo: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        """``embed`` for encodings that read the tokens (B, T) too; ``memo`` (the KV cache's)
        keeps what they carry between decoding steps. By default: ``embed``."""
        return self.embed(x, positions)

    def rotate(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return queries and keys (B, H, T, head_dim) with position information applied."""
        return q, k

    def rotate_qk(
        self, qk: torch.Tensor, positions: torch.Tensor, state: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys packed as (B, T, 2, H, d), both at ``positions`` (T,): ``rotate`` of
        each, returned as (B, H, T, d). An encoding may do both in one pass (RoPE)."""
        q, k = (t.transpose(1, 2) for t in qk.unbind(2))
        return self.rotate(q, k, positions, positions, state)

    def rotate_at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate queries or keys (B, H, T, head_dim) at any (float) positions (T,): what a
        method remapping relative positions (Self-Extend, ReRoPE) needs from a rotation."""
        raise NotImplementedError(f"pe {self.name!r} has no rotation to apply at other positions")

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Return the additive logit bias (H, Tq, Tk) or (B, H, Tq, Tk), causal part excluded."""
        raise NotImplementedError

    def score_bias(self, q: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Kind ``content``: the additive logit term for queries ``q`` (B, H, Tq, d) given their
        scaled scores (B, H, Tq, Tk), -inf where the causal mask hides a key."""
        raise NotImplementedError

    def local_attention(self, index: int, default: LocalAttention) -> LocalAttention:
        """Layer ``index``'s attention options: the model's own (``default``, from
        ``attention.*``) unless the encoding sets some per layer (a layered pattern)."""
        return default

    def layer(self, index: int) -> PositionalEncoding:
        """The encoding acting in layer ``index`` (0-based): itself, unless it has per-layer
        parameters (FoX's gates) or is a composition of encodings (iRoPE)."""
        return self

    def own_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        x: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        state: Any = None,
        cache: dict[str, Any] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Kind ``attention``: causal attention (B, H, Tq, d) of unrotated ``q``, ``k``, ``v``
        given the layer's input ``x`` (B, Tq, d_model), and the weights (B, H, Tq, Tk) if asked.
        With a KV cache (the layer's dict; ``k_pos`` already holds every position), the encoding
        appends its own keys, values and whatever it carries (``append_cached``)."""
        raise NotImplementedError(f"pe {self.name!r} has no attention of its own")

    def far_bias(self) -> tuple[int, torch.Tensor] | None:
        """(w, c) when the bias depends on the distance alone and is c (one value per head) at
        every distance >= w: attention then scores the far pairs in one unbiased flash call
        (``posexp/model/near_far.py``). None: no such distance."""
        return None

    def score_mod(self, length: int | None = None) -> Callable[..., torch.Tensor] | None:
        """The bias as FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx)``, where query and
        key positions equal their indices, for up to ``length`` of them where given (tables may
        be sized by it); None: attention takes the ``bias`` path."""
        return None

    # True when ``bias`` depends on the distance i - j alone (ALiBi, T5, Kerple, Sandwich).
    bias_by_distance: ClassVar[bool] = False

    def distance_bias(self, length: int, device: torch.device) -> DistanceBias | None:
        """The bias for positions 0..length-1 as tables by distance (posexp's CPU kernel reads
        them); by default ``bias`` itself where it depends on the distance alone, else None."""
        if not self.bias_by_distance:
            return None
        distance = torch.arange(length, device=device)
        return by_distance(self.bias(distance, distance[:1], torch.float32))


def append_cached(cache: dict[str, Any], key: str, t: torch.Tensor) -> torch.Tensor:
    """Cached entries of ``key`` followed by ``t``, along the sequence dim (4-D: dim 2, else the
    last), kept in a buffer with spare room (the filled size under ``<key>_len``).

    The buffer grows by doubling, so a long generation copies each entry O(1) times on average
    instead of re-concatenating the whole cache at every token.
    """
    dim = 2 if t.dim() == 4 else t.dim() - 1
    n = cache.get(f"{key}_len", 0)
    need = n + t.shape[dim]
    buf = cache.get(key)
    if buf is None or buf.shape[dim] < need:
        shape = list(t.shape)
        shape[dim] = max(need, 2 * n)
        grown = t.new_empty(shape)
        if n:
            grown.narrow(dim, 0, n).copy_(buf.narrow(dim, 0, n))
        buf = cache[key] = grown
    buf.narrow(dim, n, t.shape[dim]).copy_(t)
    cache[f"{key}_len"] = need
    return buf.narrow(dim, 0, need)


def cached(cache: dict[str, Any], key: str) -> torch.Tensor | None:
    """The filled part of the cached ``key`` (``append_cached``'s layout), or None if empty."""
    buf = cache.get(key)
    if buf is None:
        return None
    n = cache[f"{key}_len"]
    return buf.narrow(2 if buf.dim() == 4 else buf.dim() - 1, 0, n)


PE_REGISTRY: Registry[type[PositionalEncoding]] = Registry("pe")


def register_pe(name: str) -> Callable[[type[PositionalEncoding]], type[PositionalEncoding]]:
    """Class decorator that registers a positional encoding under ``name``."""

    def wrap(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
        if cls.kind not in KINDS:
            raise ValueError(f"pe {name!r}: kind must be one of {KINDS}, got {cls.kind!r}")
        cls.logit_term = logit_term_of(name, cls)
        PE_REGISTRY.add(name, cls)
        cls.name = name
        return cls

    return wrap


# What these kinds add to the logits: declared or not, else the model never calls bias() etc.
TERM_OF_KIND = {"bias": "POSITION_BIAS", "content": "FROM_SCORES", "attention": "OWN"}


def logit_term_of(name: str, cls: type[PositionalEncoding]) -> LogitTerm:
    """The class's logit term, the one its kind implies where it declares none."""
    declared = getattr(cls, "logit_term", LogitTerm.NONE)
    implied = LogitTerm[TERM_OF_KIND[cls.kind]] if cls.kind in TERM_OF_KIND else declared
    if declared not in (implied, LogitTerm.NONE):
        raise ValueError(f"pe {name!r}: kind {cls.kind!r} adds {implied}, not {declared}")
    return implied


UNKNOWN_ORDER = 10**6  # a name no encoding is registered under (a run of a removed PE) sorts last


@dataclass(frozen=True)
class PEDisplay:
    """How reports show a run's encoding: what its class declares, with randomized positions."""

    name: str
    randomized: bool
    label: str
    order: int
    family: str

    @property
    def sort_key(self) -> tuple[int, str, bool]:
        """Declared order, then name; the randomized variant right after the plain one."""
        return self.order, self.name, self.randomized


def describe_pe(
    name: str, randomized: bool = False, params: dict[str, Any] | None = None
) -> PEDisplay:
    """Label, order and family of the encoding ``name`` (with ``params``, the label its settings
    give it); an unknown name shows as itself, last."""
    cls = PE_REGISTRY[name] if name in PE_REGISTRY else None
    label, order, family = (
        (cls.label or name, cls.order, cls.family or cls.kind) if cls else (name, UNKNOWN_ORDER, "")
    )
    if cls is not None and params:
        label = cls.label_for(params)
    return PEDisplay(
        name, randomized, f"{label} + randomized" if randomized else label, order, family
    )


def get_pe(name: str) -> type[PositionalEncoding]:
    """The encoding class registered as ``name`` (a one-line error listing the names if none)."""
    return PE_REGISTRY.get(name)


def build_pe(name: str, ctx: PEContext, **params: Any) -> PositionalEncoding:
    """Instantiate the positional encoding registered as ``name``, checked as built."""
    pe = get_pe(name)(ctx, **params)
    pe.check_built()
    return pe


def accepted_extensions(pe: str, params: dict[str, Any] | None = None) -> list[str]:
    """The extension methods ``pe`` can take, in registry order (always including none); with
    its settings ``params``, those these settings take (a layered pattern's layers)."""
    cls = get_pe(pe)
    accepts = cls.accepted() if params is None else cls.accepted_for(params)
    return [
        name for name, m in EXTENSIONS.items() if m.acts_on == "nothing" or m.acts_on in accepts
    ]


def takes_extension(pe: PositionalEncoding | type[PositionalEncoding], method: str) -> bool:
    """True when the encoding (class or a built layer of a composition) can take ``method``."""
    acts_on = get_extension(method).acts_on
    return acts_on == "nothing" or acts_on in pe.accepted()


def check_extension(pe: str, method: str, params: dict[str, Any] | None = None) -> None:
    """One rule for every command: a method the encoding cannot take is an error naming those it can."""
    get_extension(method)
    allowed = accepted_extensions(pe, params)
    if method not in allowed:
        kind = get_pe(pe).kind
        raise PosexpError(
            f"extension {method!r} does not apply to pe {pe!r} ({kind}); "
            f"allowed for {pe}: {', '.join(allowed)}"
        )


def position_divisor(extension: ExtensionConfig) -> float:
    """How much an absolute-position encoding divides positions by: s under PI, else 1."""
    return extension.registered.position_divisor(extension.factor)
