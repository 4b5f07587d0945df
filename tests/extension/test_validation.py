"""Bad input gives PosexpError with one line naming the bad value and what is allowed."""

import pytest

from posexp.errors import PosexpError
from posexp.extension import position_scale, rope_frequencies


def raises_one_line(match: str):
    """pytest.raises for PosexpError that also checks the message is a single line."""

    class _Ctx:
        def __enter__(self):
            self._cm = pytest.raises(PosexpError, match=match)
            self._info = self._cm.__enter__()
            return self._info

        def __exit__(self, *exc):
            handled = self._cm.__exit__(*exc)
            assert "\n" not in str(self._info.value)
            return handled

    return _Ctx()


def test_unknown_method_lists_allowed():
    # The registry's names, whatever methods are registered (a new one needs no edit here).
    from posexp.extension import EXTENSIONS

    allowed = ", ".join(sorted(EXTENSIONS))
    assert "pi" in allowed and "self_extend" in allowed
    with raises_one_line(rf"unknown extension 'rope2'; allowed: {allowed}$"):
        rope_frequencies("rope2", 64)


def test_factor_below_one():
    with raises_one_line(r"^factor must be a finite number >= 1, got 0\.5$"):
        rope_frequencies("pi", 64, factor=0.5)


def test_factor_not_a_number():
    with raises_one_line(r"factor must be a finite number >= 1, got 'x'"):
        rope_frequencies("pi", 64, factor="x")


@pytest.mark.parametrize("method", ["yarn", "llama3", "dynamic_ntk", "longrope"])
def test_missing_original_length(method):
    with raises_one_line(rf"extension '{method}' needs original_length"):
        rope_frequencies(method, 64, factor=2)


@pytest.mark.parametrize("head_dim", [0, -4, 63, 64.0, True])
def test_bad_head_dim(head_dim):
    with raises_one_line("head_dim must be"):
        rope_frequencies("none", head_dim)


def test_ntk_needs_head_dim_four():
    with raises_one_line(r"extension 'ntk' needs head_dim >= 4, got 2"):
        rope_frequencies("ntk", 2, factor=2)


def test_bad_base():
    with raises_one_line(r"base must be a finite number > 1, got 1\.0"):
        rope_frequencies("none", 64, base=1.0)


def test_unknown_param_names_allowed():
    with raises_one_line(
        r"unknown param 'beta_fsat' for extension 'yarn'; allowed: attention_factor, beta_fast, beta_slow"
    ):
        rope_frequencies("yarn", 64, factor=2, original_length=512, beta_fsat=16)
    with raises_one_line(r"unknown param 'beta_fast' for extension 'pi'; allowed: \(none\)"):
        rope_frequencies("pi", 64, factor=2, beta_fast=16)


@pytest.mark.parametrize("fast,slow", [(1, 32), (4, 4)])
def test_yarn_betas_must_be_ordered(fast, slow):
    with raises_one_line("beta_fast must be > beta_slow"):
        rope_frequencies("yarn", 64, factor=2, original_length=512, beta_fast=fast, beta_slow=slow)


def test_llama3_freq_factors_must_be_ordered():
    with raises_one_line("low_freq_factor must be < high_freq_factor"):
        rope_frequencies(
            "llama3", 64, factor=2, original_length=512, low_freq_factor=4, high_freq_factor=1
        )


def test_bad_seq_len():
    with raises_one_line(r"seq_len must be a positive integer, got 0"):
        rope_frequencies("dynamic_ntk", 64, factor=2, original_length=512, seq_len=0)


def test_position_scale_validates():
    with raises_one_line(r"^factor must be a finite number >= 1, got 0$"):
        position_scale("pi", 0)
