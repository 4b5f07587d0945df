"""PoSE: chunked positions with skips, rows read at them, and the settings that turn it on."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
import torch

from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.positions.pose import (
    PoseBatches,
    PoseConfig,
    filled_lengths,
    pose_layout,
    pose_positions,
)
from posexp.runtime.trainer import Trainer
from tests.helpers import TINY, posexp, run_config, run_dirs


def chunks_of(lengths: np.ndarray, row: torch.Tensor) -> list[torch.Tensor]:
    """The row's positions cut at its chunk lengths."""
    return list(torch.split(row, lengths.tolist()))


@pytest.mark.parametrize("chunks", [2, 3, 5])
def test_chunks_are_consecutive_runs_that_tile_the_window(chunks):
    window, target = 24, 100
    lengths, skips = pose_layout(64, window, target, chunks, seed=1, step=2)
    p = pose_positions(64, window, target, chunks, seed=1, step=2)
    assert p.shape == (64, window) and p.dtype == torch.int64
    assert lengths.shape == skips.shape == (64, chunks)
    assert (lengths >= 1).all() and (lengths.sum(1) == window).all()
    assert (skips[:, 0] == 0).all() and (np.diff(skips, axis=1) >= 0).all()
    assert (p[:, 0] == 0).all()  # the first chunk starts at position 0
    assert (p[:, 1:] > p[:, :-1]).all()  # strictly increasing
    assert p.min() >= 0 and p.max() < target
    for r in range(64):
        start = 0
        for i, chunk in enumerate(chunks_of(lengths[r], p[r])):
            # Chunk i: consecutive positions from its start in the row plus its skip u_i.
            expected = torch.arange(start, start + len(chunk)) + int(skips[r, i])
            assert torch.equal(chunk, expected)
            start += len(chunk)


def test_the_skip_of_two_chunks_covers_its_whole_range():
    window, target = 8, 14  # u_2 in [0, 6]
    seen = set()
    for step in range(40):
        lengths, skips = pose_layout(16, window, target, 2, seed=0, step=step)
        seen |= set(skips[:, 1].tolist())
        assert set(lengths[:, 0].tolist()) <= set(range(1, window))
    assert seen == set(range(target - window + 1))  # both ends reached: 0 and Lt - Lc
    p = torch.cat([pose_positions(16, window, target, 2, 0, s) for s in range(40)])
    assert p.max() == target - 1  # the last position Lt - 1 occurs, none past it


def test_positions_are_a_pure_function_of_seed_and_step():
    a = pose_positions(8, 32, 256, 2, seed=0, step=5)
    assert torch.equal(a, pose_positions(8, 32, 256, 2, seed=0, step=5))
    assert not torch.equal(a, pose_positions(8, 32, 256, 2, seed=0, step=6))
    assert not torch.equal(a, pose_positions(8, 32, 256, 2, seed=1, step=5))


@pytest.mark.parametrize(("window", "target", "chunks"), [(8, 8, 2), (8, 16, 1), (4, 16, 5)])
def test_impossible_layouts_are_refused(window, target, chunks):
    with pytest.raises(ValueError, match="PoSE needs 2 <= chunks <= window < target"):
        pose_positions(2, window, target, chunks, 0, 0)


POSE = PoseConfig(True, 64, 2)


def test_rows_hold_the_document_tokens_at_their_positions_and_predict_the_next_ones():
    # Distinct tokens: each one says where in the stream it was read.
    stream = np.random.default_rng(0).permutation(5000).astype(np.uint16)
    where = np.argsort(stream)
    batches = PoseBatches(stream, batch_size=8, window=16, pose=POSE, seed=3)
    for step in (0, 7):
        x, y = batches.batch(step)
        p = pose_positions(8, 16, 64, 2, seed=3, step=step)
        assert torch.equal(batches.positions(step), p)
        assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == torch.int64
        start = torch.from_numpy(where[x[:, 0].numpy()])  # the span's first token: position 0
        at = start[:, None] + p
        assert torch.equal(x, torch.from_numpy(stream.astype(np.int64))[at])
        # Targets are the document's token p + 1, also at a chunk's last token.
        assert torch.equal(y, torch.from_numpy(stream.astype(np.int64))[at + 1])
    # A skip between chunks: the chunk's last target is not the next chunk's first token.
    x, y = batches.batch(0)
    gaps = p[:, 1:] - p[:, :-1] > 1
    assert gaps.any() and not torch.equal(y[:, :-1][gaps], x[:, 1:][gaps])


@pytest.mark.parametrize(
    ("tokens", "allowed"),
    [
        # Room above the 16-token window: a lower target, or the text a 64 target needs.
        (64, "train.pose.target_length from 17 to 63, or at least 65 tokens of train text"),
        # None: any target it could hold is not above the window, so only more text helps.
        (
            16,
            "at least 65 tokens of train text, as train.pose.target_length must stay above "
            "train.seq_len=16",
        ),
    ],
)
def test_a_stream_shorter_than_the_target_says_only_what_would_fit(tokens, allowed):
    with pytest.raises(PosexpError) as e:
        PoseBatches(np.arange(tokens), 2, 16, POSE, 0)
    assert str(e.value) == (
        f"the train split has {tokens} tokens, too short for PoSE spans of "
        f"train.pose.target_length=64 (65 tokens); allowed: {allowed}"
    )


def test_the_trainer_hands_the_model_the_positions_the_rows_were_read_at():
    cfg = run_config(*TINY, "train.pose.enabled=true", "train.pose.target_length=100")
    trainer = SimpleNamespace(cfg=cfg, step=4, device=torch.device("cpu"))
    got = Trainer.positions(trainer, torch.Size((4, 32)), 4)
    batches = PoseBatches(np.arange(1000), 4, 32, cfg.train.pose, cfg.seed)
    assert torch.equal(got, batches.positions(4))
    assert got.max() < 100


def test_the_trainer_draws_text_positions_whatever_it_is_told_of_full_rows():
    # Text targets are all scored: the rows count as full, and the layout is the text one.
    cfg = run_config(*TINY, "train.pose.enabled=true", "train.pose.target_length=100")
    trainer = SimpleNamespace(cfg=cfg, step=2, device=torch.device("cpu"))
    _, y = PoseBatches(np.arange(1000), 4, 32, cfg.train.pose, cfg.seed).batch(2)
    assert torch.equal(
        Trainer.positions(trainer, y.shape, 4, y), Trainer.positions(trainer, y.shape, 4)
    )


# ---- task rows: the content stays whole, only the positions skip (v_i = 0) ---------------------

# copy rows of sizes 1-10: `prompt <sep> answer` of 3 to 21 tokens, padded to 21 (the window).
TASK = [*TINY, "data=copy", "data.train_lengths=[1,10]", "data.val_examples=4"]
TASK_POSE = [*TASK, "train.pose.enabled=true", "train.pose.target_length=60", "train.pose.chunks=3"]


def task_objective(*overrides: str):
    """(config, SyntheticTask objective) of a copy run with ``overrides``."""
    from posexp.data import ByteTokenizer, load_corpus
    from posexp.objectives.synthetic import SyntheticTask

    cfg = run_config(*overrides)
    corpus = load_corpus(cfg.data.name, **cfg.data.params)
    data = SimpleNamespace(corpus=corpus, tokenizer=ByteTokenizer())
    return cfg, SyntheticTask(cfg, data, torch.device("cpu"), contextlib.nullcontext)


def test_a_rows_own_length_ends_at_its_last_scored_target():
    y = torch.tensor([[-100, 5, 6, -100, -100], [1, 2, 3, 4, 5], [-100] * 5, [7, -100, 8, 9, -100]])
    assert filled_lengths(y).tolist() == [3, 5, 5, 4]


@pytest.mark.parametrize("chunks", [2, 3])
def test_a_padded_row_is_cut_inside_its_own_tokens(chunks):
    window, target = 20, 50
    filled = np.array([20, 12, 3, 2, 1] * 8)
    lengths, skips = pose_layout(40, window, target, chunks, 0, 1, filled)
    assert (lengths >= 1).all() and (lengths.sum(1) == window).all()
    assert (skips[:, 0] == 0).all() and (np.diff(skips, axis=1) >= 0).all()
    assert skips.max() <= target - window
    cuts = np.cumsum(lengths, axis=1)[:, :-1]  # chunk i + 1 starts at token cuts[:, i]
    for r, n in enumerate(filled):
        # Every gap of the row's own tokens can be cut; only a row with fewer gaps than
        # chunks - 1 cuts its padding too.
        assert (cuts[r] <= n - 1).sum() == min(chunks - 1, n - 1)
    p = pose_positions(40, window, target, chunks, 0, 1, filled)
    assert (p[:, 0] == 0).all() and (p[:, 1:] > p[:, :-1]).all() and p.max() < target
    # Full rows draw the text layout exactly.
    full = pose_layout(40, window, target, chunks, 0, 1, np.full(40, window))
    text = pose_layout(40, window, target, chunks, 0, 1)
    assert all(np.array_equal(a, b) for a, b in zip(full, text, strict=True))


def test_task_rows_keep_their_tokens_and_skip_their_positions():
    from posexp.objectives.synthetic import encode_examples

    cfg, objective = task_objective(*TASK_POSE, "train.batch_size=16")
    _, plain = task_objective(*TASK, "train.batch_size=16")
    window, target = objective.row_tokens, 60
    assert window == 21
    top = 0
    for step in range(6):
        x, y = objective.batch(step)
        # The tokens and targets are the rows a run without PoSE trains on.
        expected_x, expected_y = plain.batch(step)
        assert torch.equal(x, expected_x) and torch.equal(y, expected_y)
        examples = objective.data.train_batch(cfg.seed, step, 16)
        own = np.array(
            [len(a) + 1 + len(b) for a, b in encode_examples(examples, objective.tokenizer)]
        )
        assert filled_lengths(y).tolist() == own.tolist()
        trainer = SimpleNamespace(cfg=cfg, step=step, device=torch.device("cpu"))
        p = Trainer.positions(trainer, x.shape, 16, y)
        assert p.shape == x.shape and (p[:, 0] == 0).all()
        assert (p[:, 1:] > p[:, :-1]).all() and p.max() < target
        lengths, skips = pose_layout(16, window, target, 3, cfg.seed, step, own)
        assert (skips[:, 0] == 0).all() and (np.diff(skips, axis=1) >= 0).all()
        assert skips.max() <= target - window
        for r, n in enumerate(own):
            start = 0
            for i, chunk in enumerate(chunks_of(lengths[r], p[r])):
                expected = torch.arange(start, start + len(chunk)) + int(skips[r, i])
                assert torch.equal(chunk, expected)
                start += len(chunk)
            # All three chunks start inside the row's own tokens (n >= 3); the padding after
            # them continues the last chunk's positions.
            assert lengths[r, :-1].sum() <= n - 1
        top = max(top, int(p.max()))
    assert top >= window  # the skips reach past the window


def test_the_trainer_feeds_task_positions_to_the_model_and_validation_reads_0_to_t(tmp_path, cache):
    from posexp.commands.train import run_training
    from posexp.model import GPT

    cfg = run_config(
        *TASK_POSE,
        "train.max_steps=2",
        "train.warmup_steps=1",
        "train.eval_interval=2",
        "train.checkpoint_interval=2",
    ).replace(cache_dir=str(cache))
    calls = []
    forward = GPT.forward

    def spy(self, idx, targets=None, positions=None, *args, **kwargs):
        calls.append((self.training, targets, positions))
        return forward(self, idx, targets, positions, *args, **kwargs)

    with contextlib.chdir(tmp_path), mock.patch.object(GPT, "forward", spy):
        run_training(cfg, tmp_path / "run")
    trained = [(y, p) for training, y, p in calls if training]
    scored = [p for training, _, p in calls if not training]
    assert len(trained) == 2
    for step, (y, p) in enumerate(trained):
        assert torch.equal(p, pose_positions(4, 21, 60, 3, cfg.seed, step, filled_lengths(y)))
    # Validation (steps 0 and 2) scores the rows at 0..T-1: no positions given.
    assert scored and all(p is None for p in scored)


# ---- the settings ------------------------------------------------------------------------------


def test_the_setting_reaches_the_run_config_and_back():
    cfg = run_config("train.pose.enabled=true", "train.pose.target_length=1024")
    assert cfg.train.pose == PoseConfig(True, 1024, 2)
    assert cfg.to_dict()["train"]["pose"] == {"enabled": True, "target_length": 1024, "chunks": 2}
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    assert run_config().train.pose == PoseConfig()  # off by default


ON = ["train.pose.enabled=true", "train.pose.target_length=1024"]
COPY = ["data=copy", "data.train_lengths=[1,10]"]  # rows of up to 10 + 1 + 10 = 21 tokens
BAD = {
    "no target": (
        ["train.pose.enabled=true"],
        "train.pose.enabled=true needs train.pose.target_length, the length to train positions "
        "for (above the train.seq_len=256-token window)",
    ),
    "target not above the window": (
        ["train.pose.enabled=true", "train.pose.target_length=256"],
        "train.pose.target_length=256 must be above the train.seq_len=256 window PoSE trains on; "
        "allowed: train.pose.target_length > 256",
    ),
    "one chunk": ([*ON, "train.pose.chunks=1"], "train.pose.chunks must be an integer >= 2, got 1"),
    "more chunks than tokens": (
        [*ON, "train.pose.chunks=300"],
        "train.pose.chunks=300 is more chunks than the 256 tokens of a window; allowed: "
        "2 <= train.pose.chunks <= 256",
    ),
    "target while off": (
        ["train.pose.target_length=1024"],
        "train.pose.target_length=1024 only applies with train.pose.enabled=true",
    ),
    "not a switch": (["train.pose.enabled=yes"], "train.pose.enabled must be true or false"),
    "no positions": (
        ["pe=none", *ON],
        "train.pose.enabled=true needs a PE that takes positions; pe=none has none",
    ),
    "positions counted by content": (
        ["pe=cope", *ON],
        "train.pose.enabled=true needs a PE that takes positions; pe=cope has none",
    ),
    "with randomized positions": (
        ["pe.randomized=true", "pe.max_position=2048", *ON],
        "train.pose.enabled=true and pe.randomized=true both choose the training positions",
    ),
    "translation pairs": (
        ["data=wyc2kjv", *ON],
        "train.pose.enabled=true trains on text or synthetic task rows; data=wyc2kjv is a pairs "
        "corpus, whose translations are decoded within train.seq_len (translate.*), so positions "
        "trained past it would never be used",
    ),
    # Task rows: the window is the longest training row (21 tokens), not train.seq_len (256).
    "a task run without a target": (
        [*COPY, "train.pose.enabled=true"],
        "train.pose.enabled=true needs train.pose.target_length, the length to train positions "
        "for (above the 21-token window, the longest training row of data.train_lengths=[1, 10])",
    ),
    "a task target not above its rows": (
        [*COPY, "train.pose.enabled=true", "train.pose.target_length=21"],
        "train.pose.target_length=21 must be above the 21-token window PoSE trains on (the "
        "longest training row of data.train_lengths=[1, 10]); allowed: "
        "train.pose.target_length > 21",
    ),
    "more chunks than a task row": (
        [*COPY, "train.pose.enabled=true", "train.pose.target_length=64", "train.pose.chunks=22"],
        "train.pose.chunks=22 is more chunks than the 21 tokens of a window (the longest training "
        "row of data.train_lengths=[1, 10]); allowed: 2 <= train.pose.chunks <= 21",
    ),
    "past a learned table": (
        ["pe=learned", *ON],
        "train.pose.target_length=1024 is past what pe=learned can represent (256 positions); "
        "allowed: train.pose.target_length <= 256",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_settings_are_one_line(name):
    overrides, message = BAD[name]
    with pytest.raises(PosexpError) as e:
        run_config(*overrides)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_an_unknown_key_is_refused_by_name():
    d = run_config().to_dict()
    d["train"]["pose"]["chunk"] = 3
    with pytest.raises(PosexpError, match="^unknown setting train.pose.chunk; allowed: enabled,"):
        RunConfig.from_dict(d)
    from posexp.cli.errors import unknown_key_line

    assert unknown_key_line("train.pose.chunk") == (
        "unknown setting train.pose.chunk; did you mean train.pose.chunks?"
    )


def test_the_target_may_reach_what_the_pe_represents_with_its_extension():
    assert run_config("pe=learned", "pe.max_len=1024", *ON).train.pose.target_length == 1024
    # A fine-tune of a learned table with PI: L0 rows, read at positions p / s.
    d = run_config("pe=learned", "train.seq_len=32", "extension=pi", "extension.factor=4").to_dict()
    d["train_length"], d["extension"]["original_length"] = 32, None
    d["train"]["pose"] = {"enabled": True, "target_length": 128, "chunks": 2}
    assert RunConfig.from_dict(d).train.pose.target_length == 128
    d["train"]["pose"]["target_length"] = 129
    with pytest.raises(PosexpError, match="past what pe=learned can represent \\(128 positions\\)"):
        RunConfig.from_dict(d)


def test_a_bad_pose_run_is_one_line_and_leaves_no_run_dir(tmp_path, cache):
    proc = posexp(tmp_path, cache, "train", *TINY, "pe=none", *ON, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "pe=none has none" in lines[0], proc.stderr
    assert run_dirs(tmp_path) == []
