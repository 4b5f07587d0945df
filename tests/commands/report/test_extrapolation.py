"""The extrapolation view's sentences: each one computed from the numbers it describes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from posexp.commands.report.stats import mean_std
from posexp.commands.report.views.extrapolation import ratio_table
from posexp.commands.report.views.extrapolation_data import Column, seed_records
from posexp.commands.report.views.extrapolation_reading import ranking_sentence, reading_sentences
from tests.helpers import record_view


def record(values: float | list[float]) -> dict:
    """A column's cell: one seed's ppl, or several seeds' (mean, std, n, per seed)."""
    ppls = values if isinstance(values, list) else [values]
    mean, std = mean_std(ppls)
    return {"ppl": mean, "ppl_std": std, "n": len(ppls), "ppls": ppls}


def columns(ppl: dict[str, dict[int, float | list[float]]], protocol="nonoverlap") -> list[Column]:
    jobs = [object()]  # one PE's seeds: its methods are compared with each other
    return [
        Column(
            m,
            jobs[0],
            m,
            {(protocol, n): record_view(m, **record(v)) for n, v in by_len.items()},
            jobs=jobs,
        )
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
    # 64 is the training length: its cell does not count; one seed a cell is no verdict.
    worse = columns(
        {"none": {64: 10.0, 128: 20.0, 256: 40.0}, "pi": {64: 9.0, 128: 25.0, 256: 45.0}}
    )
    assert reading_sentences(worse, ["nonoverlap"], 64) == [
        "applied zero-shot (no fine-tuning), pi against no extension for none past the training "
        "length (nonoverlap): n = 1: no verdict over 2 cells (it needs 3 seeds); `posexp finetune` "
        "trains at the longer length first."
    ]
    three = {64: [9.0, 9.1, 8.9], 128: [15.0, 15.2, 14.8], 256: [30.0, 30.3, 29.7]}
    base = {64: [10.0, 10.1, 9.9], 128: [20.0, 20.2, 19.8], 256: [40.0, 40.4, 39.6]}
    (sentence,) = reading_sentences(columns({"none": base, "pi": three}), ["nonoverlap"], 64)
    assert sentence.startswith(
        "applied zero-shot (no fine-tuning), pi is better than no extension for none "
        "past the training length (nonoverlap) in 2 of 2 cells (2 better, 0 worse beyond seed "
        "noise, 0 within it"
    )


def test_two_seeds_never_make_a_method_better():
    # The case: "better in 2 of 3 cells, median change -1.4%" on 2 seeds.
    cols = columns(
        {
            "none": {128: [20.0, 21.0], 256: [40.0, 42.0]},
            "pi": {128: [19.0, 20.5], 256: [39.0, 41.0]},
        }
    )
    (sentence,) = reading_sentences(cols, ["nonoverlap"], 64)
    assert "n = 2: no verdict" in sentence
    assert "better" not in sentence and "worse" not in sentence


def test_a_method_within_the_seed_spread_is_no_verdict():
    close = columns(
        {
            "none": {128: [20.0, 21.0, 19.0], 256: [40.0, 42.0, 38.0]},
            "pi": {128: [19.9, 20.8, 19.2], 256: [40.2, 41.0, 38.5]},
        }
    )
    (sentence,) = reading_sentences(close, ["nonoverlap"], 64)
    assert "pi and no extension for none past the training length (nonoverlap): no verdict " in (
        sentence
    )
    assert "(0 better, 0 worse beyond seed noise, 2 within it" in sentence


def test_a_method_s_declared_caveat_follows_its_verdict():
    from posexp.extension import EXTENSIONS

    cols = columns({"none": {128: 20.0, 256: 40.0}, "blockwise": {128: 15.0, 256: 30.0}})
    (sentence,) = reading_sentences(cols, ["nonoverlap"], 64)
    assert "blockwise against no extension for none" in sentence
    assert sentence.endswith(f"Caveat: blockwise: {EXTENSIONS['blockwise'].caveat}.")
    assert "L0 tokens of context" in EXTENSIONS["blockwise"].caveat
    assert EXTENSIONS["pi"].caveat is None


def test_the_protocol_sentence_follows_the_ratio():
    job = object()
    recs = {
        ("nonoverlap", 64): record_view("none", ppl=10.0),
        ("sliding", 64): record_view("none", ppl=10.0),
        ("nonoverlap", 128): record_view("none", ppl=20.0),
        ("sliding", 128): record_view("none", ppl=30.0),
        ("nonoverlap", 256): record_view("none", ppl=40.0),
        ("sliding", 256): record_view("none", ppl=50.0),
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


def test_zero_shot_pi_says_how_many_cells_differ_beyond_the_seeds_own_spread():
    # At 128 pi is worse in every seed by about 5 (std of the differences 0.1): beyond noise.
    # At 256 the per-seed differences are +3, -2, +1: their mean is within 2 of their std.
    cols = columns(
        {
            "none": {64: [10.0, 10.1, 9.9], 128: [20.0, 21.0, 19.0], 256: [40.0, 41.0, 39.0]},
            "pi": {64: [9.0, 9.1, 8.9], 128: [25.0, 26.1, 23.9], 256: [43.0, 39.0, 40.0]},
        }
    )
    (sentence,) = reading_sentences(cols, ["nonoverlap"], 64)
    assert "pi and no extension for none past the training length (nonoverlap): no verdict" in (
        sentence
    )
    assert "(0 better, 1 worse beyond seed noise, 1 within it" in sentence


def test_seed_records_average_each_cell_and_mark_a_cell_missing_in_one_seed():
    def job(ppl128, ppl256):
        recs = [
            record_view("none", protocol="nonoverlap", length=128, ppl=ppl128),
            record_view("none", protocol="nonoverlap", length=256, ppl=ppl256),
        ]
        return SimpleNamespace(extrapolate=recs)

    recs = seed_records([job(4.0, 8.0), job(6.0, None), job(5.0, 9.0)], "none")
    cell = recs[("nonoverlap", 128)]
    assert cell["ppl"] == 5.0 and cell["ppl_std"] == pytest.approx(1.0) and cell["n"] == 3
    assert cell["ppls"] == [4.0, 6.0, 5.0]
    missing = recs[("nonoverlap", 256)]
    assert missing["ppl"] is None and missing["note"] == "scored in 2 of 3 seeds"


def test_the_ratio_table_pairs_each_seed_with_its_own_training_length_ppl():
    (col,) = columns({"none": {64: [10.0, 20.0, 40.0], 128: [11.0, 22.0, 44.0]}})
    table = ratio_table([col], "nonoverlap", [64, 128], 64)
    # Every seed's ratio is 1.10, so the spread is 0 although the seeds' ppls differ 4x.
    assert "| none | 1.00 ± 0.00 | 1.10 ± 0.00 |" in table


def test_the_ranking_names_the_gap_in_seed_std():
    jobs_a, jobs_b = [object()], [object()]
    alibi = Column(
        "ALiBi", jobs_a[0], "none", {("nonoverlap", 1024): record([6.0, 6.1, 5.9])}, jobs=jobs_a
    )
    rope = Column(
        "RoPE", jobs_b[0], "none", {("nonoverlap", 1024): record([8.0, 8.4, 7.6])}, jobs=jobs_b
    )
    (sentence,) = ranking_sentence([rope, alibi], "nonoverlap")
    assert "ALiBi is better than RoPE at 1,024 tokens" in sentence
    assert "(6.000 against 8.000: beyond seed noise (5.0× the larger seed std, n = 3))" in sentence
    close = Column(
        "RoPE", jobs_b[0], "none", {("nonoverlap", 1024): record([6.2, 7.0, 5.4])}, jobs=jobs_b
    )
    level = ranking_sentence([close, alibi], "nonoverlap")[0]
    assert "are level on ppl" in level and "within seed noise" in level
    one = Column("RoPE", jobs_b[0], "none", {("nonoverlap", 1024): record(8.0)}, jobs=jobs_b)
    assert "n = 1: no verdict (it needs 3 seeds)" in ranking_sentence([one, alibi], "nonoverlap")[0]


def test_a_pe_at_the_unigram_level_is_not_set_beside_the_paper(cache, tmp_path):
    # The KJV test split's unigram ppl is about 20: a PE at 19.9 at the training length has
    # learned token frequencies only, and "stays flat" would read as a finding against the paper.
    from hydra import compose, initialize_config_dir

    from posexp.commands.report.views.extrapolation_paper import shape_sentences
    from posexp.commands.report.views.unigram import unigram_ppl
    from posexp.config.paths import config_dir
    from posexp.config.run import from_composed
    from posexp.pe.base import describe_pe

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        config = from_composed(compose("train", overrides=["model=tiny", f"cache_dir={cache}"]))
    job = SimpleNamespace(config=config, path=tmp_path)  # a run dir without a kept tokenizer
    unigram = unigram_ppl(job)
    assert 15 < unigram < 25
    cols = []
    for name, base in (("sinusoidal", 0.99 * unigram), ("alibi", 0.6 * unigram)):
        seeds = {64: record([base]), 512: record([base * 1.01])}
        cols.append(
            Column(
                name,
                job,
                "none",
                {("nonoverlap", n): r for n, r in seeds.items()},
                pe=describe_pe(name),
                jobs=[job],
            )
        )
    (sentence,) = shape_sentences(cols, "nonoverlap", 64)
    assert f"{cols[0].label} is left out: its ppl at the training length" in sentence
    assert "99% of the test text's unigram ppl" in sentence
    # a model that learned is set beside the paper, but this KJV run is on other data
    assert f"{cols[1].label} against Press et al. 2022 (ALiBi) (ppl ratio): not comparable: " in (
        sentence
    )
    assert unigram_ppl(SimpleNamespace(config=None)) is None  # no config: no reference, no claim


def test_a_column_scored_at_some_lengths_breaks_its_line_where_it_has_none(tmp_path):
    # Was drawn as one line from 256 straight to 1,024, as though 512 had been scored.
    import math

    import matplotlib

    matplotlib.use("Agg")
    from posexp.commands.report.views.extrapolation_plot import extrapolation_plot

    shown = columns(
        {
            "none": {256: 30.0, 512: 40.0, 1024: 50.0, 2048: 60.0},
            "yarn": {256: 30.0, 1024: 35.0},
        }
    )
    saved = {}
    ctx = SimpleNamespace(
        memo={},
        jobs=[],
        figure=lambda name, shown, draw: saved.setdefault("fig", draw()) and tmp_path,
    )
    extrapolation_plot(ctx, shown, "nonoverlap", 128)
    (yarn,) = [line for line in saved["fig"].axes[1].lines if line.get_label().startswith("yarn")]
    ys = dict(zip(yarn.get_xdata(), yarn.get_ydata(), strict=True))
    assert ys[256] == 30.0 and ys[1024] == 35.0 and math.isnan(ys[512]) and math.isnan(ys[2048])
    assert yarn.get_label() == "yarn (not scored at 512, 2,048)"
    (plain,) = [line for line in saved["fig"].axes[1].lines if line.get_label() == "no extension"]
    assert not any(math.isnan(y) for y in plain.get_ydata())


def test_the_caption_names_the_lengths_a_column_lacks():
    from posexp.commands.report.views.extrapolation_plot import gap_notes

    shown = columns({"none": {256: 30.0, 512: 40.0, 2048: 60.0}, "yarn": {256: 30.0}})
    assert gap_notes(shown, "nonoverlap") == ["yarn at 512, 2,048"]
    assert gap_notes(columns({"none": {256: 1.0}, "yarn": {256: 2.0}}), "nonoverlap") == []


def test_a_run_on_the_paper_s_data_is_set_beside_its_nearest_published_multiple():
    from posexp.commands.report.views.extrapolation_paper import shape_sentences
    from posexp.pe.base import describe_pe

    flat = {"data.source": "hub", "data.name": "wikitext", "data.config": "wikitext-103-raw-v1"}
    job = SimpleNamespace(config=None, flat_config=flat)
    recs = {64: record([10.0, 11.0]), 512: record([30.0, 36.0])}
    col = Column(
        "RoPE",
        job,
        "none",
        {("nonoverlap", n): r for n, r in recs.items()},
        pe=describe_pe("rope"),
        jobs=[job, job],
    )
    (sentence,) = shape_sentences([col], "nonoverlap", 64)
    # ratios 3.0 and 3.27 at 8x; the paper's nearest multiple to 8x is 4.9x (2512 / 512)
    assert "RoPE ppl ratio 3.14 ± 0.19 at 8× L_train; the nearest published multiple is 4.9×" in (
        sentence
    )
    assert "WikiText-103, 247M-parameter models" in sentence
    assert "n = 2: no verdict" in sentence
