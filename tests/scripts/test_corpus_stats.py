"""scripts/corpus_stats.py: the per-split lengths table, on worked numbers and a tiny corpus."""

from __future__ import annotations

from posexp.data.pystdlib import split_of
from posexp.data.registry import Corpus
from scripts import corpus_stats


def test_lengths_are_median_p90_and_max() -> None:
    # 1..10: median 5.5 (round half to even: 6), p90 = 1 + 0.9 * 9 = 9.1 (9); 2,800 = 2,000 + 0.8 * 1,000.
    assert corpus_stats.lengths_row(list(range(1, 11))) == "6 / 9 / 10"
    assert corpus_stats.lengths_row([1000, 3000, 2000]) == "2,000 / 2,800 / 3,000"
    assert corpus_stats.lengths_row([]) == "-"


def test_a_split_counts_characters_bytes_and_long_documents() -> None:
    corpus = Corpus(splits={"train": ["ab", "é" * 3, "x" * 10], "val": ["é"], "test": ["zz"]})
    s = corpus_stats.split_stats(corpus.splits["train"], long=6)
    # characters 2, 3, 10 (p90 3 + 0.8 * 7 = 8.6); bytes 2, 6, 10 (é is 2 bytes; p90 9.2);
    # two documents reach 6 bytes.
    assert s["documents"] == 3 and s["chars"] == "3 / 9 / 10" and s["bytes"] == "6 / 9 / 10"
    assert s["long"] == 2 and s["mb"] == 18 / 1e6
    counted = corpus_stats.split_stats(["a b", "c"], long=1, count_tokens=lambda d: [7, 1])
    assert counted["bpe"] == "4 / 6 / 7"  # p90 of 1, 7: 1 + 0.9 * 6 = 6.4
    lines = corpus_stats.table(corpus, long=6)
    assert lines[2].startswith("| train | 3 | 0.00 | 3 / 9 / 10 | 6 / 9 / 10 |")
    assert len(lines) == 5 and lines[-1].endswith("| 0 |")


def test_the_command_reads_the_corpus_a_run_would(tmp_path, capsys) -> None:
    files = {f"m{i}.py": "x = 1\n" * (i + 1) for i in range(60)}
    for rel, text in files.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")
    out = tmp_path / "t.md"
    text = corpus_stats.main(["data=pystdlib", f"data.root={tmp_path}", "--out", str(out)])
    assert out.read_text(encoding="utf-8") == text and text in capsys.readouterr().out
    for split in ("train", "val", "test"):
        n = sum(split_of(rel) == split for rel in files)
        assert f"| {split} | {n} |" in text
