"""The extrapolation view's sentences: each one computed from the numbers it describes."""

from __future__ import annotations

from posexp.commands.report.views.extrapolation import Column, reading_sentences


def columns(ppl: dict[str, dict[int, float]], protocol: str = "nonoverlap") -> list[Column]:
    job = object()  # one job: its methods are compared with each other
    return [
        Column(m, job, m, {(protocol, n): {"ppl": v} for n, v in by_len.items()})
        for m, by_len in ppl.items()
    ]


def test_dynamic_ntk_is_said_to_equal_ntk_only_when_it_does():
    same = columns({"ntk": {64: 10.0, 128: 12.0}, "dynamic_ntk": {64: 10.0, 128: 12.0}})
    (sentence,) = reading_sentences(same, ["nonoverlap"], 64)
    assert sentence.startswith("dynamic_ntk equals ntk here (largest difference 0.00% over 2 cells")
    apart = columns({"ntk": {64: 10.0, 128: 12.0}, "dynamic_ntk": {64: 10.0, 128: 15.0}})
    assert reading_sentences(apart, ["nonoverlap"], 64) == [
        "dynamic_ntk and ntk differ by up to 25.0% (nonoverlap, 2 cells)."
    ]


def test_zero_shot_pi_is_judged_from_the_cells_past_the_training_length():
    # 64 is the training length: its cell does not count.
    worse = columns(
        {"none": {64: 10.0, 128: 20.0, 256: 40.0}, "pi": {64: 9.0, 128: 25.0, 256: 45.0}}
    )
    assert reading_sentences(worse, ["nonoverlap"], 64) == [
        "applied zero-shot (no fine-tuning), pi is worse than no extension in 2 of 2 cells past "
        "the training length (nonoverlap); `posexp finetune` trains at the longer length first."
    ]
    better = columns({"none": {128: 20.0, 256: 40.0}, "pi": {128: 15.0, 256: 30.0}})
    (sentence,) = reading_sentences(better, ["nonoverlap"], 64)
    assert sentence.startswith(
        "applied zero-shot (no fine-tuning), pi is better than no extension "
        "in 2 of 2 cells past the training length"
    )


def test_the_protocol_sentence_follows_the_ratio():
    job = object()
    recs = {
        ("nonoverlap", 64): {"ppl": 10.0},
        ("sliding", 64): {"ppl": 10.0},
        ("nonoverlap", 128): {"ppl": 20.0},
        ("sliding", 128): {"ppl": 30.0},
        ("nonoverlap", 256): {"ppl": 40.0},
        ("sliding", 256): {"ppl": 50.0},
    }
    (sentence,) = reading_sentences(
        [Column("rope", job, "none", recs)], ["nonoverlap", "sliding"], 64
    )
    assert sentence.startswith(
        "past the training length, sliding windows give a higher ppl than "
        "non-overlapping ones in 2 of 2 cells (median ratio 1.50): every "
        "sliding-scored token sits at position L - stride or later"
    )
    recs[("sliding", 128)]["ppl"] = recs[("sliding", 256)]["ppl"] = 5.0
    (sentence,) = reading_sentences(
        [Column("alibi", job, "none", recs)], ["nonoverlap", "sliding"], 64
    )
    assert "in 0 of 2 cells" in sentence and "helps a model that extrapolates" in sentence
