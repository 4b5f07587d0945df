"""data=pystdlib: which files it reads, whole modules as documents, the path-hash split, settings."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from posexp.data import ByteTokenizer, check_dataset, load_corpus, tokenize_splits
from posexp.data.pystdlib import module_files, split_of, stdlib_root
from posexp.errors import PosexpError
from tests.helpers import run_config

KEPT = {
    "abc.py": "import os\n\n\ndef f():\n    return os.sep\n",
    "json/__init__.py": "from json.decoder import JSONDecoder\n",
    "json/decoder.py": "class JSONDecoder:\n    pass\n",
    "email/mime/text.py": "# deep in a package\nX = 1\n",
}
LEFT_OUT = {
    "test/test_abc.py": "assert True\n",
    "test/support/helper.py": "x = 1\n",
    "idlelib/idle_test/test_x.py": "x = 1\n",
    "lib2to3/tests/data/y.py": "x = 1\n",
    "unittest/test/test_case.py": "x = 1\n",
    "site-packages/pkg/mod.py": "x = 1\n",
    "dist-packages/pkg/mod.py": "x = 1\n",
    "pydoc_data/topics.py": "topics = {}\n",
    "__pycache__/abc.py": "x = 1\n",
    ".hidden/mod.py": "x = 1\n",
    "README.txt": "not python\n",
    "json/data.pyc": "not source\n",
}


def make_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def test_the_rule_keeps_modules_and_leaves_out_test_suites_and_third_party(tmp_path) -> None:
    make_tree(tmp_path, {**KEPT, **LEFT_OUT})
    assert module_files(tmp_path) == sorted(KEPT)


def test_the_split_is_the_documented_hash_of_the_relative_path() -> None:
    # The rule written out again: first 8 bytes of BLAKE2b, little-endian, mod 10: 8 val, 9 test.
    for rel in ("os.py", "json/decoder.py", "asyncio/tasks.py", "a/b/c.py", "zoneinfo/_tzpath.py"):
        h = int.from_bytes(hashlib.blake2b(rel.encode(), digest_size=8).digest(), "little")
        want = {8: "val", 9: "test"}.get(h % 10, "train")
        assert split_of(rel) == want


def test_each_document_is_a_whole_file_in_its_split_in_path_order(tmp_path) -> None:
    # Enough files that every split gets some: file i's split follows its path alone.
    files = {f"pkg{i // 10}/m{i}.py": f"# module {i}\nVALUE = {i}\n" * (i + 1) for i in range(60)}
    files["empty.py"] = "  \n\n"  # only whitespace: left out
    files["latin1.py"] = ""  # replaced below by bytes that are not UTF-8: left out
    make_tree(tmp_path, files)
    (tmp_path / "latin1.py").write_bytes("# caf\xe9\n".encode("latin-1"))
    corpus = load_corpus("pystdlib", root=str(tmp_path))
    want: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for rel in sorted(files):
        if rel.startswith("pkg"):
            want[split_of(rel)].append((tmp_path / rel).read_text(encoding="utf-8"))
    assert {s: list(d) for s, d in corpus.splits.items()} == want
    assert all(want.values()) and corpus.kind == "lm"


def test_min_chars_leaves_out_short_modules(tmp_path) -> None:
    files = {f"m{i}.py": "x" * (10 * i) + "\n" for i in range(1, 80)}
    make_tree(tmp_path, files)
    corpus = load_corpus("pystdlib", root=str(tmp_path), min_chars=400)
    lengths = [len(d) for docs in corpus.splits.values() for d in docs]
    assert min(lengths) >= 400 and len(lengths) == sum(1 for t in files.values() if len(t) >= 400)


def test_the_token_cache_starts_each_module_where_its_bytes_begin(tmp_path) -> None:
    make_tree(tmp_path / "lib", {f"m{i}.py": f"name_{i} = {i}\n" * (i + 2) for i in range(60)})
    corpus = load_corpus("pystdlib", root=str(tmp_path / "lib"))
    tok = ByteTokenizer()
    cached = tokenize_splits(corpus, tok, tmp_path / "cache", key="pystdlib")
    for split, docs in corpus.splits.items():
        starts = cached.starts[split]
        sizes = [len(d.encode()) + 1 for d in docs]  # each document, then its eos
        assert starts.tolist() == np.cumsum([0, *sizes[:-1]]).tolist()
        last = bytes(cached[split][starts[-1] : -1].astype(np.uint8)).decode()
        assert last == docs[-1] and cached[split][-1] == tok.eos_id
    names = sorted(p.name.split(".", 1)[1] for p in (tmp_path / "cache").glob("pystdlib-*.npy"))
    assert names == [f"{s}.{kind}npy" for s in ("test", "train", "val") for kind in ("", "starts.")]


@pytest.fixture(scope="module")
def stdlib():
    return load_corpus("pystdlib")


def test_the_real_stdlib_splits_are_disjoint_whole_and_deterministic(stdlib) -> None:
    root = stdlib_root()
    files = module_files(root)
    assert "os.py" in files and "asyncio/tasks.py" in files
    assert not any(f.startswith(("test/", "site-packages/")) or "/tests/" in f for f in files)
    assert not any("idle_test" in f or "pydoc_data" in f for f in files)
    # A module is in exactly one split: the one its path hashes to, as the file's whole text.
    os_text = (root / "os.py").read_text(encoding="utf-8")
    found = [s for s, docs in stdlib.splits.items() if os_text in docs]
    assert found == [split_of("os.py")]
    sizes = {s: len(d) for s, d in stdlib.splits.items()}
    total = sum(sizes.values())
    assert all(0.05 < sizes[s] / total < 0.15 for s in ("val", "test"))
    again = load_corpus("pystdlib")
    assert again.splits == stdlib.splits and again.fingerprint() == stdlib.fingerprint()


def test_the_fingerprint_follows_the_content(tmp_path) -> None:
    make_tree(tmp_path, {f"m{i}.py": f"x = {i}\n" for i in range(60)})
    before = load_corpus("pystdlib", root=str(tmp_path)).fingerprint()
    assert load_corpus("pystdlib", root=str(tmp_path)).fingerprint() == before
    (tmp_path / "m3.py").write_text("x = 'changed'\n", encoding="utf-8")
    assert load_corpus("pystdlib", root=str(tmp_path)).fingerprint() != before


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"min_chars": 0}, r"^data.min_chars must be a positive integer, got 0$"),
        ({"min_chars": "10"}, r"^data.min_chars must be a positive integer, got '10'$"),
        ({"min_chars": True}, r"^data.min_chars must be a positive integer, got true$"),
        ({"colour": 1}, r"^unknown parameter 'colour' for data 'pystdlib'; allowed: root, min"),
    ],
)
def test_bad_settings_are_refused_in_one_line(params, message) -> None:
    with pytest.raises(PosexpError, match=message):
        check_dataset("pystdlib", params)


def test_a_missing_root_or_one_without_modules_is_refused(tmp_path) -> None:
    with pytest.raises(PosexpError, match=r"^data.root '.*nowhere' is not a folder; give a"):
        check_dataset("pystdlib", {"root": str(tmp_path / "nowhere")}, inputs=True)
    make_tree(tmp_path, {"only.py": "x = 1\n"})
    with pytest.raises(PosexpError, match=r"^data=pystdlib found no module for the .* split"):
        load_corpus("pystdlib", root=str(tmp_path))


def test_a_run_config_takes_it() -> None:
    cfg = run_config("data=pystdlib", "tokenizer=byte", "model=tiny", "train.max_steps=5")
    assert cfg.data.name == "pystdlib" and cfg.data.params["min_chars"] == 1
    with pytest.raises(PosexpError, match=r"^data.min_chars must be a positive integer, got -3$"):
        run_config("data=pystdlib", "data.min_chars=-3")
