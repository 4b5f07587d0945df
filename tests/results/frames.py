"""Hand-made results tables for the views' tests (the schema of posexp.results.table)."""

from __future__ import annotations

from posexp.extension.registry import get_extension, method_params
from posexp.results.table import results_frame


def row(pe, seed, method, spec, settings, length, value, l0=64, parent=None, protocol="nonoverlap"):
    full = method_params(get_extension(method), settings)
    return {
        "run": f"runs/{pe}-{seed}" + ("-ft" if parent else ""),
        "pe": pe,
        "seed": seed,
        "parent": parent,
        "method": method,
        "spec": spec,
        "baked": False,
        "settings": full,
        "factor": length / l0,
        "length": length,
        "x_l0": length / l0,
        "l0": l0,
        "protocol": protocol,
        "stride": None,
        "sample_size": 16384,
        "depth": None,
        "task": None,
        "precision": "fp32",
        "metric": "ppl",
        "primary": True,
        "value": value,
        "scored_tokens": 16384,
        "checkpoint": "30:abc",
    }


def study(seeds=(0, 1), lengths=(64, 128, 256)):
    """2 PEs x seeds, none, a self_extend group x window grid and yarn factors."""
    rows = []
    for pe, base in (("rope", 10.0), ("alibi", 9.0)):
        for seed in seeds:
            for n in lengths:
                grow = n / 64
                rows.append(row(pe, seed, "none", "none", {}, n, base * grow + seed * 0.1))
                for g in (2, 4):
                    for w in (8, 16):
                        spec = f"self_extend(group={g},window={w})"
                        value = base * (1 + 0.1 * grow / g) + w / 100 + seed * 0.1
                        rows.append(
                            row(pe, seed, "self_extend", spec, {"group": g, "window": w}, n, value)
                        )
                for f in (16, 4):  # 16 first: the tables must sort it after 4
                    spec = f"yarn(factor={f})"
                    rows.append(
                        row(pe, seed, "yarn", spec, {}, n, base * 1.1 + f / 10 + seed * 0.1)
                    )
                    rows[-1]["factor"] = float(f)
    return results_frame(rows)
