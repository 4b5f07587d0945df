"""`posexp generate`: text from a trained run, through ``posexp.generation``.

A pairs run (translation) takes each prompt as a SOURCE: ``source <sep>`` is the prompt and the
output is the text generated up to ``<eos>``. An lm run continues the prompt text. A learned
positional table stops generation with its own one-line error at the table end. ``beam_size`` > 1
decodes each prompt by beam search (posexp/model/decoding.py) with GNMT's length penalty.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from posexp import checks
from posexp.config import RunConfig
from posexp.errors import PosexpError
from posexp.model.generation import TokenProgress, generate_ids
from posexp.runtime.kernel_choice import evaluation_kernels
from posexp.runtime.stops import interruptible

if TYPE_CHECKING:
    from posexp.store.rundir import RunDir


def run_tokenizer(cfg: RunConfig, kept: Path | None = None) -> tuple[Any, str]:
    """The tokenizer a run was trained with, and its corpus kind ("lm", "pairs" or "synthetic"):
    the one it kept (``kept``, a learned vocabulary) without reading any data, else built from
    its data config (bytes; runs from before tokenizers were kept)."""
    if kept is not None and kept.is_file():
        from posexp.data.registry import DATASETS
        from posexp.data.tokenizers import saved_tokenizer

        return saved_tokenizer(kept), DATASETS.get(cfg.data.name).kind
    return _tokenizer(
        json.dumps(
            [cfg.data.to_dict("source"), cfg.tokenizer.to_dict(), cfg.cache_dir], sort_keys=True
        )
    )


@functools.lru_cache(maxsize=4)
def _tokenizer(key: str) -> tuple[Any, str]:
    """Cached per (data, tokenizer, cache dir): loading a corpus takes seconds."""
    from posexp.data import build_tokenizer, load_corpus

    data, tok, cache_dir = json.loads(key)
    corpus = load_corpus(**data)
    tokenizer = build_tokenizer(tok.pop("name"), corpus, Path(cache_dir), **tok)
    return tokenizer, corpus.kind


# The most tokens one prompt may ask for: past it, generation on these models runs for hours
# (the KV cache and every step's attention grow with it) and says nothing useful.
MAX_NEW_TOKENS = 65536


def check_options(
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    beam_size: int | None,
    length_penalty: float | None,
) -> None:
    """Refuse a bad option by its name before any run is read (one line, what is allowed)."""
    from posexp.config import SEED_MAX

    if max_new_tokens < 1:  # the upper bound after the run's own (a learned table's length)
        raise PosexpError(
            f"--max-new-tokens must be in [1, {MAX_NEW_TOKENS}], got {max_new_tokens}"
        )
    if not math.isfinite(temperature) or temperature < 0:
        raise PosexpError(f"--temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and top_k <= 0:
        raise PosexpError(f"--top-k must be a positive integer, got {top_k}")
    if top_k is not None and temperature == 0:
        raise PosexpError(
            f"--top-k {top_k} samples among the likeliest tokens, but --temperature 0 decodes "
            "greedily; set --temperature > 0 (e.g. 0.8) or drop --top-k"
        )
    if not 0 <= seed <= SEED_MAX:
        raise PosexpError(f"--seed must be in [0, 2**63 - 1], got {seed}")
    if beam_size is not None and beam_size < 1:
        raise PosexpError(f"--beam must be a positive integer, got {beam_size}")
    if beam_size is not None and beam_size > 1 and temperature > 0:
        raise PosexpError(
            f"beam search decodes deterministically; got --beam {beam_size} with "
            f"--temperature {temperature:g} (use --temperature 0 or --beam 1)"
        )
    if length_penalty is not None and not (math.isfinite(length_penalty) and length_penalty >= 0):
        raise PosexpError(
            f"--length-penalty must be a finite number >= 0 (GNMT's alpha; 0: scores not "
            f"divided by length), got {length_penalty:g}"
        )


def check_vocab_bounds(vocab_size: int, beam_size: int, top_k: int | None) -> None:
    """Refuse a beam or a top-k wider than the run's vocabulary: a step has no more tokens to
    keep (``--beam 100000`` on 260 tokens took 2.6 GB and 15 s for nothing)."""
    for option, value in (("--beam", beam_size), ("--top-k", top_k)):
        if value is not None and value > vocab_size:
            raise PosexpError(
                f"{option} {value} is wider than the run's vocabulary of {vocab_size:,} "
                f"tokens; allowed: {option} <= {vocab_size:,}"
            )


# Corpus kinds whose rows are ``prompt <sep> answer``: generation answers the prompt.
ANSWERING = ("pairs", "synthetic")


def method_for(run_dir: Any, method: str | None, factor: float | None, length: int) -> Any:
    """The extension ``--method`` asks for (a spec: ``self_extend(group=4)``) at ``length``
    tokens, checked against the run's pe; None keeps the run's own (a ``--factor`` alone is
    refused: it needs a method)."""
    from posexp.extension import ExtensionConfig
    from posexp.extension.spec import parse_spec
    from posexp.pe import check_extension
    from posexp.runtime.weights import saved_model_config

    if method is None:
        if factor is not None:
            raise PosexpError(f"--factor {factor:g} needs --method (e.g. --method yarn)")
        return None
    from posexp.commands.extrapolate.tasks import task_data

    spec = parse_spec(method, "--method", baked=False)
    mcfg = saved_model_config(run_dir)
    check_extension(mcfg.pe, spec.name)
    # The positions trained, as eval-extrapolate counts them: a task run's longest training row
    # (its train.seq_len only bounds the rows), else the training length.
    task = task_data(run_dir.config())
    trained = task.longest_train_row() if task is not None else mcfg.train_length
    try:
        return ExtensionConfig.for_length(spec, length, trained, factor)[0]
    except PosexpError as e:
        text = str(e)
        if factor is not None:  # the factor given is --factor's, whatever the setting is called
            text = text.replace("extension.factor", "--factor")
        raise PosexpError(f"--method {spec.label!r}: {text}") from None


def check_text(name: str, text: str) -> None:
    """Refuse a prompt that is not UTF-8 text (bytes the shell passed through undecoded)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raw = os.fsencode(text)
        raise PosexpError(
            f"{name} is not UTF-8 text (byte {raw[e.start : e.start + 1]!r} at {e.start}); "
            f"pass it in UTF-8, e.g. `iconv -t UTF-8`"
        ) from None


def check_task_prompts(cfg: RunConfig, prompts: Sequence[str]) -> None:
    """Refuse a prompt written in symbols the run's task never uses (before any model is loaded)."""
    from posexp.commands.extrapolate.tasks import task_data
    from posexp.data.synthetic.base import check_prompt

    task = task_data(cfg)
    for i, prompt in enumerate(prompts):
        check_prompt(task.task, prompt, f"prompt {i + 1}")


def prompt_ids(tokenizer: Any, text: str, kind: str) -> list[int]:
    """Token ids of a prompt: ``source <sep>`` for translation and tasks, the text for an lm."""
    ids = tokenizer.encode(text)
    if kind in ANSWERING and not ids:  # the separator alone: nothing to answer
        what = "a sentence to translate" if kind == "pairs" else "a task instance"
        raise PosexpError(f"empty prompt; this run answers a prompt: give {what}")
    return [*ids, tokenizer.sep_id] if kind in ANSWERING else ids


def training_note(run_dir: RunDir) -> str:
    """'' for a finished run; else which process trains it and the step of the checkpoint read
    now (a later one will differ), or that it stopped before its last step."""
    who = run_dir.holder()
    if who is None and run_dir.status() in ("completed", "failed"):
        return ""
    try:
        step = f"its checkpoint of step {run_dir.meta()['step']}"
        total = run_dir.config().train.max_steps
    except (PosexpError, KeyError):
        return "no checkpoint yet" if who else ""
    if who is None:  # stopped before its last step (killed, interrupted): said, not hidden
        return f"unfinished: {step} of {total}"
    return f"still training ({who}): {step}"


def generate_text(
    run: Path | str | None,
    prompts: Sequence[str],
    max_new_tokens: int = 200,
    temperature: float = 0.0,
    top_k: int | None = None,
    seed: int = 0,
    device: str = "auto",
    batch_size: int = 64,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    announce: Callable[[Path, str], None] | None = None,
    method: str | None = None,
    factor: float | None = None,
    threads: int | None = None,
) -> list[str]:
    """`posexp generate`: load the run, continue (lm) or translate (pairs) each prompt.

    Beam size and length penalty default to the run's ``translate`` settings for a translation
    run, and to greedy decoding for a language model. ``announce`` is told which run dir is
    used (the newest one when ``run`` is None) and ``training_note``'s words on it. ``method``
    replaces the run's extension (none, a RoPE method, or a training-free one), set up for
    prompt + new tokens unless ``factor`` is given.
    """
    from posexp.runtime import weights
    from posexp.runtime.device import resolve_device
    from posexp.store.rundir import RunDir, latest_run

    if not prompts:
        raise PosexpError('no prompt given; pass one or more texts, e.g. "And God said"')
    for i, prompt in enumerate(prompts):
        check_text(f"prompt {i + 1}", prompt)
    check_options(max_new_tokens, temperature, top_k, seed, beam_size, length_penalty)
    if threads is not None:
        from posexp.config.sections import THREADS_MAX

        checks.integer("--threads", threads, low=1, high=THREADS_MAX)
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    run_dir = RunDir.open_run(run, "--run") if run is not None else latest_run()
    if announce is not None:
        announce(run_dir.path, training_note(run_dir))
    if not run_dir.has_checkpoint():
        # Its config may never have been completed (a job that failed before training).
        error = (run_dir.results() or {}).get("error") or run_dir.results_problem()
        raise PosexpError(
            f"{str(run_dir.path)!r} has no trained model (no checkpoint; status "
            f"{run_dir.status()}{f': {error}' if error else ''}); pass a trained run"
        )
    cfg = run_dir.config()
    tokenizer, kind = run_tokenizer(cfg, run_dir.tokenizer_file)
    if kind == "synthetic":
        check_task_prompts(cfg, prompts)
    ids = [prompt_ids(tokenizer, p, kind) for p in prompts]
    model = weights.load_model(
        run_dir,
        dev,
        method_for(run_dir, method, factor, max(len(i) for i in ids) + max_new_tokens),
        evaluation_kernels(run_dir.meta()),
    )
    reach, longest = model.pe.max_positions, max(len(i) for i in ids)
    if reach is not None and longest >= reach:
        raise PosexpError(
            f"a prompt of {longest} tokens leaves no room: pe={model.cfg.pe} has "
            f"{reach} positions; shorten the prompt"
        )
    if reach is not None and longest + max_new_tokens > reach:
        raise PosexpError(
            f"--max-new-tokens {max_new_tokens} after a prompt of {longest} tokens needs "
            f"{longest + max_new_tokens} positions, but pe={model.cfg.pe} has {reach}; allowed: "
            f"--max-new-tokens <= {max(reach - longest, 0)}"
        )
    if max_new_tokens > MAX_NEW_TOKENS:
        raise PosexpError(
            f"--max-new-tokens must be in [1, {MAX_NEW_TOKENS}], got {max_new_tokens}"
        )
    if beam_size is None:
        beam_size = cfg.translate.beam_size if kind == "pairs" and temperature == 0 else 1
    check_vocab_bounds(model.cfg.vocab_size, beam_size, top_k)
    if length_penalty is None:
        length_penalty = cfg.translate.length_penalty
    generator = torch.Generator(device=dev).manual_seed(seed)
    progress = TokenProgress(len(ids) * max_new_tokens, items=len(ids))
    # Off the main thread where a stop can end it (`posexp generate`): one forward over a long
    # prompt is one torch call, deaf to Ctrl-C and SIGTERM until it returns.
    decode = functools.partial(
        generate_ids,
        model,
        ids,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        eos_id=tokenizer.eos_id,
        batch_size=batch_size,
        device=dev,
        generator=generator,
        beam_size=beam_size,
        length_penalty=length_penalty,
        on_step=progress.update,
    )
    with progress:
        new = interruptible(decode, tick=progress.waiting)
    if kind in ANSWERING:
        return [tokenizer.decode(n) for n in new]
    return [tokenizer.decode([*p, *n]) for p, n in zip(ids, new, strict=True)]
