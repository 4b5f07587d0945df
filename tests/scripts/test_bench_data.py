"""scripts/bench_data.py at toy size: the generated corpus, one case run as the script runs it."""

from __future__ import annotations

import numpy as np

from posexp.data import ByteTokenizer, load_corpus, tokenize_splits
from tests.helpers import load_script


def test_the_corpus_is_stdlib_sources_of_the_size_asked(tmp_path):
    bench = load_script("bench_data")
    size = bench.make_corpus(tmp_path / "c.txt", 0.2)
    text = (tmp_path / "c.txt").read_text(encoding="utf-8")
    assert size == len(text.encode("utf-8")) and 200_000 <= size < 200_000 + 10**6
    assert "def " in text and "import " in text
    assert "cores" in bench.machine_header()


def test_a_case_reports_the_tokens_it_cached(tmp_path):
    bench = load_script("bench_data")
    bench.make_corpus(tmp_path / "c.txt", 0.05)
    row = bench.run(bench.CASE, str(tmp_path / "c.txt"), str(tmp_path / "cache"), "byte", "1")
    corpus = load_corpus("text", files=[str(tmp_path / "c.txt")])
    want = tokenize_splits(corpus, ByteTokenizer(), tmp_path / "cache", key="bench")
    assert row["tokens"] == sum(len(t) for t in want.values()) > 0
    assert row["rss_kb"] > 0 and np.isfinite(row["tokenize_s"])
