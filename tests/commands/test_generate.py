"""`posexp generate` end to end: a real translation run through the CLI, and a language model."""

from __future__ import annotations

import platform

import pytest

from posexp.commands.generate import generate_text
from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.runtime import weights
from posexp.store.checkpoint import save_checkpoint
from posexp.store.rundir import RunDir
from tests.helpers import lock_held_elsewhere, posexp, run_config

# `posexp train data=wyc2kjv pe=... heads=...` with the byte tokenizer, shrunk to seconds.
PAIRS_RUN = [
    "data=wyc2kjv",
    "tokenizer=byte",
    "pe=learned",
    "model=tiny",
    "heads=2",
    "train.max_steps=4",
    "train.seq_len=64",
    "train.batch_size=4",
    "train.eval_interval=4",
    "train.log_interval=2",
    "train.checkpoint_interval=4",
    "train.warmup_steps=1",
    "translate.bleu_examples=3",
    "translate.test_examples=3",
    "device=cpu",
]
PROMPTS = ["And God said, Let there be light", "In the bigynnyng God made of nouyt heuene"]


def test_translation_run_end_to_end(tmp_path, cache, monkeypatch):
    run = tmp_path / "run"
    posexp(tmp_path, cache, "train", *PAIRS_RUN, f"hydra.run.dir={run}")
    assert (run / "results.json").is_file() and (run / "attention" / "layer0.png").is_file()
    out = posexp(
        tmp_path,
        cache,
        "generate",
        "--run",
        str(run),
        *PROMPTS,
        "--max-new-tokens",
        "12",
        "--device",
        "cpu",
    ).stdout
    # One translation per source, by the run's beam search (translate.beam_size 4); the same
    # in another process; --beam 1 is greedy decoding.
    assert out.split("\n")[:-1] == generate_text(run, PROMPTS, 12, device="cpu")
    assert generate_text(run, PROMPTS, 12, device="cpu") == generate_text(
        run, PROMPTS, 12, device="cpu", beam_size=4, length_penalty=0.6
    )
    greedy = posexp(
        tmp_path,
        cache,
        "generate",
        "--run",
        str(run),
        *PROMPTS,
        "--max-new-tokens",
        "12",
        "--device",
        "cpu",
        "--beam",
        "1",
    ).stdout
    assert greedy.split("\n")[:-1] == generate_text(run, PROMPTS, 12, device="cpu", beam_size=1)
    sampled = {"temperature": 1.0, "top_k": 5, "seed": 3, "device": "cpu"}
    assert generate_text(run, PROMPTS, 12, **sampled) == generate_text(run, PROMPTS, 12, **sampled)
    # The learned table (max_len = seq_len = 64) bounds prompt + new tokens, checked up front.
    with pytest.raises(
        PosexpError, match=r"^a prompt of 71 tokens leaves no room: pe=learned has 64 positions"
    ):
        generate_text(run, ["x" * 70], 5, device="cpu")
    with pytest.raises(
        PosexpError,
        match=r"^--max-new-tokens 100000 after a prompt of 3 tokens needs "
        r"100003 positions, but pe=learned has 64; allowed: "
        r"--max-new-tokens <= 61$",
    ):
        generate_text(run, ["ab"], 100000, device="cpu")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PosexpError, match="no such run dir"):
        generate_text(tmp_path / "nope", ["x"], 5, device="cpu")


def test_language_model_run_continues_the_prompt(tmp_path, cache):
    # A checkpoint as `posexp train` writes it (untrained weights: only the wiring is tested).
    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=2, n_heads=2, pe="rope", train_length=64
    )
    config = run_config(f"cache_dir={cache}").to_dict()
    save_checkpoint(
        tmp_path / "lm", GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": config}
    )
    out = generate_text(tmp_path / "lm", ["And God said", "In the"], 10, device="cpu")
    assert out[0].startswith("And God said") and out[1].startswith("In the")
    assert len(out[0]) > len("And God said")


def test_a_run_still_training_is_said_with_the_step_read(tmp_path, cache):
    mcfg = ModelConfig(vocab_size=260, d_model=32, n_layers=2, n_heads=2, pe="rope")
    config = run_config(f"cache_dir={cache}").to_dict()
    save_checkpoint(
        tmp_path / "lm", GPT(mcfg), {"step": 40, "model": mcfg.to_dict(), "config": config}
    )
    said = []

    def generate() -> None:
        generate_text(
            tmp_path / "lm", ["In the"], 2, device="cpu", announce=lambda *a: said.append(a)
        )

    generate()  # no results.json: it stopped before its last step (killed)
    with lock_held_elsewhere(tmp_path / "lm") as other:  # a trainer writing it now
        generate()
    RunDir(tmp_path / "lm").write_results({"status": "completed", "step": 40})
    generate()
    total = config["train"]["max_steps"]
    assert said == [
        (tmp_path / "lm", f"unfinished: its checkpoint of step 40 of {total}"),
        (
            tmp_path / "lm",
            f"still training ({other.pid}@{platform.node()}): its checkpoint of step 40",
        ),
        (tmp_path / "lm", ""),
    ]


def test_a_long_generation_without_a_terminal_reports_progress(tmp_path, cache, capsys):
    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=64
    )
    config = run_config(f"cache_dir={cache}").to_dict()
    save_checkpoint(
        tmp_path / "lm", GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": config}
    )
    capsys.readouterr()
    generate_text(tmp_path / "lm", ["And", "God"], 600, device="cpu")
    err = capsys.readouterr().err.splitlines()
    lines = [ln for ln in err if ln.startswith("generate (2 prompts): ")]
    # 2 prompts x 600 tokens: a line at every tenth (no eos in a byte-level lm run).
    assert lines == [
        f"generate (2 prompts): {n:,} of at most 1,200 new tokens" for n in range(120, 1201, 120)
    ]


def test_method_replaces_the_runs_extension_for_prompt_plus_new_tokens(
    tmp_path, cache, monkeypatch
):

    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=16
    )
    config = run_config(f"cache_dir={cache}").to_dict()
    save_checkpoint(
        tmp_path / "lm", GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": config}
    )
    seen = []
    load = weights.load_model

    def spy(run, device, extension=None, kernels=None):
        seen.append(extension)
        return load(run, device, extension, kernels)

    monkeypatch.setattr(weights, "load_model", spy)
    out = generate_text(tmp_path / "lm", ["And God"], 40, device="cpu", method="self_extend")
    assert out[0].startswith("And God") and len(out[0]) > len("And God")
    # 7 prompt bytes + 40 new = 47 positions after training at 16: s = 47/16.
    ext = seen[-1]
    assert (ext.method, ext.original_length) == ("self_extend", 16)
    assert ext.factor == pytest.approx(47 / 16)
    generate_text(tmp_path / "lm", ["And God"], 40, device="cpu", method="yarn", factor=4)
    assert (seen[-1].method, seen[-1].factor) == ("yarn", 4.0)
    generate_text(tmp_path / "lm", ["And God"], 5, device="cpu")
    assert seen[-1] is None  # the run's own extension
    with pytest.raises(PosexpError, match="^--factor 2 needs --method"):
        generate_text(tmp_path / "lm", ["x"], 5, device="cpu", factor=2)
    with pytest.raises(PosexpError, match=r"^--method 'yarn': --factor must be .* >= 1, got 0.5"):
        generate_text(tmp_path / "lm", ["x"], 5, device="cpu", method="yarn", factor=0.5)
    with pytest.raises(PosexpError, match="^--method 'selfextend': unknown method 'selfextend'; "):
        generate_text(tmp_path / "lm", ["x"], 5, device="cpu", method="selfextend")


def test_a_task_runs_method_counts_from_its_longest_training_row(tmp_path, cache):
    # As eval-extrapolate does: the positions trained, not train.seq_len (which bounds the rows).
    from posexp.commands.extrapolate.tasks import task_data
    from posexp.commands.generate import method_for
    from posexp.store.rundir import RunDir

    cfg = run_config("data=copy", "data.train_lengths=[1,10]", f"cache_dir={cache}")
    mcfg = ModelConfig(vocab_size=40, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=64)
    save_checkpoint(
        tmp_path / "copy", GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": cfg.to_dict()}
    )
    longest = task_data(cfg).longest_train_row()
    assert longest < 64
    ext = method_for(RunDir(tmp_path / "copy"), "yarn", None, 2 * longest)
    assert (ext.original_length, ext.factor) == (longest, 2.0)
    with pytest.raises(PosexpError, match=rf"below the training length {longest}\), got 100$"):
        method_for(RunDir(tmp_path / "copy"), "self_extend(window=100)", None, 2 * longest)


def test_an_empty_prompt_to_a_run_that_answers_is_refused():
    from posexp.commands.generate import prompt_ids
    from posexp.data.tokenizers import ByteTokenizer

    tokenizer = ByteTokenizer()
    assert prompt_ids(tokenizer, "abc", "synthetic")[-1] == tokenizer.sep_id
    with pytest.raises(PosexpError, match="^empty prompt; this run answers a prompt: give a task"):
        prompt_ids(tokenizer, "", "synthetic")
    with pytest.raises(PosexpError, match="give a sentence to translate$"):
        prompt_ids(tokenizer, "", "pairs")


def test_a_task_prompt_in_symbols_the_task_never_uses_is_refused(tmp_path, cache):
    # It printed an empty line and exited 0: the model had never read 'x' (data.symbols=10).
    cfg = run_config("data=reverse", f"cache_dir={cache}")
    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=64
    )
    save_checkpoint(
        tmp_path / "rev", GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": cfg.to_dict()}
    )
    run = str(tmp_path / "rev")
    proc = posexp(tmp_path, cache, "generate", "--run", run, "abc", "ab xz", check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        "error: prompt 2 has symbols the reverse task does not use: ' ', 'x', 'z'; "
        "allowed: a, b, c, d, e, f, g, h, i, j"
    )
    assert "Traceback" not in proc.stderr


def tiny_lm(path, cache):
    """A checkpoint as `posexp train` writes it (untrained weights)."""
    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=64
    )
    config = run_config(f"cache_dir={cache}").to_dict()
    save_checkpoint(path, GPT(mcfg), {"step": 0, "model": mcfg.to_dict(), "config": config})


def test_a_stop_ends_a_generation_inside_one_long_forward(tmp_path, cache, monkeypatch):
    # A forward over a long prompt is one torch call: Ctrl-C and SIGTERM waited until it
    # returned. Here a forward that never returns by itself: the stop must still end it.
    import os
    import signal

    from posexp.runtime import stops

    tiny_lm(tmp_path / "lm", cache)
    r, w = os.pipe()
    forward = GPT.forward

    sent = []

    def stuck_forward(self, *args, **kwargs):
        if not sent:  # one stop, in the first forward (the prompt's)
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            os.read(r, 1)  # returns only once released
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(GPT, "forward", stuck_forward)
    # this test's stop is not remembered as the one a later stop could be the echo of
    monkeypatch.setattr(stops, "_first", [(0, -stops.ECHO_S)])
    try:
        with stops.stops_as_interrupt(), pytest.raises(stops.Terminated):
            generate_text(tmp_path / "lm", ["And God said"], 5, device="cpu")
        assert stops.still_running()  # the command ends with os._exit (says_interrupted)
    finally:
        os.write(w, b"x")  # the abandoned forward finishes
        os.close(w)


def test_a_long_forward_is_not_silent_without_a_terminal(tmp_path, cache, monkeypatch, capsys):
    import os

    from posexp.model.generation import TokenProgress
    from posexp.runtime import stops

    tiny_lm(tmp_path / "lm", cache)
    r, w = os.pipe()
    forward, waiting = GPT.forward, TokenProgress.waiting

    def slow_forward(self, *args, **kwargs):
        os.read(r, 1)  # the prompt's forward ends once a progress line was printed
        return forward(self, *args, **kwargs)

    def waited(self):
        printed = self.last_line
        waiting(self)
        if self.last_line != printed:
            os.write(w, b"x" * 64)

    monkeypatch.setattr(GPT, "forward", slow_forward)
    monkeypatch.setattr(TokenProgress, "waiting", waited)
    monkeypatch.setattr(TokenProgress, "PLAIN_EVERY_S", 0.0)
    capsys.readouterr()
    with stops.stops_as_interrupt():
        out = generate_text(tmp_path / "lm", ["And"], 3, device="cpu")
    os.close(r)
    os.close(w)
    assert out[0].startswith("And")
    err = capsys.readouterr().err
    assert "generate (1 prompt): 0 of at most 3 new tokens (reading the prompts, " in err
