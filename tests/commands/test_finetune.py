"""`posexp finetune`: a new run from a parent's weights, with an extension baked in."""

from __future__ import annotations

import json
import math
import platform
import shutil
import sys

import pytest
import torch
import yaml

from posexp.runtime.weights import load_model
from posexp.scoring.records import checkpoint_of
from posexp.store.checkpoint import read_meta
from posexp.store.rundir import RunDir
from tests.helpers import TINY, lock_held_elsewhere, posexp, run_dirs

FT = [
    "train.max_steps=2",
    "train.eval_interval=2",
    "train.eval_tokens=512",
    "train.checkpoint_interval=2",
    "train.batch_size=2",
]


@pytest.fixture(scope="module")
def parent(tmp_path_factory, cache):
    cwd = tmp_path_factory.mktemp("finetune")
    posexp(cwd, cache, "train", "pe=rope", *TINY)
    (run,) = run_dirs(cwd)
    return cwd, run


def test_finetune_makes_a_new_run_from_the_parent(parent, cache):
    cwd, run = parent
    rel = str(run.relative_to(cwd))
    # lr ~0: the fine-tuned weights must still be the parent's (proves they were loaded).
    posexp(
        cwd,
        cache,
        "finetune",
        "--run",
        rel,
        "extension=yarn",
        "extension.factor=2",
        "train.lr=1e-12",
        "train.min_lr=1e-13",
        *FT,
    )
    runs = run_dirs(cwd)
    assert len(runs) == 2 and runs[0] == run
    ft = runs[1]
    assert ft.parent == cwd / "outputs" / "runs" and ft.name.endswith("_rope_h2_ft-yarn")
    cfg = yaml.safe_load((ft / ".hydra" / "config.yaml").read_text())
    meta = read_meta(ft)
    for saved in (cfg, meta["config"]):
        assert saved["parent"] == rel
        assert saved["train"]["seq_len"] == 64  # parent's 32 x factor 2
        assert saved["train_length"] == 32
        assert saved["model"]["name"] == "tiny" and saved["heads"] == 2  # the parent's model
        assert saved["train"]["batch_size"] == 2 and saved["train"]["max_steps"] == 2
    ext = meta["model"]["extension"]
    assert (ext["method"], ext["factor"], ext["original_length"]) == ("yarn", 2.0, 32)
    # Which of the parent's weights it started from, should the parent train on later.
    (session,) = json.loads((ft / "provenance.json").read_text())["sessions"]
    taken = checkpoint_of(RunDir(run))
    assert session["parent"] == {"dir": rel, "step": taken.step, "sha256": taken.sha256}
    assert json.loads((ft / "results.json").read_text())["status"] == "completed"
    a, b = load_model(RunDir(run), torch.device("cpu")), load_model(RunDir(ft), torch.device("cpu"))
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), name

    # eval-extrapolate uses the baked-in method by default, from the original training length.
    posexp(cwd, cache, "eval-extrapolate", "--run", str(ft), "--len", "128", "--tokens", "256")
    recs = json.loads((ft / "eval" / "extrapolate.json").read_text())
    baked = [r for r in recs if r["label"] == "baked:yarn"]
    assert [r["length"] for r in baked] == [32, 64, 128]
    assert all(r["factor"] == 2.0 and r["ppl"] is not None for r in baked)
    assert {r["label"] for r in recs} >= {"baked:yarn", "none", "yarn", "pi"}
    # With a ~0 learning rate the model is the parent: baked yarn at s=2 equals yarn at 64 (s=2).
    by = {(r["label"], r["length"]): r["ppl"] for r in recs}
    assert by["baked:yarn", 64] == pytest.approx(by["yarn", 64], rel=1e-5)


def test_finetune_a_sweep_job_then_resume_it_like_any_run(parent, cache):
    cwd, run = parent
    job = cwd / "sweep" / "pe=rope,heads=2"  # sweep job dirs hold '=' and ','
    shutil.copytree(run, job)
    posexp(cwd, cache, "finetune", "--run", str(job), "extension=pi", "train.seq_len=48", *FT)
    ft = run_dirs(cwd)[-1]
    meta = read_meta(ft)
    assert meta["config"]["parent"] == str(job)
    assert meta["config"]["train"]["seq_len"] == 48 and meta["model"]["extension"]["method"] == "pi"
    posexp(cwd, cache, "train", f"resume={ft}", "train.max_steps=4")
    assert read_meta(ft)["step"] == 4
    # Its log goes on in finetune.log, not a new train.log (a resume is `posexp train`).
    assert not (ft / "train.log").exists() and "resumed" in (ft / "finetune.log").read_text()


BAD = {
    "an encoding with other weights": (
        ["pe=learned"],
        "pe=learned changes the weights of the parent's pe=rope (pe.table.weight: none -> (",
    ),
    "model override": (
        ["model=small"],
        "finetune keeps the parent's model (model=tiny); drop model=",
    ),
    "data override": (["data=reverse"], "finetune keeps the parent's data (data=kjv); drop data="),
    "no longer length": (
        ["extension=none"],
        "finetune needs train.seq_len longer than the parent's training length 32",
    ),
    "unknown extension": (["extension=rope2"], "unknown extension 'rope2'; allowed:"),
    "factor below 1": (
        ["extension=yarn", "extension.factor=0.5"],
        "extension.factor must be a finite number >= 1, got 0.5",
    ),
    "parent given twice": (["parent=x"], "finetune sets parent= from --run"),
    "a training-free method": (
        ["extension=self_extend", "extension.factor=2"],
        "extension 'self_extend' is training-free (it changes attention at evaluation); use it "
        "with eval-extrapolate or generate --method self_extend; a run trains with: none, pi,",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_finetune_is_one_line(parent, name, monkeypatch, capsys):
    from posexp.cli import main

    cwd, run = parent
    args, message = BAD[name]
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["posexp", "finetune", "--run", str(run), *args, *FT])
    before = run_dirs(cwd)
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err
    assert run_dirs(cwd) == before  # no run dir left behind


def test_drope_drops_the_parents_rope_and_recalibrates_at_its_length(parent, cache):
    cwd, run = parent
    rel = str(run.relative_to(cwd))
    steps = [a for a in FT if not a.startswith("train.max_steps")]
    # lr ~0: the recalibrated weights are the parent's, so the model is the parent without RoPE.
    posexp(
        cwd,
        cache,
        "finetune",
        "--run",
        rel,
        "pe=none",
        "train.lr=1e-12",
        "train.min_lr=1e-13",
        *steps,
    )
    ft = run_dirs(cwd)[-1]
    meta = read_meta(ft)
    assert meta["model"]["pe"] == "none" and meta["config"]["parent"] == rel
    assert meta["config"]["train"]["seq_len"] == 32  # the parent's length, not longer
    assert meta["config"]["train"]["max_steps"] == 1  # round(6 x 2/14): DroPE's share
    rope_model = load_model(RunDir(run), torch.device("cpu"))
    drope = load_model(RunDir(ft), torch.device("cpu"))
    idx = torch.randint(0, 200, (2, 24))
    # DroPE's forward is the RoPE model's with every position at 0 (no rotation anywhere).
    at_zero = rope_model(idx, positions=torch.zeros(24, dtype=torch.long))["logits"]
    assert torch.allclose(drope(idx)["logits"], at_zero, atol=1e-5)
    assert not torch.allclose(rope_model(idx)["logits"], at_zero, atol=1e-4)
    # Any other encoding without weights of its own may take over too (ALiBi's slopes are fixed).
    posexp(cwd, cache, "finetune", "--run", rel, "pe=alibi", *FT)
    assert read_meta(run_dirs(cwd)[-1])["model"]["pe"] == "alibi"


def test_a_parent_still_training_is_said_with_the_step_taken(parent, cache):
    cwd, run = parent
    step = read_meta(run)["step"]
    with lock_held_elsewhere(run) as other:  # its trainer writing it now
        proc = posexp(
            cwd, cache, "finetune", "--run", str(run), "extension=pi", "extension.factor=2", *FT
        )
    said = (
        f"the parent is still training ({other.pid}@{platform.node()}): fine-tuning from its "
        f"checkpoint of step {step}"
    )
    assert proc.stderr.count(said) == 1  # said by the job, not again by the check before it


def test_a_parent_stopped_early_is_said(parent, cache, tmp_path):
    cwd, run = parent
    stopped = tmp_path / "stopped"
    shutil.copytree(run, stopped, ignore=shutil.ignore_patterns(".owner"))
    (stopped / "results.json").unlink()  # killed after its last checkpoint, before the end
    proc = posexp(
        cwd, cache, "finetune", "--run", str(stopped), "extension=pi", "extension.factor=2", *FT
    )
    step, total = read_meta(stopped)["step"], read_meta(stopped)["config"]["train"]["max_steps"]
    said = f"the parent stopped before its last step: fine-tuning from its checkpoint of step {step} of {total}"
    assert proc.stderr.count(said) == 1


def test_finetune_needs_a_checkpoint(tmp_path, cache):
    (tmp_path / "empty").mkdir()
    proc = posexp(tmp_path, cache, "finetune", "--run", "empty", "extension=pi", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: --run 'empty' is not a run dir (it holds no checkpoint/, results.json or "
        ".hydra/); pass a run from `posexp runs`"
    ]


def test_finetune_help_says_how_to_call_it_and_what_it_keeps(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # a row per line: the panels' rows unwrapped
    out = posexp(tmp_path, cache, "finetune", "--help").stdout
    assert "finetune --run DIR [OPTIONS] [OVERRIDES]..." in out  # after the program name
    assert (
        "Kept from the parent (overriding them is an error): model, pe, heads, data, tokenizer."
        in out
    )
    from pathlib import Path

    from posexp.config import NETWORK_ROOTS
    from posexp.config.paths import config_dir

    methods = sorted(p.stem for p in (Path(config_dir()) / "extension").glob("*.yaml"))
    rows = [line.strip("│ ") for line in out.splitlines() if line.startswith("│")]
    # The groups, discovered; what a fine-tune changes is unmarked, what it keeps marked.
    assert any(r.split(None, 1) == ["extension", ", ".join(methods)] for r in rows)
    for root in (r for r in NETWORK_ROOTS if r != "heads"):  # heads: a key, not a group
        assert any(r.startswith(f"{root} (the parent's) ") for r in rows)
    assert not list(tmp_path.glob("outputs/runs/*"))  # help starts no run


def independent_inv_freq(method: str, d: int, base: float, s: float, l0: int) -> tuple:
    """PI and YaRN frequencies written out here from the papers' formulas (YaRN as its reference
    code: correction dims floored/ceiled, a linear ramp over pair index), plus the factor that
    multiplies q and k."""
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if method == "pi":
        return theta / s, 1.0

    def dim_turning(turns: float) -> float:  # the pair index that turns `turns` times over l0
        return d * math.log(l0 / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(dim_turning(32)), 0), min(math.ceil(dim_turning(1)), d - 1)
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    return theta / s * ramp + theta * (1 - ramp), 0.1 * math.log(s) + 1


@pytest.mark.parametrize("method", ["pi", "yarn"])
def test_finetuned_model_rotates_q_and_k_as_written_in_the_paper(parent, cache, method):
    """The fine-tune's model, loaded as eval-extrapolate loads it, rotates queries and keys by
    the angles computed independently at the fine-tune's factor and the parent's length."""
    cwd, run = parent
    out = cwd / f"rot_{method}"
    posexp(
        cwd,
        cache,
        "finetune",
        "--run",
        str(run),
        f"extension={method}",
        "extension.factor=2",
        *FT,
        f"hydra.run.dir={out}",
    )
    model = load_model(RunDir(out), torch.device("cpu")).eval()
    pe = model.pe
    seen = []

    def spy(qk, positions, state=None):
        # Training and evaluation rotate q and k packed as (B, T, 2, H, d) in one call.
        rotated = type(pe).rotate_qk(pe, qk, positions, state)
        q, k = qk[:, :, 0].transpose(1, 2), qk[:, :, 1].transpose(1, 2)
        seen.append((q, k, positions, *rotated))
        return rotated

    pe.rotate_qk = spy
    for length in (64, 128):  # the fine-tune's length and past it
        seen.clear()
        with torch.no_grad():
            model(torch.randint(0, 256, (1, length)))
        inv_freq, factor = independent_inv_freq(method, 32, 10000.0, 2.0, l0=32)
        angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq
        cos, sin = angles.cos() * factor, angles.sin() * factor
        assert len(seen) == 2  # one call per layer
        for q, k, q_pos, q_rot, k_rot in seen:
            assert torch.equal(q_pos, torch.arange(length))
            for x, rotated in ((q, q_rot), (k, k_rot)):
                x1, x2 = x.double().chunk(2, dim=-1)
                expected = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
                torch.testing.assert_close(rotated.double(), expected, atol=2e-5, rtol=2e-5)


def test_hydra_flags_may_come_before_or_after_the_overrides(parent):
    from posexp.commands.finetune import finetune_args

    _, run = parent
    ours = [f"parent='{run}'", "data=kjv"]
    assert finetune_args(run, ["-m", "extension=pi,yarn"]) == ["-m", *ours, "extension=pi,yarn"]
    assert finetune_args(run, ["--cfg", "job", "extension=yarn", "train.max_steps=2"]) == [
        "--cfg",
        "job",
        *ours,
        "extension=yarn",
        "train.max_steps=2",
    ]
    assert finetune_args(run, ["extension=yarn", "-m"]) == [*ours, "extension=yarn", "-m"]
    assert finetune_args(run, ["--cfg", "job"]) == ["--cfg", "job", *ours]


def test_a_fine_tune_of_a_sweeps_job_is_written_under_that_sweep(tmp_path):
    from posexp.commands.finetune import beside_sweep, sweep_of

    sweep = tmp_path / "sweeps" / "2026-01-01_00-00-00"
    job = sweep / "pe=rope,seed=0"
    job.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}\n")
    assert sweep_of(job) == sweep.resolve()
    (arg,) = beside_sweep(job, ["extension=yarn"])
    assert arg.startswith(f"hydra.run.dir='{sweep.resolve() / 'finetunes'}/pe-rope_seed-0_ft_")
    assert arg.endswith("${now:%Y-%m-%d_%H-%M-%S}'")
    # the user's own folder, a sweep of fine-tunes, or a run of its own: left as they are
    assert beside_sweep(job, ["hydra.run.dir=elsewhere"]) == []
    assert beside_sweep(job, ["-m", "extension.factor=2,4"]) == []
    alone = tmp_path / "runs" / "a"
    alone.mkdir(parents=True)
    assert sweep_of(alone) is None and beside_sweep(alone, []) == []
