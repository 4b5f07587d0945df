"""TensorBoard helpers: one writer per run dir, hparams written into that same run."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from posexp.config import RunConfig
from posexp.model import ModelConfig


def metric_tag(key: str) -> str | None:
    """The scalar tag that already holds a final metric: final/val_X -> val/X, final/X -> test/X."""
    name = key.removeprefix("final/")
    if name == "params":
        return None  # an hparam, not a metric
    return f"val/{name[4:]}" if name.startswith("val_") else f"test/{name}"


# TensorBoard's hparams table shows 5 columns by default: those flagged "differs" first, then
# by name. These are flagged, so a run shows what PE experiments are compared by.
SHOWN_BY_DEFAULT = ("data", "extension", "heads", "pe", "seed")


def trial_name(params: dict[str, Any], run_dir: Path) -> str:
    """The hparams table's trial id: a short tag unique to the run dir, what the run is (pe,
    heads, seed, extension, data), then where it lives.

    TensorBoard cuts the column to its first ~20 characters; run dirs start with their timestamp
    and sweep jobs with their first override, so those alone would all read alike, and so would
    two runs that differ in a setting the id does not name: the tag keeps every row apart.
    """
    ext = str(params.get("extension", "none"))
    tag = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:4]
    what = [
        f"#{tag}",
        str(params.get("pe", "?")),
        f"h{params.get('heads', '?')}",
        f"s{params.get('seed', '?')}",
        *([ext] if ext != "none" else []),
        str(params.get("data", "?")),
    ]
    where = (
        run_dir.name
        if re.match(r"\d{4}-\d{2}-\d{2}_", run_dir.name)
        else f"{run_dir.parent.name}/{run_dir.name}"
    )
    return f"{' '.join(what)} · {where}"


def write_hparams(
    writer: SummaryWriter, params: dict[str, Any], metrics: dict[str, float], trial: str = ""
) -> None:
    """Record an hparams entry in the writer's own run (add_hparams would create a second run).

    Its metrics point at scalars the run logged anyway (val/loss at the last step, test/bleu),
    so no extra step-0 "final" scalars clutter the run's charts. Integers are written as text:
    TensorBoard has no integer type and would show 64 as "64.000".
    """
    from tensorboard.plugins.hparams import plugin_data_pb2

    clean = {
        k: (
            str(v)
            if isinstance(v, int) and not isinstance(v, bool)
            else v
            if isinstance(v, (float, str, bool))
            else str(v)
        )
        for k, v in params.items()
    }
    tags = {metric_tag(k): float(v) for k, v in metrics.items() if metric_tag(k)}
    experiment, start, end = hparams(clean, tags)
    if trial:
        start_value = start.value[0]
        info = plugin_data_pb2.HParamsPluginData.FromString(
            start_value.metadata.plugin_data.content
        )
        info.session_start_info.group_name = trial
        start_value.metadata.plugin_data.content = info.SerializeToString()
    value = experiment.value[0]
    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
    for info in data.experiment.hparam_infos:
        info.differs = info.name in SHOWN_BY_DEFAULT
    value.metadata.plugin_data.content = data.SerializeToString()
    for summary in (experiment, start, end):
        writer.file_writer.add_summary(summary)
    writer.flush()


def hparam_dict(cfg: RunConfig, mcfg: ModelConfig) -> dict[str, Any]:
    """The knobs people sweep, for TensorBoard's hparams table (the training ones included)."""
    ext = mcfg.extension.to_dict()
    t = cfg.train
    return {
        # rope_randomized shows as "rope randomized"; a synthetic run's data as its task.
        "pe": mcfg.pe + (" randomized" if cfg.positions.randomized else ""),
        "heads": mcfg.n_heads,
        "model": cfg.model.name,
        "d_model": mcfg.d_model,
        "n_layers": mcfg.n_layers,
        "seq_len": t.seq_len,
        "batch_size": t.batch_size,
        "max_steps": t.max_steps,
        "lr": float(t.lr),
        "warmup_steps": t.warmup_steps,
        "seed": cfg.seed,
        "data": str(cfg.data.params.get("task", cfg.data.name)),
        "tokenizer": cfg.tokenizer.name,
        "extension": extension_label(ext),
        "factor": float(ext.get("factor", 1.0)),
    }


def extension_label(ext: dict[str, Any]) -> str:
    """``none``, or the method with its factor (``yarn x4``): one column shows both."""
    method, factor = ext.get("method", "none"), float(ext.get("factor", 1.0))
    return method if method == "none" else f"{method} x{factor:g}"


def write_config_text(writer: SummaryWriter, config: dict[str, Any], precision: str) -> None:
    """The run's resolved config in TensorBoard's Text tab (indented, so it shows as code)."""
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=None)
    body = "\n".join(f"    {line}" for line in text.splitlines())
    writer.add_text("config", f"Resolved config (precision: {precision}):\n\n{body}", 0)
