"""Tokenization throughput and peak memory, by tokenizer and by number of worker processes.

The corpus is generated: copies of the Python standard library's ``.py`` sources joined into one
text file until it has ``--mb`` megabytes (read as data=text, one document per paragraph). Each
case runs in a fresh process, from loading the corpus to the cached, memory-mapped token files
(the BPE learns its merges first, from ``tokenizer.train_bytes``); its peak RSS is the largest of
the process and its worker processes (``getrusage``), its time the wall clock. Each figure is also
given as a ratio against a plain single-process baseline from the same run: reading the file a
chunk at a time and UTF-8 encoding it (no posexp), which sets the machine's own pace.

    python -m scripts.bench_data --mb 463 --tokenizers byte bpe --workers 1 2
    python -m scripts.bench_data --mb 50 --out /tmp/bench.md     # a quick look

Timings are only comparable on a quiet machine; peak memory does not depend on the load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from scripts.bench_common import machine_header

CASE = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from posexp.data import build_tokenizer, load_corpus, tokenize_splits
corpus_file, cache, tokenizer, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
corpus = load_corpus("text", files=[corpus_file], workers=workers)
t1 = time.perf_counter()
tok = build_tokenizer(tokenizer, corpus, Path(cache))
t2 = time.perf_counter()
tokens = tokenize_splits(corpus, tok, Path(cache), key="bench")
t3 = time.perf_counter()
n = sum(len(t) for t in tokens.values())
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"tokens": n, "train_s": t2 - t1, "tokenize_s": t3 - t2, "total_s": t3 - t0,
                  "rss_kb": own, "worker_rss_kb": kids}))
"""

BASELINE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
n = 0
with open(sys.argv[1], encoding="utf-8") as f:
    while chunk := f.read(8 << 20):
        n += len(chunk.encode("utf-8"))
t = time.perf_counter() - t0
print(json.dumps({"tokens": n, "total_s": t,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def make_corpus(path: Path, mb: float) -> int:
    """Write copies of the standard library's .py sources to ``path`` until ``mb`` MB."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)
    want, size = int(mb * 1e6), 0
    with open(path, "w", encoding="utf-8") as out:
        while size < want:
            for src in sources:
                try:
                    text = src.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                out.write(text + "\n\n")
                size += len(text.encode("utf-8")) + 2
                if size >= want:
                    break
    return size


def run(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh Python with ``args``; its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"case failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Generate the corpus, run the baseline and every case, print (and save) the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=50.0, help="corpus size in MB")
    ap.add_argument("--tokenizers", nargs="+", default=["byte", "bpe"])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--dir", default=None, help="where the corpus and caches go (a temp dir)")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench_data-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        size = make_corpus(corpus, args.mb)
        base = run(BASELINE, str(corpus))
        base_mbs = size / 1e6 / base["total_s"]
        lines = [
            f"# tokenization: {size / 1e6:.0f} MB of stdlib sources",
            machine_header(),
            "",
            f"baseline (one process, read + UTF-8 encode): {base_mbs:.0f} MB/s, "
            f"peak RSS {base['rss_kb'] / 1024:.0f} MB",
            "",
            "| tokenizer | workers | tokens | BPE training s | tokenizing MB/s | × baseline "
            "| total s | peak RSS MB (main / worker) | RSS × baseline |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name in args.tokenizers:
            for workers in args.workers:
                cache = Path(tmp) / f"cache-{name}-{workers}"
                r = run(CASE, str(corpus), str(cache), name, str(workers))
                mbs = size / 1e6 / r["tokenize_s"]
                peak = max(r["rss_kb"], r["worker_rss_kb"]) / 1024
                lines.append(
                    f"| {name} | {workers} | {r['tokens']:,} | {r['train_s']:.1f} | {mbs:.1f} | "
                    f"{mbs / base_mbs:.3f} | {r['total_s']:.1f} | {r['rss_kb'] / 1024:.0f} / "
                    f"{r['worker_rss_kb'] / 1024:.0f} | {peak / (base['rss_kb'] / 1024):.1f} |"
                )
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    print(f"bench_data: max RSS of this script {resource.getrusage(0).ru_maxrss // 1024} MB")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"bench_data: {time.perf_counter() - t:.0f} s in all")
