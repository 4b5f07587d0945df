"""``string_match_all``: RULER's score (Hsieh et al. 2024) of a task's greedy answers.

Each test instance's prompt is continued greedily (KV cache, stopping at eos or after the
longest answer the task can have); its score is the share of the answer's required items
(``Task.items``: the needle's value, every value of a key, every variable name, the common
words) found in the generated text, case-insensitively, in any order. A cell's ``score`` is
the mean over instances; ``accuracy`` is the share of instances with every item found; ``loss``
and ``ppl`` are the answer tokens' teacher-forced loss and its perplexity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posexp.errors import PosexpError
from posexp.scoring.registry import Metric, Scorer, Scoring, Work, register_scorer

SCORE = Metric("score", "RULER score (string_match_all)", True, log_scale=False, decimals=3)


@dataclass(frozen=True)
class Instance:
    """One test instance: its prompt, the items its answer must contain, the longest answer."""

    prompt: str
    items: tuple[str, ...]
    max_answer: int
    answer: str = ""  # the task's own answer (its items in order), for the answer loss


def match_all(output: str, items: tuple[str, ...] | list[str]) -> float:
    """The share of ``items`` found in ``output`` (case-insensitive), RULER's per-instance score."""
    text = output.lower()
    return sum(item.lower() in text for item in items) / len(items) if items else 0.0


def cut(cell: Any, source: Any) -> Work:
    """The cell's fixed test instances (a pure function of the run's data.seed), with the
    required items of each answer."""
    task = source.part(cell.task) if cell.task is not None else source.task
    longest = task.answer_length(cell.length)
    examples = source.examples("test", cell.length, cell.sample_size, cell.depth, cell.task)
    data = [Instance(p, tuple(task.items(a)), longest, a) for p, a in examples]
    return Work(sum(decode_tokens(len(i.prompt), longest) for i in data), data)


def decode_tokens(prompt: int, longest: int) -> int:
    """Tokens counted for decoding one instance of a ``prompt``-token prompt: the prompt and
    sep, then room for the longest answer and eos. ``cut`` and ``score`` both count with this,
    so the progress total is what scoring then reports (a prompt's characters are its byte
    tokens: synthetic data takes only the byte tokenizer)."""
    return prompt + 1 + longest + 1


def score(model: Any, work: Work, scoring: Scoring) -> dict[str, Any]:
    """Mean string_match_all score, share of instances fully right, instances and tokens read."""
    import torch

    if scoring.positions is not None:
        raise PosexpError(
            "string_match_all decodes with consecutive positions, and this run draws random "
            "ones (pe.randomized=true); allowed: RULER tasks on runs without pe.randomized"
        )
    tok = scoring.tokenizer
    total, full, tokens = 0.0, 0, 0
    by_length: dict[int, list[tuple[list[int], Instance]]] = {}
    for inst in work.data:
        ids = [*tok.encode(inst.prompt), tok.sep_id]
        by_length.setdefault(len(ids), []).append((ids, inst))
    was_training = model.training
    model.eval()
    try:
        for width, group in by_length.items():
            longest = group[0][1].max_answer
            new = longest + 1  # the answer, then eos
            per_batch = max(1, scoring.batch_tokens // (width + new))
            for i in range(0, len(group), per_batch):
                batch = group[i : i + per_batch]
                x = torch.tensor([ids for ids, _ in batch], device=scoring.device)
                with torch.no_grad(), scoring.autocast():
                    out = model.generate(x, new, eos_id=tok.eos_id)
                for row, (_, inst) in zip(out.tolist(), batch, strict=True):
                    answer = row[: row.index(tok.eos_id)] if tok.eos_id in row else row
                    got = match_all(tok.decode(answer), inst.items)
                    total += got
                    full += got == 1.0
                read = len(batch) * decode_tokens(width - 1, longest)  # width holds the sep
                tokens += read
                scoring.advance(read)
    finally:
        model.train(was_training)
    n = len(work.data)
    return {
        "score": total / n if n else float("nan"),
        "accuracy": full / n if n else float("nan"),
        **answer_loss(model, work, scoring),
        "examples": n,
        "tokens": tokens,
    }


def answer_loss(model: Any, work: Work, scoring: Scoring) -> dict[str, float]:
    """The answer tokens' mean loss and its perplexity, teacher-forced on the task's own answer
    (one more pass over each prompt; what the greedy score cannot show: how close a miss is)."""
    from posexp.objectives.synthetic import score_examples
    from posexp.scoring.text import safe_exp

    answers = [(inst.prompt, inst.answer) for inst in work.data]
    result = score_examples(
        model, answers, scoring.tokenizer, scoring.device, scoring.batch_tokens, scoring.autocast
    )
    return {"loss": result.loss, "ppl": safe_exp(result.loss)}


register_scorer(
    Scorer(
        "string_match_all",
        "task",
        SCORE,
        ("score", "accuracy", "loss", "ppl", "examples", "tokens"),
        cut,
        score,
    )
)
