"""The models `bench_train.py` times side by side, one training step each, and where a step's time
goes (torch.profiler, by kind of work).

Every model has the same shape (d_model, layers, heads, seq_len, byte vocab, MLP 4·d_model, no
biases in the linear layers) and trains with the same step: forward to a mean cross-entropy,
backward, gradient clipping at 1.0, AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1 on
matrices), zero_grad(set_to_none). The peers a user would pick instead:

- ``plain``: a nanoGPT-style GPT written here (pre-norm, fused QKV, SDPA ``is_causal``, GELU MLP,
  tied embeddings, learned positions, N(0, 0.02) init);
- ``litgpt``: litgpt's ``GPT`` with RoPE over the whole head, LayerNorm, GPT-NeoX MLP;
- ``xtransformers``: x-transformers' ``TransformerWrapper`` + ``Decoder`` with rotary embeddings
  over the whole head (``rotary_emb_dim`` = head dim) and SDPA (``attn_flash``).

litgpt and x-transformers come from the optional ``bench`` extra (``pip install -e '.[bench]'``,
best in a virtualenv of its own: litgpt pins an older huggingface-hub than transformers 5 needs);
where one is missing its rows are skipped with a line that says so.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from posexp.model import GPT, ModelConfig
from posexp.runtime.optim import build_optimizer
from posexp.runtime.precision import autocast as precision_autocast

Step = Callable[[], None]


class PlainBlock(nn.Module):
    """nanoGPT's block: pre-norm, fused QKV, SDPA is_causal, GELU MLP, no biases."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model, bias=False), nn.LayerNorm(d_model, bias=False)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.fc = nn.Linear(d_model, 4 * d_model, bias=False)
        self.down = nn.Linear(4 * d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x + attn(ln(x)), then + mlp(ln(x))."""
        B, T, C = x.shape
        q, k, v = (
            t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            for t in self.qkv(self.ln1(x)).split(C, dim=2)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.down(F.gelu(self.fc(self.ln2(x))))


class PlainGPT(nn.Module):
    """The baseline: a nanoGPT-style GPT in plain PyTorch, the shape of posexp's model."""

    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, length: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(length, d_model)
        self.blocks = nn.ModuleList(PlainBlock(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model, bias=False)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight
        for p in self.parameters():  # N(0, 0.02) as nanoGPT (N(0, 1) makes denormal gradients)
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits and the mean cross-entropy, computed in fp32."""
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return {"logits": logits, "loss": loss}


class LogitsToLoss(nn.Module):
    """A peer that returns logits, given posexp's ``model(idx, targets)["loss"]`` interface."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """The wrapped model's logits and their mean cross-entropy in fp32."""
        logits = self.model(idx)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return {"logits": logits, "loss": loss}


def litgpt_model(cfg: ModelConfig, seq_len: int) -> nn.Module:
    """litgpt's GPT at posexp's shape: full-head RoPE, LayerNorm, GPT-NeoX MLP, no biases."""
    from litgpt.config import Config
    from litgpt.model import GPT as LitGPT

    config = Config(
        block_size=seq_len,
        vocab_size=cfg.vocab_size,
        padded_vocab_size=cfg.vocab_size,
        n_layer=cfg.n_layers,
        n_head=cfg.n_heads,
        n_embd=cfg.d_model,
        n_query_groups=cfg.n_heads,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="LayerNorm",
        mlp_class_name="GptNeoxMLP",
        intermediate_size=4 * cfg.d_model,
    )
    return LogitsToLoss(LitGPT(config))


def xtransformers_model(cfg: ModelConfig, seq_len: int) -> nn.Module:
    """x-transformers' decoder at posexp's shape: rotary over the whole head, SDPA attention."""
    import logging

    from x_transformers import Decoder, TransformerWrapper

    logging.getLogger("x_transformers").setLevel(logging.ERROR)
    decoder = Decoder(
        dim=cfg.d_model,
        depth=cfg.n_layers,
        heads=cfg.n_heads,
        attn_dim_head=cfg.head_dim,
        rotary_pos_emb=True,
        rotary_emb_dim=cfg.head_dim,
        attn_flash=True,
    )
    model = TransformerWrapper(
        num_tokens=cfg.vocab_size, max_seq_len=seq_len, attn_layers=decoder, use_abs_pos_emb=False
    )
    return LogitsToLoss(model)


def plain_model(cfg: ModelConfig, seq_len: int) -> nn.Module:
    """The nanoGPT-style baseline at posexp's shape."""
    return PlainGPT(cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, seq_len)


# name -> (builder, the package it needs or None, what the rows call it)
PEERS: dict[str, tuple[Callable[[ModelConfig, int], nn.Module], str | None, str]] = {
    "plain": (plain_model, None, "nanoGPT-style (learned)"),
    "litgpt": (litgpt_model, "litgpt", "litgpt (RoPE)"),
    "xtransformers": (xtransformers_model, "x_transformers", "x-transformers (rotary)"),
}


def missing_package(peer: str) -> str | None:
    """The package a peer needs that is not installed, or None."""
    package = PEERS[peer][1]
    return package if package and importlib.util.find_spec(package) is None else None


def training_step(
    model: nn.Module,
    batch: int,
    seq_len: int,
    vocab: int,
    device: torch.device,
    precision: str,
    compile_model: bool = False,
    kernel: Callable[[], Any] | None = None,
) -> Step:
    """One forward + backward + clip + AdamW step of ``model`` on fixed random tokens."""
    from omegaconf import OmegaConf

    model = model.to(device)
    train = OmegaConf.create({"weight_decay": 0.1, "lr": 1e-3, "betas": [0.9, 0.95]})
    opt = build_optimizer(model, train, device)
    step_model = torch.compile(model) if compile_model else model
    autocast = precision_autocast(precision, device)
    x = torch.randint(0, vocab, (batch, seq_len), device=device)
    kernel = kernel or contextlib.nullcontext

    def step() -> None:
        with autocast(), kernel():
            loss = step_model(x, x)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def posexp_model(cfg: ModelConfig, seq_len: int) -> nn.Module:
    """posexp's GPT for ``cfg``."""
    return GPT(cfg)


def pe_setting(spec: str) -> tuple[str, dict[str, Any]]:
    """A registered encoding's name and no settings, or for a preset of ``configs/pe/`` that is
    not a registered name (``irope``, a layered pattern) the name and settings it composes to."""
    from posexp.pe import PE_REGISTRY

    if spec in PE_REGISTRY:
        return spec, {}
    from hydra import compose, initialize_config_dir

    from posexp.config import from_composed
    from posexp.config.paths import config_dir

    if not (Path(config_dir()) / "pe" / f"{spec}.yaml").is_file():
        raise SystemExit(f"unknown pe {spec!r}: neither registered nor a configs/pe/ preset")
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        run = from_composed(compose("train", [f"pe={spec}", "model=small"]))
    return run.pe.name, dict(run.pe.params)


# Kinds of work a profiled step's time is sorted into: the first kind whose marker is in an
# op's name or in one of its callers' names (so a mul inside the rotation counts as rotation).
KINDS = (
    ("optimizer", ("Optimizer.step", "Optimizer.zero_grad", "clip_grad")),
    ("rotation", ("_Rotation",)),  # posexp's RoPE (posexp/pe/rope.py)
    # SDPA, FlexAttention, and posexp's matmul kernel: its forward by name, its backward by the
    # ops only attention runs (the linear layers' are mm/addmm, the loss's log-softmax).
    (
        "attention",
        (
            "scaled_dot_product",
            "flex_attention",
            "matmul_attention",
            "BaddbmmBackward",
            "BmmBackward",
            "aten::_softmax_backward_data",
        ),
    ),
    (
        "matmul",
        (
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "aten::linear",
            "mkldnn::_linear_pointwise",  # posexp's fp32 linear layers on oneDNN
        ),
    ),
    # What the oneDNN linear layers do besides their matmuls: the transposed copies of dY or X
    # that the weight's gradient takes (posexp/kernels/onednn_linear.py).
    ("linear copies", ("OneDNNLinear",)),
    ("norm", ("layer_norm", "rms_norm")),
    ("loss", ("log_softmax", "nll_loss", "cross_entropy")),
    ("activation", ("gelu", "silu")),
    ("casts", ("aten::_to_copy", "aten::copy_", "ToCopyBackward")),
)


def kind_of(names: list[str]) -> str:
    """The kind of work for an op whose own name comes first in ``names``, then its callers'."""
    for kind, markers in KINDS:
        if kind == "matmul":  # matmuls by the op itself (attention's inner matmuls are attention)
            if any(names[0].startswith(m) for m in markers):
                return kind
            continue
        if any(m in name for name in names for m in markers):
            return kind
    return "other"


def profile_step(step: Step, steps: int = 4) -> dict[str, float]:
    """Milliseconds per step by kind of work (``KINDS``), from torch.profiler's self CPU times."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        names, parent = [event.name], event.cpu_parent
        while parent is not None:
            names.append(parent.name)
            parent = parent.cpu_parent
        totals[kind_of(names)] += event.self_cpu_time_total / 1000 / steps
    return dict(totals)
