"""How far a language model got beyond token frequencies: the test text's unigram perplexity,
the reference every view that judges a model's results checks it against."""

from __future__ import annotations

from typing import Any

# A model whose ppl is above this share of the test text's unigram ppl has learned little beyond
# how often each token occurs: what a view compares (the shape of a PE's column against a
# paper's, one head count against another) says little about positions or heads.
UNIGRAM_SHARE = 0.9
_unigram: dict[str, float | None] = {}  # by data/tokenizer config: each test split read once


def unigram_ppl(job: Any) -> float | None:
    """exp(entropy) of the job's test-split token frequencies: the ppl of a model that knows
    only how often each token occurs (None where the split cannot be read)."""
    import numpy as np

    from posexp.errors import PosexpError
    from posexp.runtime.build import build_data, data_key
    from posexp.store.rundir import RunDir

    if job.config is None:
        return None
    key = data_key(job.config)
    if key not in _unigram:
        try:
            kept = RunDir(job.path).tokenizer_file
            tokens = build_data(job.config, kept if kept.is_file() else None).tokens
            counts = np.bincount(tokens["test"])
        except (PosexpError, OSError, KeyError):  # KeyError: no test split
            _unigram[key] = None
        else:
            p = counts[counts > 0] / counts.sum()
            _unigram[key] = float(np.exp(-(p * np.log(p)).sum()))
    return _unigram[key]


def near_unigram(ppl: float, job: Any) -> float | None:
    """The test text's unigram ppl where ``ppl`` is at or above UNIGRAM_SHARE of it (the model
    learned little beyond how often each token occurs); None otherwise, or where unknown."""
    unigram = unigram_ppl(job)
    return unigram if unigram is not None and ppl >= UNIGRAM_SHARE * unigram else None
