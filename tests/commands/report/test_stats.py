"""Summaries over seeds shared by the report views: the seed-noise verdict."""

from __future__ import annotations

from posexp.commands.report.stats import beyond_noise


def test_a_gap_of_zero_is_within_noise_even_when_seeds_agree_exactly():
    # Three seeds with the same value on both sides: the verdict read "+0.00 (beyond seed noise
    # (inf× the larger seed std, n = 3))".
    assert beyond_noise(0.0, [0.0], 3) == "within seed noise (0.0× the larger seed std, n = 3)"


def test_any_gap_is_beyond_noise_when_seeds_agree_exactly():
    assert beyond_noise(0.1, [0.0], 3).startswith("beyond seed noise (inf×")


def test_fewer_seeds_than_the_test_needs_get_no_verdict():
    assert beyond_noise(0.5, [0.1], 2) == "n = 2: no verdict (it needs 3 seeds)"
