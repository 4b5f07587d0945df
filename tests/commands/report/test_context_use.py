"""The context-use view: curves over position buckets averaged over seeds with bands, its CSV
and its sentences, each computed from the numbers it shows."""

from __future__ import annotations

import csv
import statistics
from types import SimpleNamespace

import pytest

from posexp.commands.report.view import ReportContext
from posexp.commands.report.views.context_use import detect, render, series_of
from posexp.results.style import pe_style

EDGES = [0, 1, 2, 4, 8, 16, 32, 64, 128]
GAIN_EDGES = [32, 64, 128]


def doc_record(losses, method="none", length=128):
    return {
        "method": method,
        "name": method,
        "protocol": "doc_position",
        "metric": "ppl",
        "length": length,
        "ppl": 9.0,
        "tokens": 1024,
        "documents": 8,
        "position_edges": EDGES,
        "position_loss": losses,
        "position_tokens": [8] * len(losses),
    }


def gain_record(gains, gain, share):
    return {
        "method": "none",
        "name": "none",
        "protocol": "context_gain",
        "metric": "gain",
        "length": 128,
        "gain": gain,
        "key_share": share,
        "key_ppl": 3.0,
        "tokens": 768,
        "documents": 8,
        "position_edges": GAIN_EDGES,
        "position_gain": gains,
    }


def job(pe, seed, records, tmp_path):
    config = SimpleNamespace(
        seed=seed,
        pe=SimpleNamespace(params={}),
        positions=SimpleNamespace(randomized=False),
    )
    return SimpleNamespace(
        config=config,
        pe=pe,
        extrapolate=records,
        settings={"pe": pe, "seed": seed},
        name=f"{pe}-{seed}",
        train_length=32,
        path=tmp_path / f"{pe}-{seed}",
    )


# Per seed, the loss per bucket: RoPE falls past L0 = 32, ALiBi stays flat.
ROPE = [
    [9.0, 7.0, 6.0, 5.0, 4.5, 4.0, 3.0, 2.0],
    [9.2, 7.1, 6.1, 5.1, 4.6, 4.1, 3.1, 2.2],
    [8.8, 6.9, 5.9, 4.9, 4.4, 3.9, 2.9, 1.9],
]
ALIBI = [
    [9.0, 7.0, 6.0, 5.0, 4.5, 4.0, 4.0, 4.0],
    [9.1, 7.1, 6.1, 5.1, 4.6, 4.1, 4.1, 4.1],
    [8.9, 6.9, 5.9, 4.9, 4.4, 3.9, 3.95, 3.9],
]


@pytest.fixture
def ctx(tmp_path):
    jobs = []
    for pe, curves, gain in (("rope", ROPE, 0.5), ("alibi", ALIBI, 0.0)):
        for seed, losses in enumerate(curves):
            records = [
                doc_record(losses),
                doc_record([x + 1 for x in losses], method="pi"),
                doc_record(losses[:7], length=64),  # a shorter length: not the curve shown
                gain_record([gain + 0.01 * seed, gain + 0.02 * seed], gain + 0.015 * seed, 0.01),
            ]
            jobs.append(job(pe, seed, records, tmp_path))
    return ReportContext(tmp_path, jobs, ["pe", "seed"])


def test_series_take_the_longest_length_every_seed_scored(ctx):
    series = series_of(ctx, "doc_position")
    assert [(s.pe.name, s.method, s.length, len(s.records)) for s in series] == [
        ("rope", "none", 128, 3),
        ("rope", "pi", 128, 3),
        ("alibi", "none", 128, 3),
        ("alibi", "pi", 128, 3),
    ]


def test_the_figure_and_csv_show_seed_means_with_bands(ctx, tmp_path):
    figures = []
    save = ctx.save_figure
    ctx.save_figure = lambda fig, name: (figures.append((name, fig)), save(fig, name))[1]
    assert detect(ctx.jobs)
    md = render(ctx)
    names = [n for n, _ in figures]
    assert names == ["report_context_use_doc_position.png", "report_context_use_context_gain.png"]
    ax = figures[0][1].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines() if "RoPE" in line.get_label()}
    (rope,) = lines.values()
    assert rope.get_label() == "RoPE at 128 (n = 3)"
    assert list(rope.get_xdata()) == EDGES[1:]
    means = [statistics.mean(c[i] for c in ROPE) for i in range(8)]
    assert list(rope.get_ydata()) == pytest.approx(means)
    assert rope.get_color() == pe_style("rope").color
    # the band: one seed std either side of the mean, in the PE's colour
    band = ax.collections[0]
    ys = band.get_paths()[0].vertices[:, 1]
    stds = [statistics.stdev(c[i] for c in ROPE) for i in range(8)]
    assert max(ys) == pytest.approx(max(m + s for m, s in zip(means, stds, strict=True)))
    assert min(ys) == pytest.approx(min(m - s for m, s in zip(means, stds, strict=True)))

    # the second panel zooms on the positions from L0 / 2 = 16 on, on its own y range
    zoom = figures[0][1].axes[1]
    (far,) = [line for line in zoom.get_lines() if line.get_label().startswith("RoPE")]
    assert list(far.get_xdata()) == [32, 64, 128]
    assert list(far.get_ydata()) == pytest.approx(means[-3:])
    assert zoom.get_ylim()[1] < 4.5 < ax.get_ylim()[1]

    rows = list(csv.DictReader((tmp_path / "report_context_use.csv").open()))
    far = next(
        r for r in rows if r["pe"] == "rope" and r["method"] == "none" and r["bucket_start"] == "64"
    )
    assert float(far["mean"]) == pytest.approx(means[-1])
    assert float(far["std"]) == pytest.approx(stds[-1]) and far["n"] == "3"
    assert {r["protocol"] for r in rows} == {"doc_position", "context_gain"}
    assert "![doc_position](report_context_use_doc_position.png)" in md


def test_sentences_are_computed_from_the_numbers_under_the_verdict_rule(ctx):
    md = render(ctx)
    drop = [c[5] - c[7] for c in ROPE]  # positions 16-31 (inside L0 = 32) minus 64-127
    m, s = statistics.mean(drop), statistics.stdev(drop)
    want = (
        f"RoPE (length 128): the loss at positions 64–127 is {m:.3f} ± {s:.3f} nats lower than "
        "at 16–31, inside L0 (beyond seed noise"
    )
    assert want in md
    flat = [c[5] - c[7] for c in ALIBI]
    m, s = statistics.mean(flat), statistics.stdev(flat)
    assert f"ALiBi (length 128): the loss at positions 64–127 is {m:.3f} ± {s:.3f}" in md
    assert "ALiBi is worse than RoPE on loss at document positions 64–127" in md
    # context gain: RoPE's against no gain is decided, ALiBi's spread is its own seeds'
    gains = [0.5 + 0.015 * seed for seed in range(3)]
    g, gs = statistics.mean(gains), statistics.stdev(gains)
    assert f"RoPE (length 128): tokens at positions 32 and beyond gain {g:.4f} ± {gs:.4f}" in md
    assert "ALiBi is worse than RoPE on context gain past L0" in md


def test_one_seed_is_no_verdict(tmp_path):
    jobs = [job("rope", 0, [doc_record(ROPE[0])], tmp_path)]
    md = render(ReportContext(tmp_path, jobs, []))
    assert "n = 1: no verdict (it needs 3 seeds)" in md
    assert "better" not in md and "worse" not in md
