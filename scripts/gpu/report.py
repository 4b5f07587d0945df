"""scripts/gpu/check.py's report.md: one section per part, numbers straight from report.json."""

from __future__ import annotations

import math
from typing import Any


def _f(v: Any, fmt: str = ",.0f") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _train(r: dict[str, Any]) -> list[str]:
    return [
        f"{r['config']}: **{_f(r['tokens_per_s'])} tokens/s**, MFU "
        f"**{r['mfu']:.1%}** against a measured matmul rate of "
        f"{r['matmul_flops'] / 1e12:,.1f} TFLOP/s ({_f(r['model_flops_per_token'] / 1e6, ',.1f')} "
        f"MFLOP per token). SDPA kernel that ran: `{r['sdpa_kernel']}`. Peak memory "
        f"{_f(r['peak_memory_gib'], '.1f')} GiB."
    ]


def _eval(r: dict[str, Any]) -> list[str]:
    return [
        f"{r['config']}.",
        "",
        "| pe | length | tokens/s | × rope | pass MiB | peak MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ] + [
        f"| {x['pe']} | {x['length']} | {_f(x['tok_s'])} | {x['speed_vs_rope']:.2f} "
        f"| {_f(x['pass_mib'], ',.1f')} | {_f(x['peak_mib'], ',.1f')} |"
        for x in r["rows"]
    ]


def _flex(r: dict[str, Any]) -> list[str]:
    # An encoding's row compares two models (attention auto vs sdpa); the gate-kernel row FoX's
    # kernel alone (its output), and "step ms" is a training step on flex / on SDPA.
    def generation(x: dict[str, Any]) -> str:
        if "generation_equal" not in x:
            return "–"
        return "equal" if x["generation_equal"] else "DIFFERS"

    def steps(x: dict[str, Any]) -> str:
        if "step_ms_flex" not in x:
            return "–"
        return f"{x['step_ms_flex']:.1f} / {x['step_ms_sdpa']:.1f}"

    def trains(x: dict[str, Any]) -> str:
        said = str(x.get("flex_trains", "–"))
        if "gate_checked" in x:
            said += ", checked" if x["gate_checked"] else ", not checked"
        return said + (f" (off: {x['flex_off']})" if x.get("flex_off") else "")

    return [
        "| pe | device | length | flex trains | max Δ logits (gate: output) | max Δ grads "
        "| step ms flex / sdpa | generation |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ] + [
        f"| {x['pe']} | {x['device']} | {x['length']} | {trains(x)} "
        f"| {_f(x.get('logits_max_abs_diff', x.get('out_max_abs_diff')), '.1e')} "
        f"| {_f(x.get('grad_max_abs_diff'), '.1e')} | {steps(x)} "
        f"| {x.get('error') or generation(x)} |"
        for x in r["rows"]
    ]


def _packing(r: dict[str, Any]) -> list[str]:
    return [
        "| jobs on one GPU | aggregate tokens/s | × one job | per job | sweep s |",
        "|---:|---:|---:|---:|---:|",
    ] + [
        f"| {x['jobs']} | {_f(x['aggregate_tokens_per_s'])} | {x['vs_one_job']:.2f} "
        f"| {_f(x['per_job_tokens_per_s'])} | {x['sweep_seconds']:.0f} |"
        for x in r["rows"]
    ]


def _torchrun(r: dict[str, Any]) -> list[str]:
    return [
        f"{r['processes']} process(es), backend {r['backend']}: {r['steps']} steps, "
        f"killed after the checkpoint at step {r['killed_after_step']} and resumed. "
        f"Largest loss difference from the uninterrupted run {r['max_loss_diff']:.2e}, "
        f"largest final weight difference {r['max_weight_diff']:.2e} "
        f"({'bitwise equal' if r['bitwise_equal_weights'] else 'not bitwise equal'}). "
        + (
            f"Two uninterrupted runs of the same config differ by up to "
            f"{_f(r['repeat_max_loss_diff'], '.2e')} in loss and "
            f"{_f(r['repeat_max_weight_diff'], '.2e')} in weights (the device's own "
            f"nondeterminism: the floor for any resume)."
            if "repeat_max_loss_diff" in r
            else "No repeat run (smoke: one CPU repeats itself exactly)."
        )
    ]


def _deterministic(r: dict[str, Any]) -> list[str]:
    return [
        f"`{r['config']}` with train.deterministic=true: {r['steps']} steps, killed after the "
        f"checkpoint at step {r['killed_after_step']} and resumed. Largest loss difference from "
        f"the uninterrupted run {r['max_loss_diff']:.2e}, largest final weight difference "
        f"{r['max_weight_diff']:.2e} "
        f"(**{'bitwise equal' if r['bitwise_equal_weights'] else 'not bitwise equal'}**). "
        f"Its cost: {_f(r['tokens_per_s_on'])} tokens/s against {_f(r['tokens_per_s_off'])} "
        f"with train.deterministic=false (**{r['on_vs_off']:.2f}×**); the two runs' weights "
        f"differ by {r['off_vs_on_weight_diff']:.2e}."
    ]


def _ablation(r: dict[str, Any]) -> list[str]:
    p = r["plan"]
    lines = [
        f"train.deterministic={str(r['deterministic']).lower()}. {r['completed']} of "
        f"{r['expected']} jobs completed in {r['sweep_seconds']:.0f} s (planned: "
        f"{r['planned_seconds']:.0f} s, {p['waves']} wave(s) of {p['in_flight']}). Step time "
        f"packed {_f(r['step_seconds_packed'], '.3f')} s (planned {p['step_s_packed']:.3f} s); "
        f"time outside the steps per job: "
        + (", ".join(f"{t} {v:.0f} s" for t, v in r["overhead_seconds"].items()) or "–")
        + f" (assumed: start-up {p['assumptions']['startup_s']:.0f} s plus "
        + ", ".join(f"{t} {p['assumptions'][f'final_{t}_s']:.0f} s" for t in p["slots"])
        + ")."
        + (f" INCOMPLETE: {r['incomplete']}." if r.get("incomplete") else ""),
        "",
        "| task | heads | seeds | PPL | BLEU (beam 4) | chrF |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for x in r["table"]:
        cells = [
            _f(x[k], fmt) + ("" if x[f"{k}_std"] is None else f" ± {x[f'{k}_std']:{fmt}}")
            for k, fmt in (("ppl", ".2f"), ("bleu", ".2f"), ("chrf", ".1f"))
        ]
        lines.append(f"| {x['task']} | {x['heads']} | {x['n']} | " + " | ".join(cells) + " |")
    copy = sorted({x["copy_bleu"] for x in r["rows"] if x["copy_bleu"] is not None})
    lines += ["", f"Copy baseline BLEU: {_f(copy[0], '.2f') if copy else '–'}."]
    lines += ["", "The plan:", "", "```", r["plan_text"].rstrip(), "```"]
    for task, files in r["reports"].items():
        lines += ["", f"`posexp report` ({task}): " + ", ".join(f"`{f}`" for f in files)]
    return lines


RENDER = {
    "train": _train,
    "eval": _eval,
    "flex": _flex,
    "packing": _packing,
    "torchrun": _torchrun,
    "deterministic": _deterministic,
    "ablation": _ablation,
}


def render_markdown(report: dict[str, Any]) -> str:
    """report.md: one section per part, numbers straight from report.json."""
    m = report["machine"]
    lines = [
        "# posexp GPU check",
        "",
        f"Machine: {m.get('gpu', 'no GPU')} × {m['gpus']}, {m['cpu_cores']} CPU cores, torch "
        f"{m['torch']}{', CUDA ' + str(m['cuda']) if m.get('cuda') else ''}"
        f"{'. SMOKE RUN: toy sizes on the CPU, not GPU figures.' if report['smoke'] else '.'}",
        "",
    ]
    for name, part in report["parts"].items():
        lines += [f"## {name}", ""]
        if part.get("status") != "ok":
            lines += [f"FAILED after {part.get('seconds', 0):.0f} s: {part.get('error')}", ""]
        if "result" in part:  # a part may fail and still have figures (the ablation, cut short)
            lines += [*RENDER[name](part["result"]), "", f"({part['seconds']:.0f} s)", ""]
    return "\n".join(lines) + "\n"
