"""scripts/t5_diagnosis.py: the distances answers read, the learned bias, per-token accuracy."""

from __future__ import annotations

import sys
from unittest import mock

import pytest

from posexp.data.pairs import IGNORE, collate_rows
from posexp.data.synthetic import make_data
from posexp.data.tokenizers import ByteTokenizer
from posexp.objectives.synthetic import encode_examples
from tests.helpers import TINY, load_script, posexp, run_dirs


@pytest.fixture(scope="module")
def script():
    return load_script("t5_diagnosis")


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_each_answer_token_is_read_from_the_stated_distance_in_real_batches(script, task):
    # Batches as training and scoring build them: the logits at row position j predict
    # target j; answer token i must be copied from the input target_distance() before j.
    data = make_data(task=task, symbols=26, train_lengths=[1, 8], test_lengths=[9, 12])
    tokenizer = ByteTokenizer()
    for n in (1, 5, 8, 12):
        examples = data.examples("test", n, 20)
        x, y = collate_rows(encode_examples(examples, tokenizer), tokenizer, 2 * n + 2)
        for r, (_, answer) in enumerate(examples):
            at = (y[r] != IGNORE).nonzero().flatten()[:n]  # answer tokens (eos after them)
            assert [int(y[r, j]) for j in at] == tokenizer.encode(answer)
            for i, j in enumerate(at.tolist()):
                assert x[r, j - script.target_distance(task, n, i)] == y[r, j]


def test_it_reads_a_t5_run(script, tmp_path, cache, capsys):
    posexp(
        tmp_path,
        cache,
        "train",
        "data=reverse",
        "data.train_lengths=[1,4]",
        "data.test_lengths=[4,5]",
        "data.test_examples=8",
        "pe=t5",
        "pe.num_buckets=8",
        *TINY,
    )
    (run,) = run_dirs(tmp_path)
    with mock.patch.object(
        sys, "argv", ["t5_diagnosis", str(run), "--plot", str(tmp_path / "b.png")]
    ):
        script.main()
    out = capsys.readouterr().out
    # Bucket column: distances 0-3 exact (8 buckets: half exact), then shared log buckets.
    assert "       3      3 " in out and "(8 buckets to 128)" in out
    # Trained on sizes 1-4: reverse answers read odd distances 1-7; one size more reads 9.
    assert "bias at distance 9 (first read one size past training) minus the mean at the " in out
    assert "trained answer distances 1-7, per head: " in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  size  5:")]
    assert len(lines) == 1 and lines[0].count("[") == 5 and "4[9] " in lines[0]
    assert (tmp_path / "b.png").stat().st_size > 0 and (tmp_path / "b.svg").stat().st_size > 0


def test_it_refuses_a_run_of_another_task(script, tmp_path, cache):
    posexp(tmp_path, cache, "train", "data=sort", "data.train_lengths=[1,4]", *TINY)
    (run,) = run_dirs(tmp_path)
    with mock.patch.object(sys, "argv", ["t5_diagnosis", str(run)]):
        with pytest.raises(Exception, match="a 'sort' run; this reads copy or reverse runs"):
            script.main()
