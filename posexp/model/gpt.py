"""A small decoder-only transformer (pre-norm, causal) with a pluggable positional encoding.

Reads top to bottom: config, attention, MLP, block, model, generation. The model takes a plain
``ModelConfig`` and knows nothing of Hydra, the CLI or logging.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from posexp.extension.attention import AttentionPlan
from posexp.kernels import onednn_linear
from posexp.kernels.choice import DEFAULT as DEFAULT_KERNELS
from posexp.kernels.choice import KernelChoice
from posexp.model.attention import AttentionCall, BiasKernel, attend, bias_kernel_for
from posexp.model.decoding import beam_search, sample_decode
from posexp.model.gate import OutputGate
from posexp.model.ssmax import QueryLengthScale
from posexp.pe import (
    LocalAttention,
    LogitTerm,
    PEContext,
    PositionalEncoding,
    append_cached,
    build_pe,
    get_pe,
    takes_extension,
)


@dataclass
class ModelConfig:
    """Everything that defines the network (shape, encoding, extension); stored with every
    checkpoint. The kernels it runs on are not part of it (``KernelChoice``, given to ``GPT``)."""

    vocab_size: int
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    pe: str = "rope"
    pe_params: dict[str, Any] = field(default_factory=dict)
    extension: ExtensionConfig = field(default_factory=ExtensionConfig)
    train_length: int = 256
    # Every layer's local attention (``attention.*``; a layered pattern may set its own per layer).
    window: int | None = None
    sinks: int = 0
    sink_logit: bool = False
    # Gated attention ("headwise" / "elementwise", posexp/model/gate.py) and Scalable-Softmax's
    # initial s and b (posexp/model/ssmax.py); None: off.
    gate: str | None = None
    ssmax: float | None = None
    ssmax_bias: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.extension, ExtensionConfig):
            raise TypeError(
                f"ModelConfig.extension must be an ExtensionConfig (ModelConfig.from_dict "
                f"reads the flat dict of a checkpoint), got {self.extension!r}"
            )
        for key in ("vocab_size", "d_model", "n_layers", "train_length"):
            if int(getattr(self, key)) <= 0:
                raise PosexpError(
                    f"model {key} must be a positive integer, got {getattr(self, key)}"
                )
        if self.n_heads <= 0:
            raise PosexpError(f"heads must be a positive integer, got {self.n_heads}")
        if self.d_model % self.n_heads:
            divisors = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0]
            raise PosexpError(
                f"heads={self.n_heads} does not divide d_model={self.d_model}; "
                f"allowed: {', '.join(map(str, divisors))}"
            )
        LocalAttention(self.window, int(self.sinks), bool(self.sink_logit))  # one-line errors
        if get_pe(self.pe).needs_even_head_dim and (self.d_model // self.n_heads) % 2:
            raise PosexpError(
                f"pe={self.pe} needs an even head dim, got d_model/heads = "
                f"{self.d_model}/{self.n_heads} = {self.d_model // self.n_heads}"
            )

    @property
    def head_dim(self) -> int:
        """d_k = d_v = d_model / heads."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for checkpoints: the extension as its flat YAML layout."""
        return {**asdict(self), "extension": self.extension.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        """The config ``to_dict`` wrote (a checkpoint's ``meta.json``), the extension typed again."""
        fields = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(fields) - known):
            # Kernels are no part of the network (KernelChoice): a checkpoint naming them was
            # written before posexp 0.1.0, and such run dirs are trained again.
            raise PosexpError(
                f"checkpoint model config has unknown fields {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(known))} (a run from before posexp 0.1.0?)"
            )
        fields["extension"] = ExtensionConfig.from_dict(
            fields.get("extension") or {"method": "none"}
        )
        return cls(**fields)


@dataclass
class KVCache:
    """Per layer, the keys, values and positions seen so far; ``length``: the next position.

    A layer's dict holds buffers ``k``, ``v``, ``pos`` with spare room at the end and the filled
    part's size under ``k_len``, ``v_len``, ``pos_len`` (``posexp.pe.append_cached``), and
    whatever an encoding with attention of its own carries.
    """

    layers: list[dict[str, Any]]
    length: int = 0
    memo: dict[str, Any] = field(default_factory=dict)  # what the PE carries between steps


# What a layer's cache holds when nothing but its keys, values and positions is cached: the one
# layout ``drop_unseen_keys`` may thin out.
_PLAIN_CACHE = {"k", "v", "pos", "k_len", "v_len", "pos_len"}


def drop_unseen_keys(cache: dict[str, Any], window: int, sinks: int, last: int) -> None:
    """Evict from a windowed layer's ``cache`` the keys no later query can see: positions at
    most ``last - window`` (``last``: the latest query's) and not below ``sinks``. Done once
    ``window`` of them have piled up, so generation holds O(W + N) keys and each key is moved
    O(1) times on average. Left alone: per-row positions, or state an encoding keeps per key."""
    pos = cache.get("pos")
    if pos is None or pos.dim() != 1 or not set(cache) <= _PLAIN_CACHE:
        return
    n = cache["pos_len"]
    held = pos[:n]
    keep = (held > last - window) | (held < sinks)
    if n - int(keep.sum()) < window:
        return
    idx = keep.nonzero().flatten()
    for key in ("k", "v", "pos"):
        dim = 2 if cache[key].dim() == 4 else cache[key].dim() - 1
        kept = cache[key].narrow(dim, 0, n).index_select(dim, idx)
        cache[key].narrow(dim, 0, idx.numel()).copy_(kept)
        cache[f"{key}_len"] = idx.numel()


class CausalSelfAttention(nn.Module):
    """Multi-head attention: 3·d² for Q/K/V plus d² for W^O, whatever the head count."""

    def __init__(
        self,
        cfg: ModelConfig,
        plan: AttentionPlan | None = None,
        local: LocalAttention | None = None,
    ) -> None:
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        local = local or LocalAttention()
        self.window, self.sinks = local.window, local.sinks
        # gpt-oss's sink: one logit per head, zero at first (its initialisation is unpublished).
        self.sink_logit = nn.Parameter(torch.zeros(cfg.n_heads)) if local.sink_logit else None
        self.gate = OutputGate(local.gate, cfg.d_model, cfg.n_heads) if local.gate else None
        self.ssmax = (
            QueryLengthScale(cfg.n_heads, local.ssmax, local.ssmax_bias)
            if local.ssmax is not None
            else None
        )
        # A training-free extension method's change to attention (posexp/extension/attention.py).
        self.plan = plan
        self.query_scale = plan.query_scale if plan is not None else None
        self.remaps_positions = plan is not None and plan.remaps_positions
        # The windows (and their sinks) that hide a key from every later query: the layer's, a
        # method's (StreamingLLM, LM-Infinite); generation evicts such keys from the cache.
        self.evictions = [(self.window, self.sinks)] if self.window is not None else []
        if plan is not None and plan.window_sinks is not None:
            self.evictions.append(plan.window_sinks)
        self.qkv = onednn_linear.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = onednn_linear.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(
        self,
        x: torch.Tensor,
        pe: PositionalEncoding,
        q_pos: torch.Tensor,
        pe_state: Any = None,
        cache: dict[str, torch.Tensor] | None = None,
        need_weights: bool = False,
        bias_kernel: BiasKernel | None = None,
        kernels: KernelChoice = DEFAULT_KERNELS,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend over the cached and current tokens; ``pe_state`` is what ``pe.prepare`` returned."""
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim)
        k_pos = q_pos if cache is None else append_cached(cache, "pos", q_pos)
        if pe.logit_term is LogitTerm.OWN:
            # FoX, stick-breaking, PaTH: the encoding attends (and keeps its cache) itself.
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # (B, H, T, d) views
            y, weights = pe.own_attention(q, k, v, x, q_pos, k_pos, pe_state, cache, need_weights)
        else:
            q, k, v = self._rotated(qkv, pe, q_pos, k_pos, pe_state, cache)
            if self.query_scale is not None:
                # A factor per query position: it commutes with the rotation.
                scale = self.query_scale(q_pos).to(q.dtype)
                q = q * (scale[:, None, :, None] if scale.dim() == 2 else scale[:, None])
            if self.ssmax is not None:
                seen = None if self.window is None else self.window + self.sinks
                q = self.ssmax(q, q_pos, seen)
            dropout = self.dropout * self.training
            y, weights = attend(
                AttentionCall(
                    q,
                    k,
                    v,
                    q_pos,
                    k_pos,
                    pe,
                    self.plan,
                    need_weights,
                    bias_kernel,
                    dropout,
                    kernels,
                    self.window,
                    self.sinks,
                    self.sink_logit,
                )
            )
            for window, sinks in self.evictions if cache is not None else ():
                drop_unseen_keys(cache, window, sinks, int(q_pos.max()))
        if self.gate is not None:
            y = self.gate(y, x)
        return self.out(y.transpose(1, 2).reshape(B, T, C)), weights

    def _rotated(
        self,
        qkv: torch.Tensor,
        pe: PositionalEncoding,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        pe_state: Any,
        cache: dict[str, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v (B, H, T, d) as attention takes them, keys and values added to ``cache``."""
        if cache is None and q_pos.dim() == 1 and not self.remaps_positions:
            # Training and evaluation: q and k share their positions, rotated in one pass. split
            # and unbind (not indexing) keep the backward to one concatenation: indexing would
            # give each slice's gradient a zero-filled copy of qkv and add them.
            qk, v = qkv.split((2, 1), dim=2)
            q, k = pe.rotate_qk(qk, q_pos, pe_state)
            return q, k, v.squeeze(2).transpose(1, 2)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        # The keys are rotated before they are cached (at their own positions), after (every
        # cached key at the current length: dynamic NTK), or never (a method that remaps
        # positions rotates each pair at positions that depend on both sides).
        after = pe.rotates_cached_keys and cache is not None
        if not self.remaps_positions and not after:
            q, k = pe.rotate(q, k, q_pos, q_pos, pe_state)
        if cache is not None:
            k, v = append_cached(cache, "k", k), append_cached(cache, "v", v)
        if after and not self.remaps_positions:
            q, k = pe.rotate(q, k, q_pos, k_pos, pe_state)
        return q, k, v


def check_local(local: LocalAttention, pe: PositionalEncoding) -> None:
    """Refuse a window or sink logit where the layer's attention is not the model's softmax over
    q·k (an encoding with attention of its own, or scores from scores); one-line errors."""
    if local.ssmax is not None and pe.logit_term is LogitTerm.OWN:
        raise PosexpError(
            f"attention.ssmax cannot apply to pe={pe.name}: it computes its own attention; "
            f"allowed: a PE of kind none, rotation, bias or content"
        )
    if not local.changes_attention:
        return
    if pe.logit_term in (LogitTerm.OWN, LogitTerm.FROM_SCORES):
        raise PosexpError(
            f"attention.window/sink_logit cannot apply to pe={pe.name}: it computes its own "
            f"attention; allowed: a PE of kind none, rotation or bias"
        )


class MLP(nn.Module):
    """Position-wise feed-forward network with GELU."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        hidden = cfg.d_ff or 4 * cfg.d_model
        self.up = onednn_linear.Linear(cfg.d_model, hidden)
        self.down = onednn_linear.Linear(hidden, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """GELU(x W_up) W_down."""
        return self.dropout(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    """Pre-norm transformer block: x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(
        self,
        cfg: ModelConfig,
        plan: AttentionPlan | None = None,
        local: LocalAttention | None = None,
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=False)
        self.attn = CausalSelfAttention(cfg, plan, local)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=False)
        self.mlp = MLP(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        pe: PositionalEncoding,
        positions: torch.Tensor,
        pe_state: Any = None,
        cache: dict[str, Any] | None = None,
        need_weights: bool = False,
        bias_kernel: BiasKernel | None = None,
        kernels: KernelChoice = DEFAULT_KERNELS,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Apply the block; returns the new residual stream and the attention weights if asked."""
        a, weights = self.attn(
            self.ln1(x), pe, positions, pe_state, cache, need_weights, bias_kernel, kernels
        )
        x = x + self.dropout(a)
        return x + self.mlp(self.ln2(x)), weights


class GPT(nn.Module):
    """Token embedding, positional encoding, N blocks, final norm, tied LM head; it runs on the
    kernels it is given (``kernels``, or ``use_kernels`` later), which change no weight."""

    def __init__(self, cfg: ModelConfig, kernels: KernelChoice | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        shape = (cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.train_length)
        self.pe = build_pe(cfg.pe, PEContext(*shape, cfg.extension, cfg.n_layers), **cfg.pe_params)
        plan = cfg.extension.attention_plan()  # training-free methods only, else None
        # A composition (iRoPE) applies the method in the layers whose encoding takes it.
        model_local = LocalAttention(
            cfg.window, cfg.sinks, cfg.sink_logit, cfg.gate, cfg.ssmax, cfg.ssmax_bias
        )
        blocks = []
        for i in range(cfg.n_layers):
            layer_plan = plan if takes_extension(self.pe.layer(i), cfg.extension.method) else None
            local = self.pe.local_attention(i, model_local)
            check_local(local, self.pe.layer(i))
            blocks.append(Block(cfg, layer_plan, local))
        self.blocks = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=False)
        self.lm_head = onednn_linear.Linear(cfg.d_model, cfg.vocab_size)
        self.lm_head.weight = self.tok_emb.weight
        self.apply(self._init)
        for name, p in self.named_parameters():
            # GPT-2: residual projections scaled down so the stream's variance stays flat.
            if name.endswith(("attn.out.weight", "mlp.down.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layers))
        self.use_kernels(kernels or KernelChoice())

    def use_kernels(self, kernels: KernelChoice) -> GPT:
        """Run on ``kernels`` from now on (the linear layers, attention, an encoding's own
        attention); the weights stay as they are. Returns the model."""
        self.kernels = kernels
        for module in self.modules():
            if isinstance(module, onednn_linear.Linear):
                module.kernel = kernels.linear
            elif isinstance(module, PositionalEncoding):
                module.kernels = kernels
        return self

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            # A padding row gets no gradient: it must start (and so stay) at zero.
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()

    def num_params(self) -> int:
        """Number of distinct trainable parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        on_attention: Callable[[int, torch.Tensor], None] | None = None,
    ) -> dict[str, Any]:
        """Logits (and loss if targets are given; -100 targets are ignored) for token ids (B, T).

        ``need_weights``: every layer's attention probabilities (B, H, T, T) under
        ``out["attention"]``. ``on_attention(layer, weights)``: each layer's probabilities handed
        over as soon as that layer has run and then dropped, so no more than one layer's
        (B, H, T, T) is held at a time (statistics at long lengths). Both take the explicit
        softmax of each layer (``attend``'s weights: the encoding's bias, window, sinks and sink
        logit, or the encoding's own attention, as the layer applies them)."""
        T = idx.shape[1]
        if on_attention is not None:
            need_weights = True
        from_zero = positions is None and (cache is None or cache.length == 0)
        if positions is None:
            # Python ints, so neither a GPU sync nor a torch.compile graph break is needed.
            start = cache.length if cache is not None else 0
            positions = torch.arange(start, start + T, device=idx.device)
            length = start + T
        else:
            length = int(positions.max()) + 1
        if cache is not None:
            cache.length = length
        # A bias PE over positions 0..T-1 (training, evaluation, a prompt): a kernel adds the bias
        # inside attention where one runs (bias_kernel_for); decoding steps keep SDPA.
        inside = from_zero and T > 1 and not need_weights
        dropout = self.cfg.dropout if self.training else 0.0
        # Computed once per forward and encoding (RoPE: cos/sin tables), handed to its layers.
        prepared: dict[int, tuple[Any, BiasKernel | None]] = {}
        layer_pes = [self.pe.layer(i) for i in range(len(self.blocks))]
        for pe in layer_pes:
            if id(pe) not in prepared:
                kernel = (
                    bias_kernel_for(pe, length, self.kernels.bias, idx.device, dropout)
                    if pe.has_bias and inside
                    else None
                )
                prepared[id(pe)] = (pe.prepare(length, idx.device), kernel)
        x = self.pe.embed_tokens(
            self.tok_emb(idx) * math.sqrt(self.cfg.d_model),
            idx,
            positions,
            None if cache is None else cache.memo,
        )
        weights = []
        for i, block in enumerate(self.blocks):
            pe = layer_pes[i]
            pe_state, kernel = prepared[id(pe)]
            layer_cache = None if cache is None else cache.layers[i]
            x, w = block(
                x, pe, positions, pe_state, layer_cache, need_weights, kernel, self.kernels
            )
            if need_weights and w is None:
                raise PosexpError(
                    f"pe={pe.name} in layer {i} gives no attention probabilities "
                    f"(its attention path returns none)"
                )
            if on_attention is not None:
                on_attention(i, w)
                continue
            weights.append(w)
        logits = self.lm_head(self.ln_f(x))
        out: dict[str, Any] = {"logits": logits}
        if targets is not None:
            out["loss"] = F.cross_entropy(
                logits.float().view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100
            )
        if need_weights and on_attention is None:
            out["attention"] = weights
        return out

    def new_cache(self) -> KVCache:
        """An empty key/value cache, one dict per layer."""
        return KVCache([{} for _ in self.blocks])

    @torch.no_grad()
    def generate(
        self,
        prompts: torch.Tensor,
        max_new_tokens: int | Sequence[int],
        temperature: float = 0.0,
        top_k: int | None = None,
        eos_id: int | None = None,
        generator: torch.Generator | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.6,
        on_step: Callable[[int], None] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Continue prompts (B, P), row r's being its first ``lengths[r]`` tokens (default all),
        with a KV cache: greedy, sampled or beam search (posexp/model/decoding.py).

        ``on_step(n)`` hears of each decoding step of n rows (a progress display's hook).
        """
        if beam_size > 1:
            if temperature > 0:
                raise PosexpError(
                    f"beam search decodes deterministically; got beam {beam_size} "
                    f"with temperature {temperature} (use temperature 0)"
                )
            return self.beam_search(
                prompts, max_new_tokens, beam_size, length_penalty, eos_id, on_step, lengths
            )[0]
        return sample_decode(
            self.step,
            self.new_cache(),
            prompts,
            max_new_tokens,
            temperature,
            top_k,
            eos_id,
            generator,
            lengths,
            on_step,
        )

    def step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Next-token logits (B, V) after ``tokens`` (B, T), extending ``cache``."""
        return self(tokens, cache=cache)["logits"][:, -1]

    @torch.no_grad()
    def beam_search(
        self,
        prompts: torch.Tensor,
        max_new_tokens: int | Sequence[int],
        beam_size: int = 4,
        length_penalty: float = 0.6,
        eos_id: int | None = None,
        on_step: Callable[[int], None] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Best beam-search hypothesis per row (eos-padded) and its score (posexp/model/decoding.py)."""
        return beam_search(
            self.step,
            self.new_cache(),
            prompts,
            max_new_tokens,
            beam_size,
            length_penalty,
            eos_id,
            lengths,
            on_step,
        )
