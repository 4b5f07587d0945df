"""scripts/bench_decode.py at toy size: both modes run, and batching across lengths takes fewer
decoding steps than one batch per length."""

from __future__ import annotations

from tests.helpers import load_script


def test_ragged_batches_take_fewer_steps_than_one_batch_per_length():
    bench = load_script("bench_decode")
    result = bench.worker(bench.parse_args(["--smoke", "--threads", "1"]))
    assert result["lengths"] > 1
    assert 0 < result["ragged_steps"] < result["by_length_steps"]
    assert result["ragged_s"] > 0 and result["by_length_s"] > 0


def test_prompt_lengths_are_seeded_and_within_bounds():
    bench = load_script("bench_decode")
    a, b = bench.prompt_lengths(200, 2, 100), bench.prompt_lengths(200, 2, 100)
    assert a == b and min(a) >= 4 and max(a) <= 100
    assert 20 <= sorted(a)[100] <= 45  # the median near 30 tokens, as documented
