"""`posexp generate`'s options and run dirs: one line naming the bad value, before any model work."""

from __future__ import annotations

import json

import pytest
import yaml

from posexp.commands.generate import generate_text
from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model.generation import TokenProgress
from posexp.store.checkpoint import save_checkpoint
from tests.helpers import run_config


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_new_tokens": 0}, r"--max-new-tokens must be in \[1, 65536\], got 0"),
        # torch.Generator.manual_seed: "Overflow when unpacking long long" with a traceback.
        ({"seed": 10**20}, r"--seed must be in \[0, 2\*\*63 - 1\], got 100000000000000000000"),
        ({"seed": -1}, r"--seed must be in \[0, 2\*\*63 - 1\], got -1"),
        ({"top_k": 0}, r"--top-k must be a positive integer, got 0"),
        ({"top_k": 5, "temperature": 0.0}, r"--top-k 5 samples among the likeliest tokens, but "),
        ({"temperature": float("nan")}, r"--temperature must be a finite number >= 0, got nan"),
        ({"length_penalty": -1.0}, r"--length-penalty must be a finite number >= 0 .*, got -1$"),
        (
            {"beam_size": 3, "temperature": 0.5},
            r"beam search decodes deterministically; got --beam 3",
        ),
    ],
)
def test_bad_options_are_named_before_any_run_is_read(tmp_path, options, message):
    # No run at all under tmp_path: the option is refused first, by its command-line name.
    with pytest.raises(PosexpError, match=f"^{message}"):
        generate_text(tmp_path / "no_run", ["x"], **{"max_new_tokens": 5, **options})


def test_max_new_tokens_has_a_documented_cap(tmp_path, cache):
    # Ran 300 s with no output for 10**9 on a rope run (no table to bound it).
    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=64
    )
    config = run_config(f"cache_dir={cache}").to_dict()
    save_checkpoint(
        tmp_path / "lm", GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": config}
    )
    with pytest.raises(
        PosexpError, match=r"^--max-new-tokens must be in \[1, 65536\], got 1000000000$"
    ):
        generate_text(tmp_path / "lm", ["x"], 1_000_000_000, device="cpu")


@pytest.mark.parametrize(
    "options, message",
    [
        # Accepted, and 2.6 GB and 15 s spent keeping beams of tokens that do not exist.
        ({"beam_size": 100_000}, r"^--beam 100000 is wider than the run's vocabulary of 260 "),
        ({"top_k": 261, "temperature": 1.0}, r"^--top-k 261 .* allowed: --top-k <= 260$"),
    ],
)
def test_a_beam_or_top_k_is_bounded_by_the_vocabulary(tmp_path, cache, options, message):
    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=64
    )
    config = run_config(f"cache_dir={cache}").to_dict()
    save_checkpoint(
        tmp_path / "lm", GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": config}
    )
    with pytest.raises(PosexpError, match=message):
        generate_text(tmp_path / "lm", ["x"], 5, device="cpu", **options)


def test_a_run_that_failed_before_training_says_so(tmp_path):
    # A sweep job that failed on its config: Hydra's record (interpolations unresolved), no checkpoint.
    run = tmp_path / "job"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump({"heads": 3, "model": {"name": "tiny", "n_heads": "${heads}"}})
    )
    (run / "results.json").write_text(
        json.dumps({"status": "failed", "error": "heads=3 does not divide d_model=64"})
    )
    with pytest.raises(
        PosexpError,
        match=r"^'.*job' has no trained model \(no checkpoint; status "
        r"failed: heads=3 does not divide d_model=64\)",
    ) as e:
        generate_text(run, ["x"], 5, device="cpu")
    assert "${heads}" not in str(e.value)


def test_a_slow_generation_without_a_terminal_reports_progress_from_the_start(capsys, monkeypatch):
    clock = iter(range(0, 1000, 11))  # 11 s per decoding step: slower than PLAIN_EVERY_S
    monkeypatch.setattr("posexp.model.generation.time.monotonic", lambda: next(clock))
    with TokenProgress(10_000, items=20) as progress:
        progress.update(1)
        progress.update(1)
    lines = capsys.readouterr().err.splitlines()
    # The first tenth is 1,000 tokens away; a line comes anyway, once 10 s have passed. It counts
    # the tokens of all 20 prompts together, up to their limits (an end of text stops one early).
    assert lines == [
        "generate (20 prompts): 1 of at most 10,000 new tokens",
        "generate (20 prompts): 2 of at most 10,000 new tokens",
    ]


def test_the_generation_bar_says_it_counts_every_prompt_together():
    with TokenProgress(40_000, "translate test", 100, "sentence", show=True) as progress:
        progress.update(12_300)
        text = str(progress.bar)
    assert text.startswith("translate test (100 sentences): ")
    assert "12.3k of at most 40.0k new tokens" in text


def test_generate_takes_a_thread_count_and_refuses_a_bad_one():
    with pytest.raises(PosexpError, match=r"^--threads must be an integer in \[1, 1024\], got 0$"):
        generate_text(None, ["hi"], threads=0)
