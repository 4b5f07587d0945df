"""Document counts and lengths of a corpus, per split, as a Markdown table (the figures in
docs/data.md).

The corpus is the one a run with the same overrides would train on (``data=...`` and its
settings, composed as ``posexp train`` composes them). Lengths are given in characters, in byte
tokens (UTF-8 bytes: what tokenizer=byte reads, before the eos each document gets), and, with
``tokenizer=bpe``, in the tokens of that BPE, learned from the train split as a run learns it.
Percentiles interpolate linearly (numpy's default). The last column counts the documents at
least ``--long`` byte tokens long (default 4,096 = 16 x a 256-token L0).

    python -m scripts.corpus_stats data=pystdlib
    python -m scripts.corpus_stats data=bible_books tokenizer=bpe --out /tmp/bible.md
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from posexp.data.registry import SPLITS, Corpus


def lengths_row(values: Sequence[int]) -> str:
    """``median / p90 / max`` of ``values`` (integers, thousands separated)."""
    a = np.asarray(values, dtype=np.int64)
    if not len(a):
        return "-"
    return " / ".join(f"{round(float(v)):,}" for v in (np.median(a), np.percentile(a, 90), a.max()))


def split_stats(docs: Sequence[str], long: int, count_tokens: object = None) -> dict[str, object]:
    """One split's figures: documents, characters, byte tokens (and the tokenizer's, when
    ``count_tokens`` maps a list of documents to their token counts)."""
    docs = list(docs)
    chars = [len(d) for d in docs]
    nbytes = [len(d.encode("utf-8")) for d in docs]
    out: dict[str, object] = {
        "documents": len(docs),
        "mb": sum(nbytes) / 1e6,
        "chars": lengths_row(chars),
        "bytes": lengths_row(nbytes),
        "long": sum(n >= long for n in nbytes),
    }
    if callable(count_tokens):
        out["bpe"] = lengths_row(count_tokens(docs))
    return out


def table(corpus: Corpus, long: int, count_tokens: object = None) -> list[str]:
    """The Markdown table of ``corpus``, one row a split."""
    bpe = callable(count_tokens)
    head = "| split | documents | MB (UTF-8) | characters: median / p90 / max "
    head += "| byte tokens: median / p90 / max "
    head += "| BPE tokens: median / p90 / max " if bpe else ""
    head += f"| documents ≥ {long:,} byte tokens |"
    lines = [head, "|---" * (6 + bpe) + "|"]
    for split in SPLITS:
        s = split_stats(corpus.splits[split], long, count_tokens)
        row = f"| {split} | {s['documents']:,} | {s['mb']:.2f} | {s['chars']} | {s['bytes']} "
        row += f"| {s['bpe']} " if bpe else ""
        lines.append(row + f"| {s['long']:,} |")
    return lines


def main(argv: Sequence[str] | None = None) -> str:
    """Compose the overrides, load the corpus, print (and save) its table; returns the text."""
    from hydra import compose, initialize_config_dir

    from posexp.config import from_composed
    from posexp.config.paths import config_dir
    from posexp.data import build_tokenizer, load_corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="+", help="config overrides: data=NAME, data.KEY=VALUE")
    ap.add_argument("--long", type=int, default=16 * 256, help="byte tokens of a long document")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = from_composed(compose("train", list(args.overrides)))
    corpus = load_corpus(cfg.data.name, **cfg.data.params)
    tok = cfg.tokenizer.to_dict()
    count = None
    if tok["name"] != "byte":
        tmp = tempfile.TemporaryDirectory(prefix="corpus_stats-")
        name = tok.pop("name")
        tokenizer = build_tokenizer(name, corpus, Path(tmp.name), **tok)
        count = lambda docs: [len(ids) for ids in tokenizer.encode_batch(docs)]  # noqa: E731
    lines = [
        f"`python -m scripts.corpus_stats {shlex.join(args.overrides)}` "
        f"(Python {platform.python_version()}, {sys.platform})",
        "",
        *table(corpus, args.long, count),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
