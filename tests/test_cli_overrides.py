"""The command line before Hydra: method specs become Hydra's overrides, checked first."""

from __future__ import annotations

import re

import pytest
import yaml

from posexp.cli.overrides import (
    expand_method_specs,
    open_mapping_args,
    quote_method_lists,
    quote_resume_path,
)
from posexp.rundir import RunDir
from tests.helpers import TINY, posexp, run_dirs


def test_a_method_spec_becomes_the_extension_group_and_its_keys():
    assert expand_method_specs(["pe=rope", "extension=yarn(beta_fast=16,factor=4)"]) == [
        "pe=rope",
        "extension=yarn",
        "extension.beta_fast=16",
        "extension.factor=4",
    ]
    # Bare names, sweeps of bare names and other keys pass as they are.
    args = ["extension=yarn", "-m", "extension=none,pi", "train.lr=(1)"]
    assert expand_method_specs(args) == args
    assert expand_method_specs(["extension=yarn(beta_fast=32)"]) == ["extension=yarn"]
    # A list setting (LongRoPE's per-pair factors) becomes a Hydra list.
    assert expand_method_specs(["extension=longrope(factor=4,long_factor=[1,2])"]) == [
        "extension=longrope",
        "extension.long_factor=[1,2]",
        "extension.factor=4",
    ]


def test_a_spec_value_is_taken_as_typed_as_its_key_is():
    # 1e3 is a number in a spec as it is in extension.beta_fast=1e3 (YAML 1.1 reads it as text)
    assert expand_method_specs(["extension=yarn(beta_fast=1e3)"]) == [
        "extension=yarn",
        "extension.beta_fast=1000",
    ]
    assert expand_method_specs(["extension=yarn(beta_slow=0.00001)"])[1:] == [
        "extension.beta_slow=1e-05"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["extension=yarn(factor=2)", "extension.factor=4"],
            "extension.factor given twice: in 'extension=yarn(factor=2)' and in "
            "'extension.factor=4'",
        ),
        (
            ["+extension.beta_fast=8", "extension=yarn(beta_fast=16)"],
            "extension.beta_fast given twice",
        ),
    ],
)
def test_a_key_given_in_a_spec_and_again_is_refused(args, message):
    from posexp.errors import PosexpError

    with pytest.raises(PosexpError, match=re.escape(message)) as e:
        expand_method_specs(args)
    assert "\n" not in str(e.value)
    # the key once, either way, passes
    assert expand_method_specs(["extension=yarn", "extension.factor=4"]) == [
        "extension=yarn",
        "extension.factor=4",
    ]


def test_an_unquoted_method_list_is_quoted_for_hydra_once_it_checks():
    from posexp.errors import PosexpError

    assert quote_method_lists(["extrapolate.method=none,yarn(factor=2|4)", "pe=rope"]) == [
        "extrapolate.method='none,yarn(factor=2|4)'",
        "pe=rope",
    ]
    kept = ["extrapolate.method='yarn(factor=2)'", "extrapolate.method=none,pi"]
    assert quote_method_lists(kept) == kept  # quoted already, or nothing Hydra misreads
    swept = ["-m", "extrapolate.method=none,yarn(factor=2)"]
    assert quote_method_lists(swept) == swept  # the sweep check refuses it
    with pytest.raises(PosexpError, match=r"^extrapolate.method= 'yarn\(factor=0\)': factor"):
        quote_method_lists(["extrapolate.method=yarn(factor=0)"])


def test_a_tasks_options_are_set_without_a_plus():
    # Hydra adds a key to a mapping only under `+`: `data.task_options={niah_single: ...}` was
    # refused as an unknown setting although data=ruler has the key.
    assert open_mapping_args(
        ["data.task_options={a:{b:1}}", "data.task_options.a.b=2", "+data.task_options={}"]
    ) == ["++data.task_options={a:{b:1}}", "++data.task_options.a.b=2", "+data.task_options={}"]
    plain = ["data.tasks=[niah_single]", "data.task_optionsx=1", "-m"]
    assert open_mapping_args(plain) == plain


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (["data=ruler", "data.task_options={niah_single:{haystack:noise}}"], {"haystack": "noise"}),
        (["data=ruler", "data.task_options.niah_single.haystack=noise"], {"haystack": "noise"}),
        (
            ["data=ruler", "+data.task_options={niah_single:{haystack:noise}}"],
            {"haystack": "noise"},
        ),
        # Added to the preset's own options of that task, not in their place.
        (
            ["experiment=ruler", "data.task_options.niah_single.haystack=noise"],
            {"depths": [0.0, 0.5, 1.0], "haystack": "noise"},
        ),
    ],
)
def test_task_options_reach_the_config_with_or_without_a_plus(tmp_path, cache, args, options):
    proc = posexp(tmp_path, cache, "train", *args, "--cfg", "job")
    assert yaml.safe_load(proc.stdout)["data"]["task_options"]["niah_single"] == options


def test_a_resume_path_with_hydras_characters_is_quoted_for_it():
    plain = ["resume=/runs/2026-12-04_kjv_rope_h4", "resume=null", "pe=rope,alibi"]
    assert quote_resume_path(plain) == plain
    assert quote_resume_path(["resume=/s/pe=rope,seed=0", "-m"]) == [
        "resume='/s/pe=rope,seed=0'",
        "-m",
    ]
    assert quote_resume_path(["resume=/s/it's"]) == ["resume='/s/it\\'s'"]
    assert quote_resume_path(["resume='/s/a=b'"]) == ["resume='/s/a=b'"]  # quoted already


def test_a_sweep_job_resumes_with_the_command_posexp_prints(tmp_path, cache):
    # A job dir named by two swept keys; `resume with: posexp train resume=<dir>` as printed.
    job = tmp_path / "sweep" / "pe=rope,seed=0"
    posexp(tmp_path, cache, "train", *TINY, f"hydra.run.dir='{job}'")
    posexp(tmp_path, cache, "train", f"resume={job}", "train.max_steps=8")
    assert RunDir(job).meta()["step"] == 8


def test_a_fine_tune_takes_a_method_spec(tmp_path, cache):
    posexp(tmp_path, cache, "train", "pe=rope", *TINY, f"hydra.run.dir={tmp_path / 'lm'}")
    posexp(
        tmp_path,
        cache,
        "finetune",
        "--run",
        str(tmp_path / "lm"),
        "extension=yarn(beta_fast=16,factor=2)",
        "train.seq_len=64",
        "train.max_steps=2",
        "train.eval_interval=2",
        "train.checkpoint_interval=2",
    )
    (tuned,) = [d for d in run_dirs(tmp_path) if d.name != "lm"]
    extension = yaml.safe_load((tuned / ".hydra" / "config.yaml").read_text())["extension"]
    assert (extension["method"], extension["beta_fast"], extension["factor"]) == ("yarn", 16, 2)
    # Its evaluation names the baked-in method with the setting it changed.
    posexp(
        tmp_path,
        cache,
        "eval-extrapolate",
        "--run",
        str(tuned),
        "--method",
        "baked",
        "--lengths",
        "64",
        "--tokens",
        "128",
    )
    import json

    (record,) = json.loads((tuned / "eval" / "extrapolate.json").read_text())
    assert record["label"] == "baked:yarn(beta_fast=16)" and record["factor"] == 2.0
    assert (record["method"], record["baked"], record["spec"]["settings"]) == (
        "yarn",
        True,
        {"beta_fast": 16.0},
    )


def test_methods_lists_every_method_with_its_settings(tmp_path, cache):
    from posexp.extension import EXTENSIONS

    out = posexp(tmp_path, cache, "methods").stdout
    for name, method in EXTENSIONS.items():
        assert name in out
        for setting in method.spec_settings:
            assert setting.name in out
    assert "name(key=value,...)" in out


def test_a_run_dir_of_other_files_is_refused_an_empty_one_taken(tmp_path):
    from posexp.cli.overrides import check_run_dir_arg
    from posexp.errors import PosexpError

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "plan.txt").write_text("grid")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        PosexpError, match=r"^hydra.run.dir='.*notes' holds other files and no run;"
    ):
        check_run_dir_arg([f"hydra.run.dir={tmp_path / 'notes'}"])
    check_run_dir_arg([f"hydra.run.dir={tmp_path / 'empty'}", f"hydra.run.dir={tmp_path / 'new'}"])
