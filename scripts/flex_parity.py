"""FlexAttention against the explicit-bias SDPA path, for every bias PE: outputs and gradients;
and FoX's forget-gate kernel against its SDPA path (outputs, and on a GPU the gradients of q, k,
v and the running sum c: what must hold before FoX trains on it).

    python -m scripts.flex_parity --device cuda     # forward and backward (a GPU trains on flex)
    python -m scripts.flex_parity                   # CPU: forward only (no CPU backward for flex)

Two copies of one fp32 model (attention=flex and attention=sdpa, same weights) see the same
batch; the largest absolute differences of the logits, of every parameter's gradient (GPU), and
of a generation through the KV cache are printed, with each copy's training step time (median of
5 after 2 to warm up) where flex trains. FoX's row is its model: on a GPU the copy on flex
passes posexp's own gradient check on its first batch first (``gate_checked``), or falls back
(``flex_off`` says why). ``scripts/gpu/check.py`` runs this as a part.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def flex_parity(
    device_name: str = "cpu", length: int = 300, pes: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    """One row per encoding with a FlexAttention kernel (``pes``, default all): max |Δ| of
    logits, gradients and step times (where flex trains) and generated ids."""
    import statistics
    import time

    import torch

    from posexp.kernels import flex
    from posexp.kernels.choice import KernelChoice
    from posexp.model import GPT, ModelConfig
    from posexp.pe import PE_REGISTRY

    device = torch.device(device_name)
    rows = []
    kinds = {n: "bias" for n, cls in PE_REGISTRY.items() if cls.kind == "bias"}
    kinds |= {n: "gate" for n, cls in PE_REGISTRY.items() if cls.flex_kind == "gate"}

    def step_ms(model: Any, x: Any) -> float:
        times = []
        for _ in range(7):
            start = time.perf_counter()
            model(x, x)["loss"].backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times[2:])

    for name in pes or sorted(kinds):
        torch.manual_seed(0)
        cfg = dict(vocab_size=260, d_model=128, n_layers=2, n_heads=4, pe=name, train_length=64)
        a = GPT(ModelConfig(**cfg), KernelChoice(bias="flex")).to(device)
        b = GPT(ModelConfig(**cfg), KernelChoice(bias="sdpa")).to(device)
        b.load_state_dict(a.state_dict())
        x = torch.randint(0, 260, (2, length), device=device)
        kind = kinds[name]
        trains = flex.use_flex("auto", device, needs_grad=True, dropout=0.0, kind=kind)
        row: dict[str, Any] = {
            "pe": name,
            "device": device.type,
            "length": length,
            "flex_trains": trains,
        }
        with torch.set_grad_enabled(trains):
            la, lb = a(x, x)["logits"], b(x, x)["logits"]
        row["logits_max_abs_diff"] = float((la - lb).detach().abs().max())
        if trains:
            a(x, x)["loss"].backward()
            b(x, x)["loss"].backward()
            row["grad_max_abs_diff"] = max(
                float((pa.grad - pb.grad).abs().max())
                for pa, pb in zip(a.parameters(), b.parameters(), strict=True)
            )
            row["step_ms_flex"], row["step_ms_sdpa"] = step_ms(a, x), step_ms(b, x)
        if kind == "gate":
            row["gate_checked"] = ("gate", device.type) in flex._verified
        if kind in flex._broken:
            row["flex_off"] = flex._broken[kind]
        with torch.no_grad():
            ga, gb = a.eval().generate(x[:, :64], 16), b.eval().generate(x[:, :64], 16)
        row["generation_equal"] = bool(torch.equal(ga, gb))
        rows.append(row)
    return rows


def gate_parity(device_name: str = "cpu", length: int = 300) -> dict[str, Any]:
    """FoX's forget gate: max |Δ| of ``flex_gated_attention`` against ``gated_attention`` (SDPA
    with the bias), and of their gradients where the device has a FlexAttention backward."""
    import torch
    import torch.nn.functional as F

    from posexp.kernels import flex
    from posexp.pe.fox import gated_attention, running_log_forget

    device = torch.device(device_name)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, length, 32, device=device) for _ in range(3))
    log_f = F.logsigmoid(torch.randn(2, 4, length, device=device) + 2)
    backward = device.type == "cuda"
    inputs = [t.requires_grad_(backward) for t in (q, k, v, log_f)]
    c, _ = running_log_forget(inputs[3], None)
    positions = torch.arange(length, device=device)
    with torch.set_grad_enabled(backward):
        got = flex.flex_gated_attention(q, k, v, c)
        want, _ = gated_attention(q, k, v, c, c, positions, positions)
    row: dict[str, Any] = {"pe": "fox (gate kernel)", "device": device.type, "length": length}
    if got is None:
        return {**row, "error": flex._broken.get("gate", "not run")}
    row["out_max_abs_diff"] = float((got - want).detach().abs().max())
    if backward:
        grads_got = torch.autograd.grad(got.square().sum(), inputs)
        grads_want = torch.autograd.grad(want.square().sum(), inputs)
        row["grad_max_abs_diff"] = max(
            float((a - b).abs().max()) for a, b in zip(grads_got, grads_want, strict=True)
        )
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--length", type=int, default=300)
    args = p.parse_args()
    rows = [*flex_parity(args.device, args.length), gate_parity(args.device, args.length)]
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
