"""TensorBoard helpers: one writer per run dir, hparams written into that same run.

The hparams entry is a session start (the run's settings) and a session end, and no experiment
summary: with none in any run, TensorBoard builds the table's columns from every run's settings,
flags those whose values differ across the runs shown (and shows them first), and takes every
scalar the runs logged as a metric (validation, test and ``eval-extrapolate``'s). An experiment
summary would be one run's view of the whole table, and TensorBoard uses the first it finds.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import yaml
from torch.utils.tensorboard import SummaryWriter

from posexp.config import RunConfig
from posexp.results.labels import (
    is_plumbing,
    order_key,
    run_label,
    run_settings,
    setting_key,
    value_text,
)


def hparam_dict(cfg: RunConfig) -> dict[str, Any]:
    """The run's settings by their override names (``pe``, ``train.seq_len``), no plumbing."""
    from posexp.runtime.sweeps import flatten

    return run_settings(flatten(cfg.to_dict()))


def label_keys(hydra_cfg: Any = None) -> list[str]:
    """The settings a run's hparams name shows: a sweep job's swept keys, else the run's own
    command-line overrides that change a result. ``hydra_cfg``: the ``hydra`` node (default:
    the running job's; [] outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if hydra_cfg is None and not HydraConfig.initialized():
        return []
    hc = HydraConfig.get() if hydra_cfg is None else hydra_cfg
    keys = [o.split("=", 1)[0].lstrip("+~") for o in hc.overrides.task if "=" in o]
    swept = swept_keys(hc) if hc.mode == RunMode.MULTIRUN else None
    if swept is not None:
        keys = [k for k in keys if k in swept]
    return list(dict.fromkeys(setting_key(k) for k in keys if not is_plumbing(k)))


def swept_keys(hydra_cfg: Any) -> set[str] | None:
    """The override keys a sweep varies, as job dirs are named (None when the CLI did not say:
    then every override names the job)."""
    from omegaconf import OmegaConf

    from posexp.config.resolvers import sweep_given, swept_override_keys

    given = sweep_given()
    if given is None:
        return None
    return swept_override_keys(given, OmegaConf.select(hydra_cfg, "sweeper.params", default=None))


TRIAL_PARTS = 5  # settings named in a trial id at most


def trial_name(settings: dict[str, Any], run_dir: Path, keys: list[str] | None = None) -> str:
    """The hparams table's trial id: the run's label (``rope h4 s0``), then a tag unique to its
    run dir (``rope h4 s0 · 7e80``).

    TensorBoard cuts the column to its first ~20 characters, so the label comes first; the tag
    keeps apart two runs that read alike. ``keys``: the settings the label names (default:
    ``label_keys()``, the swept or overridden ones; none: the run's PE and extension).
    """
    tag = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:4]
    named = [k for k in (label_keys() if keys is None else keys) if k in settings]
    # The settings that say most first (PE, extension, heads, ...): past TRIAL_PARTS the
    # column would be cut anyway, and the hparams columns hold every setting.
    label = run_label(settings, sorted(named, key=order_key)[:TRIAL_PARTS])
    return f"{label} · {tag}"


def hparam_value(value: Any) -> tuple[str, Any]:
    """A setting as a ``google.protobuf.Value`` field: (field name, value).

    Integers are text: TensorBoard has no integer type and would show 64 as "64.000"; lists
    are text as labels show them, None as the config writes it (TensorBoard shows a non-ASCII
    character, the labels' dash, as its JSON escape)."""
    if value is None:
        return "string_value", "null"
    if isinstance(value, bool):
        return "bool_value", value
    if isinstance(value, float):
        return "number_value", value
    if isinstance(value, str):
        return "string_value", value
    return "string_value", value_text(value)


def write_hparams(writer: SummaryWriter, params: dict[str, Any], trial: str = "") -> None:
    """Record the run's hparams entry (a session start and end) in the writer's own run:
    ``add_hparams`` would make a second run, and an experiment summary would fix the table's
    columns and metrics for every run to this one's."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(group_name=trial, start_time_secs=time.time())
    for key, value in params.items():
        field, shown = hparam_value(value)
        setattr(start.hparams[key], field, shown)
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS, end_time_secs=time.time())
    for tag, data in (
        (metadata.SESSION_START_INFO_TAG, {"session_start_info": start}),
        (metadata.SESSION_END_INFO_TAG, {"session_end_info": end}),
    ):
        content = plugin_data_pb2.HParamsPluginData(version=metadata.PLUGIN_DATA_VERSION, **data)
        plugin = SummaryMetadata.PluginData(
            plugin_name=metadata.PLUGIN_NAME, content=content.SerializeToString()
        )
        value = Summary.Value(tag=tag, metadata=SummaryMetadata(plugin_data=plugin))
        writer.file_writer.add_summary(Summary(value=[value]))
    writer.flush()


def write_config_text(writer: SummaryWriter, config: dict[str, Any], precision: str) -> None:
    """The run's resolved config in TensorBoard's Text tab (indented, so it shows as code)."""
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=None)
    body = "\n".join(f"    {line}" for line in text.splitlines())
    writer.add_text("config", f"Resolved config (precision: {precision}):\n\n{body}", 0)


def write_event_file(folder: Path, suffix: str, fill: Any) -> Path:
    """One TensorBoard event file in ``folder`` ending in ``suffix``, written by ``fill(writer)``
    and swapped in whole: the folder holds the old file or the new one, never half of one (the
    earlier ones of that suffix are removed). Returns its path."""
    import os
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="posexp-tb-") as tmp:
        writer = SummaryWriter(tmp, filename_suffix=suffix)
        try:
            fill(writer)
        finally:
            writer.close()
        (built,) = Path(tmp).glob(f"events.out.tfevents.*{suffix}")
        final = folder / built.name
        # Copied in under a name without "tfevents" (TensorBoard reads every file with it,
        # half-written too), then renamed.
        staging = folder / f"{suffix}.tmp"
        shutil.copyfile(built, staging)
        with open(staging, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(staging, final)
    for old in folder.glob(f"events.out.tfevents.*{suffix}"):
        if old != final:
            old.unlink(missing_ok=True)
    return final


REPORT_EVENTS = ".report"


def write_report_images(folder: Path, figures: list[Path]) -> Path | None:
    """The report's figures (PNGs) in TensorBoard's images tab, tagged ``report/<name>``, in
    an event file of the report's folder; None when there is no figure."""
    import io

    from matplotlib.image import imread

    pngs = [p for p in figures if p.suffix == ".png" and p.is_file()]
    if not pngs:
        return None

    def fill(writer: SummaryWriter) -> None:
        for path in pngs:
            image = imread(io.BytesIO(path.read_bytes()), format="png")[..., :3]
            writer.add_image(f"report/{path.stem}", image, 0, dataformats="HWC")

    return write_event_file(folder, REPORT_EVENTS, fill)
