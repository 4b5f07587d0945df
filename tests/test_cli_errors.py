"""The `posexp` entry point: usage errors are one line like every other error; help is unchanged."""

from __future__ import annotations

import subprocess
import sys

import pytest

from posexp.cli import main


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``posexp ARGS`` in-process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["posexp", *args])
    with pytest.raises(SystemExit) as e:
        main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.mark.parametrize(
    "args, words",
    [
        # Were 5-6 line framed blocks (usage, a hint, a box around the message).
        (
            ["eval-extrapolate", "--len", "abc"],
            ["posexp eval-extrapolate:", "'--len'", "got 'abc'", "posexp eval-extrapolate --help"],
        ),
        (
            ["trian"],
            ["No such command 'trian'", "Did you mean 'train'", "commands: train, generate"],
        ),
        (["runs", "--bogus"], ["posexp runs:", "No such option: --bogus"]),
        (["generate"], ["posexp generate:", "Missing argument"]),
    ],
)
def test_usage_errors_are_one_line(monkeypatch, capsys, args, words):
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for word in words:
        assert word in err


def test_help_is_unchanged(monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "eval-extrapolate", "--help")
    assert code == 0 and "--len" in out and "--lengths" in out and err == ""
    code, out, _ = run_main(monkeypatch, capsys, "--version")
    assert code == 0 and out.startswith("posexp ")


def test_a_cuda_build_without_a_driver_prints_no_warning():
    # torch's two-line "CUDA initialization: Found no NVIDIA driver" warning, printed before the
    # one-line "device 'cuda' requested but no CUDA GPU is visible" (or before a CPU run). A fresh
    # process: pytest resets warning filters that a module installs while a test runs.
    code = (
        "import warnings, posexp.runtime.device; warnings.warn('CUDA initialization: Found no "
        "NVIDIA driver on your system.', UserWarning); warnings.warn('other', UserWarning)"
    )
    err = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stderr
    assert "CUDA initialization" not in err and "UserWarning: other" in err


def test_ctrl_c_in_any_command_says_interrupted_and_exits_130(monkeypatch, capsys, tmp_path):
    from posexp.commands import runs as runs_mod

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs_mod, "list_runs", interrupted)
    code, out, err = run_main(monkeypatch, capsys, "runs", str(tmp_path))
    assert (code, err) == (130, "interrupted\n")


def test_a_sweep_job_the_scheduler_ended_says_how_to_finish_the_sweep(tmp_path):
    from submitit.core.utils import UncompletedJobError

    from posexp.cli.errors import sweep_failure

    sweep = tmp_path / "sweep"
    # submitit's own message for a job scancel ended (the result path breaks the line).
    cancelled = UncompletedJobError(
        f"Job 81_1 (task: 0) with path {sweep}/.submitit/81_1/81_1_0_result.pkl\n"
        "has not produced any output (state: CANCELLED by 0)\nError stream produced:\n"
    )
    line = sweep_failure(cancelled)
    assert "\n" not in line
    assert line.startswith("error: a sweep job ended without a result (Slurm state CANCELLED)")
    assert f"rerun the same command with hydra.sweep.dir={sweep}:" in line
    # Any other failure names its type and points at the job dirs.
    other = sweep_failure(ValueError("heads=3 does not divide d_model=64"))
    assert other.startswith("error: a sweep job failed (ValueError: heads=3 does not divide")


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("train.max_step=10", "unknown setting train.max_step; did you mean train.max_steps?"),
        ("trian.lr=3", "unknown setting trian.lr; did you mean train.lr?"),
        ("pe.bas=5", "unknown setting pe.bas; did you mean pe.base?"),
        (
            "extension.beta_fst=3",
            "unknown setting extension.beta_fst; did you mean extension.beta_fast?",
        ),
    ],
)
def test_a_misspelt_key_gets_the_closest_one_not_hydras_plus_advice(
    tmp_path, cache, override, line
):
    from tests.helpers import posexp

    proc = posexp(tmp_path, cache, "train", override, check=False)
    assert proc.returncode == 2 and proc.stderr == f"error: {line}\n"


def test_an_unknown_key_far_from_any_lists_its_section(tmp_path, cache):
    from tests.helpers import posexp

    proc = posexp(tmp_path, cache, "train", "train.zzz=1", check=False)
    assert proc.stderr.startswith("error: unknown setting train.zzz; allowed in train: max_steps,")


def test_a_key_in_a_section_that_does_not_exist_names_the_top_level_keys():
    from posexp.cli.errors import unknown_key_line

    line = unknown_key_line("bogus.key")
    assert line.startswith(
        "unknown setting bogus.key: no 'bogus' in the config; allowed at the top: "
    )
    assert "model, pe, extension, data, tokenizer, train" in line and "allowed in bogus" not in line


@pytest.mark.parametrize(
    ("key", "line"),
    [
        # Settings of another choice of the group: named with the choices that have them.
        ("pe.num_buckets", "pe.num_buckets is not a setting of the pe chosen; t5 has it (pe=t5)"),
        (
            "extension.group",
            "extension.group is not a setting of the extension chosen; self_extend has it "
            "(extension=self_extend)",
        ),
        # Groups whose keys are their choice's: no "did you mean" into another section.
        (
            "data.depths",
            "unknown setting data.depths: the data chosen has no 'depths' (its keys: "
            "`posexp train data=<choice> --cfg job`)",
        ),
        (
            "tokenizer.vocab_size",
            "unknown setting tokenizer.vocab_size: the tokenizer chosen has no 'vocab_size' (its "
            "keys: `posexp train tokenizer=<choice> --cfg job`)",
        ),
    ],
)
def test_a_key_of_another_choice_is_said_so(key, line):
    from posexp.cli.errors import unknown_key_line

    assert unknown_key_line(key) == line


def test_a_new_key_in_an_existing_mapping_is_told_the_plus_it_needs():
    # Was "unknown setting data.task_options: the data chosen has no 'task_options'", though it
    # has: Hydra refuses the mapping's new key, and `+` is what adds it.
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    from posexp.cli.errors import one_line
    from posexp.config.paths import config_dir

    value = "data.task_options={niah_single:{haystack:noise}}"
    with initialize_config_dir(str(config_dir()), version_base="1.3", job_name="posexp"):
        with pytest.raises(ConfigCompositionException) as e:
            compose("train", overrides=["data=ruler", value])
    assert one_line(e.value) == (
        "data.task_options has no key 'niah_single' yet; a mapping takes new keys only with a "
        f"leading +: +{value}"
    )


@pytest.mark.parametrize(
    "args, words",
    [
        # Trained ALiBi without a word: the last of the two values won.
        (["train", "pe=rope", "pe=alibi"], ["pe is given twice", "pe=rope, then pe=alibi"]),
        (["train", "data=kjv", "data=copy"], ["data is given twice"]),
        # Was Hydra's "Unknown function 'yarn'": an unquoted spec is now quoted for Hydra, so
        # what is left to say is the section's own rule.
        (["train", "extrapolate.method=yarn(factor=2)"], ["optional", "+extrapolate.method="]),
        # Was "unknown setting extrapolate.method; did you mean extrapolate.method?".
        (["train", "extrapolate.method=none"], ["optional", "+extrapolate.method="]),
    ],
)
def test_overrides_hydra_would_misread_are_one_line(monkeypatch, capsys, tmp_path, args, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(monkeypatch, capsys, *args, "model=tiny")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert all(w in err for w in words), err
    assert list(tmp_path.iterdir()) == []  # no run dir


@pytest.mark.parametrize("key", ["hydra.run.dir", "hydra.sweep.dir"])
def test_a_run_dir_inside_another_run_is_refused_before_anything_is_written(
    monkeypatch, capsys, tmp_path, key
):
    # Was accepted: the next evaluation of the outer run replaced its eval/, and the nested
    # run, checkpoint included, went with it.
    outer = tmp_path / "run"
    outer.mkdir()
    (outer / "results.json").write_text("{}")
    before = sorted(tmp_path.rglob("*"))
    multirun = ["-m"] if key == "hydra.sweep.dir" else []
    code, _, err = run_main(
        monkeypatch, capsys, "train", *multirun, "model=tiny", f"{key}={outer}/eval/nested"
    )
    assert code == 2 and err.count("\n") == 1, err
    assert f"is inside the run '{outer}'" in err
    assert sorted(tmp_path.rglob("*")) == before
