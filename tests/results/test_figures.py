"""posexp/results/figures.py: titles break between phrases, not inside them."""

from __future__ import annotations

from posexp.results.figures import wrap_phrases, wrapped


def test_titles_break_between_phrases():
    title = "Head-count ablation: kjv, d_model 128, 4 layers, 400 steps of 16×256"
    assert wrap_phrases(title, 40) == [
        "Head-count ablation: kjv, d_model 128,",
        "4 layers, 400 steps of 16×256",
    ]
    # textwrap alone would have left "d_model" and "128" on two lines at this width
    assert wrap_phrases("ppl by length: rope, d_model 128 (n = 3 seeds)", 30) == [
        "ppl by length: rope,",
        "d_model 128 (n = 3 seeds)",
    ]


def test_a_phrase_longer_than_a_line_breaks_between_words():
    lines = wrap_phrases("a very long phrase without any commas in it at all", 20)
    assert all(len(line) <= 20 for line in lines) and " ".join(lines).count(" ") == 10


def test_every_line_fits_and_explicit_breaks_stay():
    text = "first line: short\nsecond, a longer one with (a parenthesis) and more words"
    lines = wrapped(text, 2.0).split("\n")  # 22 characters at 10 pt
    assert lines[0] == "first line: short" and all(len(line) <= 22 for line in lines)


def test_a_title_breaks_between_clauses_before_phrases():
    title = "Test perplexity against evaluation length (nonoverlap windows); dotted: training length 256"
    assert wrap_phrases(title, 80) == [
        "Test perplexity against evaluation length (nonoverlap windows);",
        "dotted: training length 256",  # not "...; dotted:" / "training length 256"
    ]


def test_a_legend_label_never_breaks_mid_word():
    from posexp.results.figures import wrapped_label

    label = "self_extend(group=2,window=16) (n = 2)"
    text = wrapped_label(label, 22).replace("\u00a0", " ")  # a count's spaces do not break
    assert text == "self_extend(group=2,\nwindow=16) (n = 2)"
    for line in text.split("\n"):
        assert len(line) <= 22
    # a piece longer than the line stays whole
    assert (
        wrapped_label("longrope(long_factor=[1,2])", 8).split("\n")[0] == "longrope(long_factor=[1,"
    )
    assert wrapped_label("yarn(factor=4)", 40) == "yarn(factor=4)"


def test_a_count_stays_on_one_line():
    from posexp.results.figures import wrapped_label

    text = wrapped_label("yarn(factor=16) (n = 2)", 20)
    assert text.split("\n")[-1].replace("\u00a0", " ") == "(n = 2)"
