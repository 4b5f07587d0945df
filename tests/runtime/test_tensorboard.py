"""The hparams entry a run writes into its own TensorBoard run, and the name it goes by."""

from __future__ import annotations

import json

from hydra.types import RunMode
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, backend_context, metadata
from torch.utils.tensorboard import SummaryWriter

from posexp.config.resolvers import SWEEP_ENV
from posexp.runtime.tensorboard import hparam_dict, label_keys, trial_name, write_hparams
from tests.helpers import run_config


def hparams_content(run_dir):
    """tag -> plugin content of the run's hparams summaries, as TensorBoard's backend reads them."""
    return EventAccumulator(str(run_dir)).Reload().PluginTagToContent(metadata.PLUGIN_NAME)


def write_run(run_dir, *overrides, keys=None):
    """A run dir holding a val/loss scalar and the hparams entry of ``overrides``' config."""
    params = {**hparam_dict(run_config(*overrides)), "params": 1234, "precision": "fp32"}
    writer = SummaryWriter(str(run_dir))
    writer.add_scalar("val/loss", 2.0, 6)
    write_hparams(writer, params, trial=trial_name(params, run_dir, keys))
    writer.close()
    return params


def test_hparams_are_full_names_without_an_experiment_summary(tmp_path):
    params = write_run(tmp_path, "pe=alibi", "model=tiny", "train.seq_len=64", keys=["pe"])
    content = hparams_content(tmp_path)
    # No experiment summary: TensorBoard then builds the table from every run's settings.
    assert set(content) == {metadata.SESSION_START_INFO_TAG, metadata.SESSION_END_INFO_TAG}
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    hp = start.hparams
    assert set(hp) == set(params)
    assert {"pe", "heads", "seed", "model", "data", "extension", "train.seq_len"} <= set(hp)
    assert {"train.max_steps", "model.d_model", "train.lr"} <= set(hp)
    assert not {"train.threads", "device", "cache_dir", "train.log_interval"} & set(hp)
    assert hp["pe"].string_value == "alibi" and hp["model"].string_value == "tiny"
    # Integers as text (no "64.000"), floats as numbers, booleans as booleans.
    assert hp["train.seq_len"].string_value == "64" and hp["params"].string_value == "1234"
    assert hp["train.lr"].number_value == params["train.lr"]
    assert hp["pe.randomized"].WhichOneof("kind") == "bool_value"
    assert params["model.d_ff"] is None and hp["model.d_ff"].string_value == "null"
    # The label first, so a cut column still says what the run is; a tag unique to the dir after.
    assert start.group_name.startswith("alibi · ") and len(start.group_name) == len("alibi · ") + 4
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    assert end.status == api_pb2.STATUS_SUCCESS


def test_tensorboard_shows_the_keys_that_differ_across_runs(tmp_path):
    runs = {}
    for pe in ("rope", "alibi"):
        for seed in (0, 1):
            run = tmp_path / f"pe={pe},seed={seed}"
            write_run(run, f"pe={pe}", f"seed={seed}", "model=tiny", keys=["pe", "seed"])
            runs[run.name] = hparams_content(run)
    # TensorBoard's own computation of the table's columns, from the four runs' entries.
    infos = backend_context.Context(None)._compute_hparam_infos(runs)
    differs = sorted(i.name for i in infos if i.differs)
    assert differs == ["pe", "seed"]
    names = {
        metadata.parse_session_start_info_plugin_data(
            tags[metadata.SESSION_START_INFO_TAG]
        ).group_name.split(" · ")[0]
        for tags in runs.values()
    }
    assert names == {"rope s0", "rope s1", "alibi s0", "alibi s1"}


def hydra_node(mode, task, sweeper_params=None):
    return OmegaConf.create(
        {"mode": mode, "overrides": {"task": task}, "sweeper": {"params": sweeper_params}}
    )


def test_label_keys_are_the_swept_keys_of_a_sweep(monkeypatch):
    from hydra.core.hydra_config import HydraConfig

    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # no Hydra app left from a test
    task = ["pe=rope", "seed=0", "model=tiny", "train.max_steps=60", "train.threads=1"]
    monkeypatch.setenv(
        SWEEP_ENV,
        json.dumps({"swept": ["pe", "seed"], "fixed": ["model", "train.max_steps"]}),
    )
    assert label_keys(hydra_node(RunMode.MULTIRUN, task)) == ["pe", "seed"]
    # A preset's sweeper params sweep too, unless the command line fixes them.
    preset = {"heads": "2,4", "model": "tiny,small"}
    assert set(label_keys(hydra_node(RunMode.MULTIRUN, [*task, "heads=2"], preset))) == {
        "pe",
        "seed",
        "heads",
    }
    # A single run: its own overrides that change a result, named by the setting they change.
    single = ["pe=rope", "extension.factor=4", "train.threads=1", "hydra.run.dir=/x"]
    assert label_keys(hydra_node(RunMode.RUN, single)) == ["pe", "extension"]
    assert label_keys() == []  # outside Hydra


def test_trial_names_differ_for_runs_that_read_alike(tmp_path):
    settings = hparam_dict(run_config("pe=rope", "heads=4"))
    a, b = (trial_name(settings, tmp_path / name, ["pe", "heads"]) for name in ("a", "b"))
    assert a.startswith("rope h4 · ") and b.startswith("rope h4 · ") and a != b
    assert trial_name(settings, tmp_path / "a", []) == f"rope · {a.rsplit(' ', 1)[1]}"


def test_the_report_s_figures_reach_the_images_tab(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from posexp.runtime.tensorboard import write_report_images
    from posexp.store.files import save_figure_atomic

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([1, 2], [3, 4])
    save_figure_atomic(fig, tmp_path / "report_extrapolation_nonoverlap.png")
    first = write_report_images(tmp_path, [tmp_path / "report_extrapolation_nonoverlap.png"])
    again = write_report_images(tmp_path, [tmp_path / "report_extrapolation_nonoverlap.png"])
    # rewritten whole at each report: one event file, never two
    assert [p.name for p in tmp_path.glob("events.out.tfevents.*")] == [again.name]
    assert first is not None
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert events.Tags()["images"] == ["report/report_extrapolation_nonoverlap"]
    assert write_report_images(tmp_path, []) is None
