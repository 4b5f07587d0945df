"""The one rule of every comparative sentence: >= 3 seeds and a paired gap beyond the spread."""

from __future__ import annotations

import math

from posexp.results.verdict import Published, against_paper, compare, paired, rule


def test_two_seeds_get_no_verdict_however_large_the_gap():
    sentence = compare("yarn", [5.0, 5.1], "no extension", [9.0, 9.2])
    assert sentence == "yarn against no extension (ppl): n = 2: no verdict (it needs 3 seeds)."
    assert "better" not in sentence and "worse" not in sentence


def test_three_seeds_with_a_clear_paired_difference_get_a_verdict():
    # gaps -4.0, -4.1, -3.9: mean -4.0; seed stds 0.1 and 0.1, diff std 0.1 -> 40x the spread
    v = paired([5.0, 5.1, 4.9], [9.0, 9.2, 8.8])
    assert v.n == 3 and math.isclose(v.gap, -4.0)
    assert math.isclose(v.spread, 0.2)  # std of [9.0, 9.2, 8.8]
    assert v.decided
    sentence = compare("yarn", [5.0, 5.1, 4.9], "no extension", [9.0, 9.2, 8.8])
    assert sentence.startswith("yarn is better than no extension on ppl (5.000 against 9.000")
    assert "beyond seed noise (20.0× the larger seed std, n = 3)" in sentence


def test_a_difference_within_the_seed_spread_gets_no_verdict():
    # mean gap -0.2, but the seeds of either side spread by 0.5: within 2 std
    a, b = [5.0, 5.5, 4.5], [5.2, 5.7, 4.7]
    v = paired(a, b)
    assert math.isclose(v.gap, -0.2) and not v.decided
    sentence = compare("rope", a, "alibi", b)
    assert sentence.startswith("rope and alibi are level on ppl")
    assert "within seed noise" in sentence


def test_higher_is_better_metrics_name_the_winner_the_other_way():
    sentence = compare(
        "a", [0.9, 0.91, 0.89], "b", [0.5, 0.52, 0.48], what="accuracy", lower_is_better=False
    )
    assert sentence.startswith("a is better than b on accuracy")


def test_seeds_that_agree_exactly():
    assert rule(0.0, [0.0], 3).words() == "within seed noise (0.0× the larger seed std, n = 3)"
    assert rule(0.1, [0.0], 3).words().startswith("beyond seed noise (inf×")


def test_a_paper_on_other_data_is_not_compared():
    paper = Published("Press et al. 2022", "247M, WikiText-103", 1.57, 4.9, same_data=False)
    assert against_paper("RoPE", [1.1, 1.0, 1.2], 8.0, paper, "ppl ratio") == (
        "RoPE against Press et al. 2022 (ppl ratio): not comparable: other data."
    )


def test_a_paper_number_is_named_at_its_own_multiple():
    paper = Published("Press et al. 2022", "247M, WikiText-103", 1.57, 4.9, same_data=True)
    nearest = against_paper("RoPE", [1.1, 1.0], 8.0, paper, "ppl ratio")
    assert "at 8× L_train; the nearest published multiple is 4.9×" in nearest
    assert "(247M, WikiText-103): 1.57" in nearest and "n = 2: no verdict" in nearest
    same = against_paper("RoPE", [1.5, 1.6, 1.55], 4.9, paper, "ppl ratio")
    assert "at the same multiple, 4.9× L_train" in same


def test_cells_with_two_seeds_get_no_verdict():
    from posexp.results.verdict import compare_cells

    cells = [([5.0, 5.1], [9.0, 9.1])] * 3
    assert compare_cells("yarn", "no extension", cells) == (
        "yarn against no extension: n = 2: no verdict over 3 cells (it needs 3 seeds)"
    )


def test_cells_each_judged_by_the_rule():
    from posexp.results.verdict import compare_cells

    clear = ([5.0, 5.1, 4.9], [9.0, 9.2, 8.8])
    noisy = ([5.0, 5.5, 4.5], [5.2, 5.7, 4.7])
    text = compare_cells("yarn", "no extension", [clear, clear, noisy])
    assert text.startswith("yarn is better than no extension in 2 of 3 cells")
    assert "(2 better, 0 worse beyond seed noise, 1 within it;" in text
    text = compare_cells("yarn", "no extension", [clear, noisy, noisy])
    assert text.startswith("yarn and no extension: no verdict over 3 cells")
