"""A run keeps its learned tokenizer (posexp/commands/train.py): decoding and evaluation use it as
trained, whatever becomes of the data files and the cache."""

from __future__ import annotations

import random
import shutil

import pytest

from posexp.commands.generate import run_tokenizer
from posexp.commands.train import kept_tokenizer, run_training
from posexp.errors import PosexpError
from posexp.store.rundir import RunDir
from tests.helpers import TINY, run_config

WORDS = "and the lord said unto moses in the beginning god created heaven and earth".split()


def text_file(path, seed):
    rng = random.Random(seed)
    paragraphs = (" ".join(rng.choice(WORDS) for _ in range(40)) for _ in range(120))
    path.write_text("\n\n".join(paragraphs) + "\n")
    return path


def test_a_bpe_run_keeps_its_tokenizer_and_decodes_without_its_data(tmp_path):
    data, cache = text_file(tmp_path / "a.txt", 0), tmp_path / "cache"
    bpe = ("data=text", f"data.files=[{data}]", "tokenizer=bpe", "tokenizer.vocab_size=300")
    cfg = run_config(*TINY, *bpe, f"cache_dir={cache}")
    run = RunDir(tmp_path / "run")
    run_training(cfg, run.path)
    (learned,) = cache.glob("bpe-*.json")
    assert run.tokenizer_file.read_bytes() == learned.read_bytes()
    trained, _ = run_tokenizer(cfg, run.tokenizer_file)
    # The data file rewritten and the cache gone: the run still has the tokenizer it trained with.
    text_file(data, 1)
    shutil.rmtree(cache)
    kept, kind = run_tokenizer(cfg, run.tokenizer_file)
    assert kind == "lm" and kept.fingerprint == trained.fingerprint
    assert kept.encode("and the lord") == trained.encode("and the lord")
    # A resume trains with it too, not a BPE learned again from today's file.
    assert kept_tokenizer(run_config(*TINY, *bpe, f"resume={run.path}"), run.path) == (
        run.tokenizer_file
    )
    data.unlink()
    assert run_tokenizer(cfg, run.tokenizer_file)[0].fingerprint == trained.fingerprint


def test_a_fine_tune_starts_from_its_parents_tokenizer_and_a_damaged_one_is_one_line(tmp_path):
    parent = RunDir(tmp_path / "parent")
    parent.path.mkdir()
    cfg = run_config(*TINY, f"parent={parent.path}")
    assert kept_tokenizer(cfg, tmp_path / "child") == parent.tokenizer_file
    parent.tokenizer_file.write_text('{"model": ')
    with pytest.raises(PosexpError, match=r"the run's tokenizer '.*tokenizer.json' is unreadable"):
        run_tokenizer(cfg, parent.tokenizer_file)


def test_relative_data_files_are_saved_absolute_and_read_the_same_from_elsewhere(tmp_path, cache):
    # Evaluated from a folder with its own data/a.txt, a run once scored that other corpus.
    import json

    from tests.helpers import posexp

    (tmp_path / "data").mkdir()
    text_file(tmp_path / "data" / "a.txt", 0)
    (tmp_path / "elsewhere" / "data").mkdir(parents=True)
    (tmp_path / "elsewhere" / "data" / "a.txt").write_text("zq xw " * 20000)
    run = tmp_path / "run"
    posexp(
        tmp_path,
        cache,
        "train",
        *TINY,
        "data=text",
        "data.files=[data/a.txt]",
        f"hydra.run.dir={run}",
    )
    saved = RunDir(run).meta()["config"]["data"]["files"]
    assert saved == [str(tmp_path / "data" / "a.txt")]
    args = ["eval-extrapolate", "--run", str(run), "--lengths", "32", "--method", "none"]
    here = posexp(tmp_path, cache, *args).stdout
    there = posexp(tmp_path / "elsewhere", cache, *args, "--force").stdout
    ppl = json.loads((run / "eval" / "extrapolate.json").read_text())[0]["ppl"]
    assert f"{ppl:.2f}" in here and f"{ppl:.2f}" in there
