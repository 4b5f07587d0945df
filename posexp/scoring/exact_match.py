"""``exact_match``: a synthetic task's test instances at one size (and key depth), scored by
the exact match of the greedy answer in one teacher-forced pass, with the answer tokens' loss and
per-token accuracy (the share of answer tokens predicted right: Delétang et al.'s and Ruoss et
al.'s metric)."""

from __future__ import annotations

from typing import Any

from posexp.scoring.registry import ACCURACY, TASK, Scorer, Scoring, Work, register_scorer
from posexp.scoring.text import safe_exp


def cut(cell: Any, source: Any) -> Work:
    """The cell's fixed test instances (a pure function of the run's data.seed)."""
    examples = source.examples("test", cell.length, cell.sample_size, cell.depth, cell.task)
    return Work(sum(len(p) + len(a) + 1 for p, a in examples), examples)


def score(model: Any, work: Work, scoring: Scoring) -> dict[str, Any]:
    """Accuracy, per-token accuracy, answer loss and its perplexity, answer tokens and instances
    scored."""
    from posexp.objectives.synthetic import score_examples

    result = score_examples(
        model,
        work.data,
        scoring.tokenizer,
        scoring.device,
        scoring.batch_tokens,
        scoring.autocast,
        scoring.advance,
        scoring.positions,
    )
    return {
        "accuracy": result.accuracy,
        "token_accuracy": result.token_accuracy,
        "loss": result.loss,
        "ppl": safe_exp(result.loss),
        "tokens": result.tokens,
        "examples": result.rows,
    }


register_scorer(
    Scorer(
        "exact_match",
        TASK,
        ACCURACY,
        ("accuracy", "token_accuracy", "loss", "ppl", "tokens", "examples"),
        cut,
        score,
    )
)
