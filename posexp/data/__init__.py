"""Data layer: corpora (by registry name), tokenizers, cached token streams and batches.

Importing this package imports every module in it, so each dataset registers itself: a new
dataset is one module using ``@register_dataset`` (plus its YAML), with no edit here.
"""

from posexp.data.pairs import IGNORE, PairBatches, tokenize_pairs
from posexp.data.registry import (
    SPLITS,
    Corpus,
    check_dataset,
    dataset_kind,
    dataset_names,
    load_corpus,
    register_dataset,
)
from posexp.data.tokenizers import (
    SPECIALS,
    BpeTokenizer,
    ByteTokenizer,
    Tokenizer,
    build_tokenizer,
    check_tokenizer,
    register_tokenizer,
    token_dtype,
    tokenizer_names,
)
from posexp.data.tokens import LMBatches, eval_windows, tokenize_splits
from posexp.registry import discover

# Discovery instead of an import list: registration is a side effect of importing a module.
discover(__name__, __path__)

__all__ = [
    "IGNORE",
    "SPECIALS",
    "SPLITS",
    "BpeTokenizer",
    "ByteTokenizer",
    "Corpus",
    "LMBatches",
    "PairBatches",
    "Tokenizer",
    "build_tokenizer",
    "check_dataset",
    "check_tokenizer",
    "dataset_kind",
    "dataset_names",
    "eval_windows",
    "load_corpus",
    "register_dataset",
    "register_tokenizer",
    "token_dtype",
    "tokenize_pairs",
    "tokenize_splits",
    "tokenizer_names",
]
