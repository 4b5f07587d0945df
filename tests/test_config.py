"""The typed run config: built once from the composed YAML, every bad value refused by name."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from posexp.config import (
    AttentionConfig,
    PlacementConfig,
    RunConfig,
    TrainConfig,
    TranslateConfig,
)
from posexp.config.paths import config_dir
from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig
from tests.helpers import run_config


@functools.cache
def yaml_sections() -> dict:
    """train.yaml as plain data (unresolved): the one home of every default."""
    return OmegaConf.to_container(OmegaConf.load(f"{config_dir()}/train.yaml"), resolve=False)


def test_defaults_come_from_the_yaml_and_round_trip():
    cfg = run_config()
    yaml_train = yaml_sections()["train"]
    assert cfg.train.lr == yaml_train["lr"] and cfg.train.betas == tuple(yaml_train["betas"])
    assert cfg.translate.beam_size == yaml_sections()["translate"]["beam_size"]
    assert cfg.pe.name == "rope" and cfg.heads == cfg.model.n_heads == 4
    # The extension's original length is the training length unless set.
    assert cfg.extension == ExtensionConfig("none", 1.0, cfg.train.seq_len)
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    assert RunConfig.from_saved(cfg.to_dict()) == cfg


def test_overrides_reach_the_typed_sections(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("some text\n")  # a new run's data files must exist
    cfg = run_config(
        "pe=learned",
        "heads=8",
        "train.seq_len=128",
        "extension=pi",
        "extension.factor=2",
        "data=text",
        "data.files=[a.txt]",
        "tokenizer=bpe",
        "tokenizer.vocab_size=300",
    )
    assert (cfg.pe.name, cfg.heads, cfg.train.seq_len) == ("learned", 8, 128)
    assert cfg.extension.method == "pi" and cfg.extension.factor == 2.0
    assert cfg.extension.original_length == 128
    assert cfg.data.name == "text" and cfg.data.params["files"] == ["a.txt"]
    assert cfg.tokenizer.to_dict() == {"name": "bpe", "vocab_size": 300}


def test_a_saved_configs_data_files_need_not_exist_any_more(tmp_path, monkeypatch):
    # A run's config read back (report, runs, eval) loads no data: its files may have moved.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("some text\n")
    saved = run_config("data=text", "data.files=[a.txt]").to_dict()
    (tmp_path / "a.txt").unlink()
    assert RunConfig.from_saved(saved).data.params["files"] == ["a.txt"]
    with pytest.raises(PosexpError, match="data file not found: 'a.txt'"):
        run_config("data=text", "data.files=[a.txt]")


def test_a_saved_config_missing_a_setting_is_refused_naming_it():
    # No setting is filled in: a run dir from before posexp 0.1.0 is evaluated again.
    saved = run_config().to_dict()
    del saved["translate"]["beam_size"]
    with pytest.raises(PosexpError, match=r"^missing setting translate.beam_size$"):
        RunConfig.from_saved(saved)
    saved = run_config().to_dict()
    del saved["train"]["precision"]
    with pytest.raises(PosexpError, match=r"^missing setting train.precision$"):
        RunConfig.from_saved(saved)


BAD = {
    (
        "translate",
        "bleu_exampels",
        3,
    ): "unknown setting translate.bleu_exampels; allowed: bleu_examples,",
    ("translate", "batch_size", 0): "translate.batch_size must be a positive integer, got 0",
    ("translate", "samples", -1): "translate.samples must be an integer >= 0, got -1",
    (
        "translate",
        "length_penalty",
        float("nan"),
    ): "translate.length_penalty must be a finite number, got nan",
    ("train", "eval_tokens", 1): "train.eval_tokens=1 is too few for one validation window of "
    "train.seq_len=256; allowed: train.eval_tokens > 256",
    ("train", "compile", "yes"): "train.compile must be true or false, got 'yes'",
    ("train", "threads", 0): "train.threads must be a positive integer or null, got 0",
    ("placement", "jobs_per_gpu", 0): "placement.jobs_per_gpu must be a positive integer, got 0",
    ("extrapolate", "len", -4): "extrapolate.len must be a positive integer or null, got -4",
    ("extrapolate", "lenght", 4): "unknown setting extrapolate.lenght; allowed: len,",
    ("pe", "name", "rotary"): "unknown pe 'rotary'; allowed:",
    ("data", "source", "wiki"): "unknown data 'wiki'; allowed:",
    ("tokenizer", "name", "wordpiece"): "unknown tokenizer 'wordpiece'; allowed: bpe, byte",
    ("tokenizer", "vocab", 10): "unknown parameter 'vocab' for tokenizer 'byte'; allowed: (none)",
    ("data", "name", "???"): "data.name must be set for data=kjv",
    (None, "device", "tpu"): "unknown device 'tpu'; allowed: auto, cpu, cuda, mps",
    (None, "colour", 1): "unknown setting colour; allowed at the top level:",
}


@pytest.mark.parametrize(
    ("where", "message"), list(BAD.items()), ids=[f"{s}.{k}" for s, k, _ in BAD]
)
def test_bad_values_are_refused_naming_the_key(where, message):
    section, key, value = where
    d = run_config().to_dict()
    (d[section] if section else d)[key] = value
    with pytest.raises(PosexpError) as e:
        RunConfig.from_dict(d)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_an_extension_the_pe_cannot_take_is_refused_where_the_config_is_built():
    with pytest.raises(
        PosexpError,
        match=r"extension .yarn. does not apply to pe .alibi. \(bias\); allowed for alibi: none",
    ):
        run_config("pe=alibi", "extension=yarn")


def test_a_pe_key_the_encoding_does_not_take_is_refused_where_the_config_is_built():
    # Another encoding's setting (a preset made for Abacus, run with pe=rope) used to reach the
    # constructor and end in a TypeError traceback.
    with pytest.raises(
        PosexpError,
        match=r"^pe.max_digits is not a setting of pe=rope; allowed: base, randomized, "
        r"max_position$",
    ):
        run_config("experiment=addition", "pe=rope")
    assert run_config("experiment=addition", "pe=rope", "~pe.max_digits").pe.params == {
        "base": 10000.0
    }


@pytest.mark.parametrize(
    ("pe", "name", "what"),
    [
        ("fox", "fox", "computes its own attention"),
        ("stick_breaking", "stick_breaking", "computes its own attention"),
        ("path", "path", "computes its own attention"),
        ("irope", "layered", "attends in chunks"),  # rope*3 with chunk 64, then none
    ],
)
def test_attention_dropout_where_sdpa_does_not_attend_is_refused(pe, name, what):
    with pytest.raises(
        PosexpError,
        match=rf"^model\.dropout=0\.1 is not applied in layer 0, whose encoding {what} "
        rf"\(pe={name}\); allowed: model\.dropout=0 with pe={name}$",
    ):
        run_config(f"pe={pe}", "model.dropout=0.1")
    assert run_config("pe=rope", "model.dropout=0.1").model.dropout == 0.1
    assert run_config("pe=layered", "pe.layers=[none,alibi]", "model.dropout=0.1")


@pytest.mark.parametrize(
    ("key", "cls"),
    [
        ("train", TrainConfig),
        ("translate", TranslateConfig),
        ("attention", AttentionConfig),
        ("placement", PlacementConfig),
    ],
)
def test_train_yaml_lists_every_field_of_its_sections(key, cls):
    # One home for each default: the YAML, which names exactly the dataclass's fields.
    assert list(yaml_sections()[key]) == [f.name for f in dataclasses.fields(cls)]


# ---- properties over numeric overrides ------------------------------------------------------------

RATES = {"lr": "> 0", "min_lr": ">= 0", "weight_decay": ">= 0", "grad_clip": "> 0"}
COUNTS = ("max_steps", "batch_size", "log_interval", "checkpoint_interval")
ANY_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**9), 10**9),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
)


@functools.cache
def default_dict() -> str:
    return json.dumps(run_config().to_dict())


def with_train(key, value) -> dict:
    d = json.loads(default_dict())
    d["train"][key] = value
    return d


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(RATES)), value=ANY_VALUE)
def test_a_rate_is_accepted_exactly_when_it_is_a_finite_number_in_range(key, value):
    number = (
        not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    )
    valid = number and (value > 0 if RATES[key] == "> 0" else value >= 0)
    d = with_train(key, value)
    # The pair min_lr <= lr is its own check (below): keep the other rate out of its way.
    if key == "lr":
        d["train"]["min_lr"] = 0.0
    elif key == "min_lr" and valid:
        d["train"]["lr"] = max(float(value), 1e-3)
    if valid:
        assert getattr(RunConfig.from_dict(d).train, key) == float(value)
    else:
        with pytest.raises(
            PosexpError, match=f"^train.{key} must be a finite number {re.escape(RATES[key])}, got "
        ):
            RunConfig.from_dict(d)


@pytest.mark.parametrize(
    ("min_lr", "lr", "ok"),
    [(1.0, 0.003, False), (0.003, 0.003, True), (0.0, 0.003, True), (0.0031, 0.003, False)],
)
def test_min_lr_above_lr_is_refused_where_the_config_is_built(min_lr, lr, ok):
    d = with_train("min_lr", min_lr)
    d["train"]["lr"] = lr
    if ok:
        assert RunConfig.from_dict(d).train.min_lr == min_lr
    else:
        with pytest.raises(PosexpError, match=rf"^train.min_lr={min_lr:g} is above train.lr="):
            RunConfig.from_dict(d)


@pytest.mark.parametrize(
    ("warmup", "steps", "expected"),
    [(None, 600, 60), (None, 5, 0), (59, 60, 59), (60, 60, None), (100, 50, None)],
)
def test_warmup_follows_the_run_length_or_must_be_below_it(warmup, steps, expected):
    d = with_train("warmup_steps", warmup)
    d["train"]["max_steps"] = steps
    if expected is None:
        with pytest.raises(
            PosexpError,
            match=rf"^train.warmup_steps={warmup} must be below "
            rf"train.max_steps={steps} ",
        ):
            RunConfig.from_dict(d)
    else:
        assert RunConfig.from_dict(d).train.warmup_steps == expected


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(COUNTS), value=ANY_VALUE)
def test_a_count_is_accepted_exactly_when_it_is_a_positive_integer(key, value):
    valid = not isinstance(value, bool) and isinstance(value, int) and value > 0
    if valid:
        d = with_train(key, value)
        d["train"]["warmup_steps"] = None  # warmup < max_steps is its own check
        assert getattr(RunConfig.from_dict(d).train, key) == value
    else:
        with pytest.raises(PosexpError, match=f"^train.{key} must be a positive integer, got "):
            RunConfig.from_dict(with_train(key, value))


@pytest.mark.parametrize(("max_steps", "every"), [(600, 30), (60, 3), (10, 1), (100000, 5000)])
def test_eval_interval_null_gives_about_twenty_points_whatever_the_run_length(max_steps, every):
    d = with_train("max_steps", max_steps)
    d["train"].update(eval_interval=None, warmup_steps=None)
    assert RunConfig.from_dict(d).train.eval_interval == every
    d["train"]["eval_interval"] = 7  # an explicit one stays
    assert RunConfig.from_dict(d).train.eval_interval == 7
    d["train"]["eval_interval"] = 0
    with pytest.raises(
        PosexpError, match=r"^train.eval_interval must be a positive integer or null, got 0$"
    ):
        RunConfig.from_dict(d)


def test_the_fourth_wave_preset_composes_every_job(monkeypatch, tmp_path):
    # Every job of the sweep composed and built as `posexp train -m` checks it before launching.
    from posexp.cli.sweep_check import check_jobs
    from posexp.commands.train import check_config
    from posexp.config import from_composed

    monkeypatch.chdir(tmp_path)
    jobs = []

    def build(cfg, overrides):
        run = from_composed(cfg)
        check_config(run)
        jobs.append((run.pe.name, run.pe.params.get("windows"), run.seed))
        assert run.model.n_layers == 6 and run.train.seq_len == 64
        assert cfg.extrapolate.len == 1024  # 16x

    check_jobs(["-m", "experiment=fourth_wave"], "train", build)
    assert len(jobs) == 12 * 3 and {seed for _, _, seed in jobs} == {0, 1, 2}
    windows = {str(w) for _, w, _ in jobs}
    assert {"[32, None]", "[32, 32, 32, 32, 32, None]", "[None, 128, 128, 128]"} <= windows
    assert {name for name, _, _ in jobs} >= {"none", "rope", "alibi", "layered", "pope", "fope"}
