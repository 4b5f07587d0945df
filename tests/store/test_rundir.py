"""RunDir: one type owns a run dir's layout, its status and its saved config."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.store.checkpoint import save_checkpoint
from posexp.store.rundir import RunDir, find_runs, latest_run
from tests.helpers import run_config


def make_run(path, step=3, results=None, pe="rope"):
    """A run dir with a real checkpoint of a tiny model (and results.json if given)."""
    cfg = run_config("model=tiny", f"pe={pe}", "train.seq_len=32", "train.eval_tokens=64")
    model = GPT(
        ModelConfig(vocab_size=260, d_model=64, n_layers=2, n_heads=4, pe=pe, train_length=32)
    )
    save_checkpoint(
        path, model, {"step": step, "model": model.cfg.to_dict(), "config": cfg.to_dict()}
    )
    if results is not None:
        RunDir(path).write_results(results)
    return model


def test_layout_and_status(tmp_path):
    run = RunDir(tmp_path / "r")
    assert not run.is_run() and run.status() == "unfinished" and run.results() is None
    make_run(run.path)
    assert run.is_run() and run.has_checkpoint() and run.step() == 3
    assert run.eval_dir == run.path / "eval" and run.results_file == run.path / "results.json"
    run.write_results({"status": "completed", "step": 3})
    assert run.status() == "completed" and run.results()["step"] == 3
    run.clear_results()
    assert run.status() == "unfinished"
    run.results_file.write_text("{not json")
    assert run.results() is None  # unreadable counts as absent, never a traceback


def test_open_says_what_is_wrong(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(PosexpError, match=r"^--run '.*f.txt' is a file; pass the run's folder"):
        RunDir.open(tmp_path / "f.txt", "--run")
    with pytest.raises(PosexpError, match=r"^resume='.*nope': no such run dir$"):
        RunDir.open(tmp_path / "nope", "resume=")


def test_a_meta_json_without_its_keys_is_one_line(tmp_path):
    make_run(tmp_path)
    meta = tmp_path / "checkpoint" / "meta.json"
    meta.write_text(json.dumps({"step": 3, "config": {}}))
    with pytest.raises(
        PosexpError, match=r"^corrupt checkpoint '.*checkpoint': its meta.json has no 'model'$"
    ):
        RunDir(tmp_path).meta()


def test_the_config_comes_back(tmp_path):
    make_run(tmp_path, pe="alibi")
    run = RunDir(tmp_path)
    assert run.config() == run_config(
        "model=tiny", "pe=alibi", "train.seq_len=32", "train.eval_tokens=64"
    )


def test_config_falls_back_to_hydras_record_and_the_cache_to_this_shell(tmp_path, monkeypatch):
    (tmp_path / ".hydra").mkdir()
    saved = run_config("pe=t5").to_dict()
    (tmp_path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(saved))
    (tmp_path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["pe=t5", "heads=4"]))
    run = RunDir(tmp_path)
    assert run.is_run() and not run.has_checkpoint() and run.step() is None
    assert run.config().pe.name == "t5" and run.overrides() == ["pe=t5", "heads=4"]
    monkeypatch.setenv("POSEXP_CACHE", str(tmp_path / "elsewhere"))
    assert run.config().cache_dir == str(tmp_path / "elsewhere")


def test_find_runs_takes_a_run_or_the_outermost_runs_of_a_sweep(tmp_path):
    make_run(tmp_path / "sweep" / "pe=rope")
    make_run(tmp_path / "sweep" / "pe=alibi", pe="alibi")
    (tmp_path / "sweep" / "pe=none" / ".hydra").mkdir(parents=True)  # started, no checkpoint yet
    (tmp_path / "sweep" / "notes").mkdir()
    runs = find_runs(tmp_path / "sweep")
    assert [r.path.name for r in runs] == ["pe=alibi", "pe=none", "pe=rope"]
    assert [r.path.name for r in find_runs(tmp_path / "sweep", need_checkpoint=True)] == [
        "pe=alibi",
        "pe=rope",
    ]
    assert find_runs(tmp_path / "sweep" / "pe=rope") == [RunDir(tmp_path / "sweep" / "pe=rope")]
    with pytest.raises(PosexpError, match="no runs in"):
        find_runs(tmp_path / "sweep" / "notes")


def test_a_study_folder_of_links_to_runs_is_read_as_a_sweep(tmp_path):
    make_run(tmp_path / "day1" / "pe=rope")
    make_run(tmp_path / "day2" / "pe=alibi", pe="alibi")
    study = tmp_path / "study"
    study.mkdir()
    (study / "rope").symlink_to(tmp_path / "day1" / "pe=rope")
    (study / "alibi").symlink_to(tmp_path / "day2" / "pe=alibi")
    (study / "again").symlink_to(tmp_path / "day1" / "pe=rope")  # the same run linked twice
    (study / "loop").symlink_to(tmp_path)  # a link loop ends, each real dir read once
    names = [str(r.path.relative_to(study)) for r in find_runs(study)]
    assert sorted(names) == ["again", "alibi"]  # walked by name: "again" before "rope"


def test_latest_run_is_the_last_checkpoint_written(tmp_path):
    with pytest.raises(PosexpError, match="no trained run under"):
        latest_run(tmp_path)
    make_run(tmp_path / "a")
    make_run(tmp_path / "b")
    os.utime(tmp_path / "a" / "checkpoint" / "meta.json", (2e9, 2e9))
    assert latest_run(tmp_path) == RunDir(tmp_path / "a")


def test_concurrent_claims_of_one_dir_never_share_it(tmp_path):
    import threading

    got: list[RunDir] = []
    same = RunDir(tmp_path / "runs" / "2026-11-30_07-00-00_kjv_rope_h4")
    threads = [threading.Thread(target=lambda: got.append(same.claim())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(r.path.name for r in got)
    assert names == sorted([same.path.name] + [f"{same.path.name}-{n}" for n in range(2, 7)])
    assert all((r.path / ".owner").is_file() for r in got)


def test_a_reader_finds_a_staged_folder_cut_between_its_renames(tmp_path):
    from posexp.store.files import read_json, staged_current, staged_dir

    class run:  # what the records' reader does: the staged folder's current copy
        @staticmethod
        def read_json(name):
            return read_json(staged_current(tmp_path / "eval") / name.split("/", 1)[1])

    with staged_dir(tmp_path / "eval") as out:
        (out / "extrapolate.json").write_text('[{"method": "none"}]')
    (tmp_path / "eval").rename(tmp_path / "eval.old")  # a kill after the first rename of a swap
    assert run.read_json("eval/extrapolate.json") == [{"method": "none"}]
    with staged_dir(tmp_path / "eval") as out:  # the next writer mends it, then swaps in its set
        assert (tmp_path / "eval" / "extrapolate.json").exists()
        (out / "extrapolate.json").write_text("[]")
    assert run.read_json("eval/extrapolate.json") == [] and not (tmp_path / "eval.old").exists()


@pytest.mark.parametrize("words", [300, 40])
def test_a_tokenizer_from_another_run_is_refused_by_its_vocabulary(tmp_path, words):
    # A larger one gave IndexError; a smaller one was scored silently (ppl 158 for 208).
    from tokenizers import Tokenizer, models

    from posexp.runtime.weights import load_model

    make_run(tmp_path / "run")  # its model: 260 tokens
    run = RunDir(tmp_path / "run")
    vocab = {f"w{i}": i for i in range(words)}
    Tokenizer(models.BPE(vocab=vocab, merges=[])).save(str(run.tokenizer_file))
    with pytest.raises(PosexpError, match=rf"has a vocabulary of {words} tokens and the run's"):
        load_model(run, "cpu")
    vocab = {f"w{i}": i for i in range(260)}
    Tokenizer(models.BPE(vocab=vocab, merges=[])).save(str(run.tokenizer_file))
    assert load_model(run, "cpu") is not None  # its own size: loaded


def test_a_tokenizer_of_the_same_size_from_another_run_is_refused_by_its_digest(tmp_path):
    # Same vocabulary size, other tokens: the size cannot tell them apart, the recorded sha256 can.
    from tokenizers import Tokenizer, models

    from posexp.runtime.weights import load_model
    from posexp.store.checkpoint import save_checkpoint

    model = make_run(tmp_path / "run")
    run = RunDir(tmp_path / "run")
    Tokenizer(models.BPE(vocab={f"a{i}": i for i in range(260)}, merges=[])).save(
        str(run.tokenizer_file)
    )
    meta = {**run.meta(), "tokenizer_sha256": run.tokenizer_digest()}
    save_checkpoint(run.path, model, meta)
    assert load_model(run, "cpu") is not None  # its own tokenizer: loaded
    Tokenizer(models.BPE(vocab={f"b{i}": i for i in range(260)}, merges=[])).save(
        str(run.tokenizer_file)
    )
    with pytest.raises(PosexpError, match=r"is not the tokenizer this run trained with: its sha"):
        load_model(run, "cpu")
