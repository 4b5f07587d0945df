"""Method specs: one syntax, canonical labels, and each method checking its own settings."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension import ExtensionConfig, rope_frequencies
from posexp.extension.attention import AttentionSpec
from posexp.extension.spec import (
    MethodSpec,
    parse_spec,
    parse_specs,
    spec_of,
    split_specs,
)


def labels(value) -> list[str]:
    return [spec.label for spec in parse_specs(value)]


def test_labels_are_canonical_whatever_the_spelling():
    # Settings in name order, defaults dropped, values as YAML scalars.
    assert labels("self_extend(window=16, group=4)") == ["self_extend(group=4,window=16)"]
    assert labels("yarn(beta_fast=32)") == ["yarn"]  # the default: the same cell as "yarn"
    assert labels("self_extend(group=null)") == ["self_extend"]
    assert labels("rerope(logn=true,leaky_k=2)") == ["rerope(leaky_k=2,logn=true)"]
    assert labels("yarn(factor=4)") == ["yarn(factor=4)"]
    assert labels("yarn()") == ["yarn"]


def test_lists_split_at_commas_outside_parentheses_in_order_without_duplicates():
    assert split_specs("none,self_extend(group=4,window=16),yarn") == [
        "none",
        "self_extend(group=4,window=16)",
        "yarn",
    ]
    assert labels(["none,yarn(beta_fast=16)", "self_extend(group=2)", "none"]) == [
        "none",
        "yarn(beta_fast=16)",
        "self_extend(group=2)",
    ]
    assert parse_specs(None) is None


def test_values_take_their_yaml_types_and_normal_form():
    spec = parse_spec("self_extend(group=4,window=16,logn=true)")
    assert spec == MethodSpec("self_extend", {"group": 4, "window": 16, "logn": True})
    assert parse_spec("yarn(beta_fast=16)").settings == {"beta_fast": 16.0}
    assert parse_spec("ntk(alpha=2,factor=4)") == MethodSpec("ntk", {"alpha": 2.0}, 4.0)
    # Every setting at its effective value, the defaults filled in.
    assert parse_spec("self_extend(group=4)").params == {"window": None, "group": 4, "logn": False}


BAD = {
    "unknown method": (
        "selfextend",
        "--method 'selfextend': unknown method 'selfextend'; allowed: ",
    ),
    "unknown setting": (
        "self_extend(grup=4)",
        "--method 'self_extend(grup=4)': self_extend has no setting 'grup'; allowed: window, "
        "group, logn, factor",
    ),
    "group zero": (
        "self_extend(group=0)",
        "--method 'self_extend(group=0)': group must be a positive integer or null, got 0",
    ),
    "negative window": (
        "self_extend(window=-1)",
        "--method 'self_extend(window=-1)': window must be a positive integer or null, got -1",
    ),
    "not a number": (
        "yarn(beta_fast=abc)",
        "--method 'yarn(beta_fast=abc)': beta_fast must be a finite number > 0, got 'abc'",
    ),
    "settings out of order": (
        "yarn(beta_fast=1)",
        "--method 'yarn(beta_fast=1)': beta_fast must be > beta_slow, got beta_fast=1, beta_slow=1",
    ),
    "unbalanced": (
        "self_extend(group=4",
        "--method 'self_extend(group=4': unbalanced parentheses; write name(key=value,...)",
    ),
    "closing only": ("yarn)", "--method 'yarn)': unbalanced parentheses"),
    "nested": ("yarn(beta_fast=(1))", "--method 'yarn(beta_fast=(1))': parentheses inside a spec"),
    "no value": ("yarn(beta_fast)", "--method 'yarn(beta_fast)': 'beta_fast' is not key=value"),
    "given twice": ("yarn(beta_fast=8,beta_fast=9)", "beta_fast given twice"),
    "trailing text": ("yarn(beta_fast=8)x", "text after the closing parenthesis"),
    "method without settings": (
        "none(factor=2)",
        "--method 'none(factor=2)': none takes no settings, got 'factor'",
    ),
    "factor where unused": (
        "rerope(factor=2)",
        "rerope has no setting 'factor'; allowed: window, leaky_k, logn",
    ),
    "factor below one": (
        "pi(factor=0.5)",
        "--method 'pi(factor=0.5)': factor must be a finite number >= 1, got 0.5",
    ),
    "baked with settings": (
        "baked(factor=2)",
        "--method 'baked(factor=2)': baked takes no settings",
    ),
    "empty item": ("none,,pi", "--method has an empty name in 'none,,pi'"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_spec_is_one_line_naming_the_spec_the_setting_and_what_is_allowed(name):
    text, message = BAD[name]
    with pytest.raises(PosexpError) as info:
        parse_specs(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_settings_that_depend_on_the_training_length_are_checked_against_it():
    spec = parse_spec("self_extend(window=40)")  # fine alone, not for L0 = 32
    with pytest.raises(PosexpError, match=r"window must be in \[1, 31\] \(below the training"):
        ExtensionConfig.for_length(spec, 128, 32)


def test_a_spec_sets_up_its_extension():
    ext, _ = ExtensionConfig.for_length(parse_spec("self_extend(group=4,window=8)"), 128, 32)
    assert (ext.factor, ext.params) == (4.0, {"window": 8, "group": 4, "logn": False})
    fixed, _ = ExtensionConfig.for_length(parse_spec("yarn(factor=2)"), 128, 32)
    assert fixed.factor == 2.0  # the spec's factor, not length / L0
    assert ExtensionConfig.for_length(parse_spec("yarn"), 128, 32, factor=3)[0].factor == 3.0


def test_a_configured_extension_has_the_spec_of_its_changed_settings():
    assert spec_of("yarn", {"beta_fast": 8}).label == "yarn(beta_fast=8)"
    assert spec_of("yarn", {"beta_fast": 32}).label == "yarn"


def test_methods_sort_in_registry_order_then_by_settings_numerically():
    specs = parse_specs("yarn(factor=16),self_extend(group=4),none,yarn,self_extend,yarn(factor=4)")
    specs.append(spec_of("yarn", {}, baked=True))
    assert [s.label for s in sorted(specs, key=lambda s: s.sort_key)] == [
        "baked:yarn",
        "none",
        "yarn",
        "yarn(factor=4)",
        "yarn(factor=16)",
        "self_extend",
        "self_extend(group=4)",
    ]
    grid = parse_specs("self_extend(group=16|2|8,window=32|4)")
    assert [s.label for s in sorted(grid, key=lambda s: s.sort_key)] == [
        f"self_extend(group={g},window={w})" for g in (2, 8, 16) for w in (4, 32)
    ]


def test_ntk_alpha_fixes_the_base_whatever_the_factor():
    # base' = base · alpha^(d/(d-2)): the lowest frequency of d = 8 scales by 1/alpha.
    d, base, alpha = 8, 10000.0, 3.0
    inv_freq, _ = rope_frequencies("ntk", d, base, factor=5.0, alpha=alpha)
    expected = (base * alpha ** (d / (d - 2))) ** (-6 / 8)
    assert inv_freq[-1].item() == pytest.approx(expected, rel=1e-6)
    default, _ = rope_frequencies("ntk", d, base, factor=alpha)  # null alpha: the factor
    assert torch.allclose(default, inv_freq)


def test_log_scaling_starts_at_its_base_length():
    from posexp.extension import get_extension

    method = get_extension("logn")
    plan = method.attention(AttentionSpec(1.0, 32), base_length=8)
    positions = torch.tensor([0, 7, 8, 63])
    # max(1, log_8(p + 1)): 1 up to p = 7, log_8(9) at 8, 2 at 63.
    assert plan.query_scale(positions).tolist() == pytest.approx([1.0, 1.0, math.log(9, 8), 2.0])
    default = method.attention(AttentionSpec(1.0, 32))
    assert default.query_scale(torch.tensor([31, 1023])).tolist() == pytest.approx([1.0, 2.0])


def test_a_list_setting_keeps_its_commas_and_its_label_parses_back():
    spec = parse_spec("longrope(long_factor=[1, 1.5,2,4],factor=4)")
    assert dict(spec.settings) == {"long_factor": [1.0, 1.5, 2.0, 4.0]} and spec.factor == 4.0
    assert spec.label == "longrope(factor=4,long_factor=[1,1.5,2,4])"
    assert parse_spec(spec.label) == spec
    listed = [s.label for s in parse_specs("none,longrope(short_factor=[1,2],long_factor=[2,2])")]
    assert listed == ["none", "longrope(long_factor=[2,2],short_factor=[1,2])"]


def test_a_bad_list_entry_is_named():
    with pytest.raises(PosexpError, match=r"long_factor\[1\] must be a finite number > 0, got -1"):
        parse_spec("longrope(long_factor=[1,-1])")


def test_values_joined_by_a_bar_are_a_grid_of_every_combination_in_order():
    grid = parse_specs("self_extend(group=2|4|8,window=16|32)")
    assert [s.label for s in grid] == [
        f"self_extend(group={g},window={w})" for g in (2, 4, 8) for w in (16, 32)
    ]
    assert [s.factor for s in parse_specs("yarn(factor=4|8|16)")] == [4.0, 8.0, 16.0]
    # a list value stays one value, its commas and all; a grid of lists is lists
    (one,) = parse_specs("longrope(long_factor=[1,1.5,2])")
    assert one.settings == {"long_factor": [1.0, 1.5, 2.0]}
    two = parse_specs("longrope(long_factor=[1,2]|[3,4])")
    assert [s.settings["long_factor"] for s in two] == [[1.0, 2.0], [3.0, 4.0]]
    # a grid beside other specs, and a duplicate of one of its specs, kept once
    assert labels("none,yarn(factor=2|4),yarn(factor=4)") == [
        "none",
        "yarn(factor=2)",
        "yarn(factor=4)",
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("yarn(factor=4|)", r"factor has an empty value in '4\|'; a grid is values joined by \|"),
        ("yarn(factor=4|4)", r"factor lists a value twice in '4\|4'"),
        ("yarn(factor=4|0.5)", r"factor must be a finite number >= 1, got 0.5"),
    ],
)
def test_a_bad_grid_is_one_line(text, message):
    with pytest.raises(PosexpError, match=message):
        parse_specs(text)


def test_where_one_method_is_set_up_a_grid_is_refused():
    with pytest.raises(PosexpError, match=r"one setting each expected here, got a grid of 2"):
        parse_spec("yarn(factor=2|4)", "extension=")


@pytest.mark.parametrize(
    "text, key, value",
    [
        ("yarn(beta_slow=0.00001)", "beta_slow", 1e-05),
        ("yarn(factor=4e0)", None, 4.0),
        ("yarn(beta_slow=1e-3)", "beta_slow", 0.001),
        ("yarn(beta_fast=1.0e+300)", "beta_fast", 1e300),
        ("self_extend(group=+4)", "group", 4),
    ],
)
def test_numbers_are_read_as_typed(text, key, value):
    spec = parse_spec(text)
    got = spec.factor if key is None else spec.settings[key]
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("yarn(beta_slow=-1e-3)", r"beta_slow must be a finite number > 0, got -1e-3$"),
        ("yarn(beta_slow=0.00000)", r"beta_slow must be a finite number > 0, got 0.00000$"),
        ("yarn(beta_fast=1e999)", r"beta_fast must be a finite number > 0, got 1e999$"),
        (
            "self_extend(group=99999999999999999999999)",
            r"group must be at most 9,007,199,254,740,992, got 99999999999999999999999$",
        ),
    ],
)
def test_a_bad_number_is_echoed_as_typed_in_one_line(text, message):
    with pytest.raises(PosexpError, match=message) as e:
        parse_spec(text)
    assert "\n" not in str(e.value)


def test_labels_are_exact_and_whole_numbers_plain():
    a, b = parse_specs("yarn(beta_fast=16.0000001),yarn(beta_fast=16.0000002)")
    assert a.label == "yarn(beta_fast=16.0000001)" and b.label == "yarn(beta_fast=16.0000002)"
    assert a != b and a.key != b.key and hash(a) != hash(b)
    assert parse_spec("yarn(factor=4.0)").label == "yarn(factor=4)"
    assert parse_spec("yarn(beta_slow=0.00001)").label == "yarn(beta_slow=1e-05)"
    # a label is a valid spec of the same object (what passkey.py hands to extension=)
    for spec in (a, b, parse_spec("yarn(beta_slow=0.00001)")):
        assert parse_spec(spec.label) == spec


def test_a_default_spelled_out_is_the_same_spec():
    assert parse_spec("yarn(beta_fast=32)") == parse_spec("yarn") == MethodSpec("yarn")
    assert parse_spec("yarn(beta_fast=32.0)").key == MethodSpec("yarn").key
    assert parse_specs("yarn,yarn(beta_fast=32)") == [MethodSpec("yarn")]
