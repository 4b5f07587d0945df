"""eval-extrapolate's settings: one typed config, one checker, for the options and the preset."""

from __future__ import annotations

import pytest

from posexp.commands.extrapolate.plan import Settings
from posexp.config import ExtrapolateConfig
from posexp.errors import PosexpError
from posexp.extension.spec import parse_specs
from tests.helpers import run_config


def labels(specs):
    return [spec.label for spec in specs]


def test_options_and_preset_are_checked_by_one_checker_under_their_own_names():
    with pytest.raises(PosexpError, match=r"^--stride must be a positive integer, got 0$"):
        ExtrapolateConfig.from_dict({"stride": 0}, prefix="--")
    with pytest.raises(
        PosexpError, match=r"^extrapolate.stride must be a positive integer or null, got 0$"
    ):
        ExtrapolateConfig.from_dict({"stride": 0})
    with pytest.raises(
        PosexpError, match=r"^--lengths takes integers like 64,128,256, got '64,x'$"
    ):
        ExtrapolateConfig.from_dict({"lengths": "64,x"}, prefix="--")
    with pytest.raises(
        PosexpError, match=r"^extrapolate.factor must be a finite number >= 1, got 0.5$"
    ):
        ExtrapolateConfig.from_dict({"factor": 0.5})
    # Comma lists and repeated options alike, in order, without duplicates.
    knobs = ExtrapolateConfig.from_dict(
        {"lengths": "64, 128", "method": ["none,pi", "pi"]}, prefix="--"
    )
    assert knobs.lengths == [64, 128] and labels(knobs.method) == ["none", "pi"]
    assert labels(ExtrapolateConfig.from_dict({"method": "none,yarn"}).method) == ["none", "yarn"]
    # a grid is every combination, as parsed, in the order written
    grid = ExtrapolateConfig.from_dict({"method": "self_extend(group=2|4,window=8|16)"}).method
    assert [s.settings for s in grid] == [
        {"group": g, "window": w} for g in (2, 4) for w in (8, 16)
    ]
    assert ExtrapolateConfig.from_dict({"depths": [0, 0.5, 0]}).depths == [0.0, 0.5]
    with pytest.raises(
        PosexpError,
        match=r"^extrapolate.depths takes key depths in \[0, 1\] like 0,0.5,1, got 'x'$",
    ):
        ExtrapolateConfig.from_dict({"depths": [0, "x"]})


def test_options_given_replace_the_preset_and_len_goes_with_lengths():
    cfg = run_config("experiment=extrapolation")
    methods = ["none", "pi", "ntk", "yarn", "llama3"]
    preset = dict(method=parse_specs(methods), protocol=["nonoverlap"], stride=64, tokens=8192)
    assert cfg.extrapolate == ExtrapolateConfig(len=1024, **preset)
    knobs = Settings(ExtrapolateConfig(lengths=[64], stride=8)).for_run(cfg)
    assert knobs == ExtrapolateConfig(lengths=[64], **{**preset, "stride": 8})
    # Method specs in a preset: the same syntax, checked the same way, kept as canonical labels.
    cfg = run_config(
        "experiment=extrapolation", "extrapolate.method='none,self_extend(window=8, group=4)'"
    )
    assert labels(cfg.extrapolate.method) == ["none", "self_extend(group=4,window=8)"]
    assert Settings().for_run(cfg) == cfg.extrapolate


@pytest.mark.parametrize(
    "options, message",
    [
        ({"lengths": "64,,128"}, r"^--lengths has an empty item in '64,,128'; give integers"),
        (
            {"method": ""},
            r"^--method has an empty name in ''; allowed: baked, blockwise, dca, dynamic_ntk, ",
        ),
        ({"method": ["none", ""]}, r"^--method has an empty name in \['none', ''\]; allowed: "),
        ({"len": 256, "lengths": "64,128"}, r"^--len and --lengths both given; use one"),
    ],
)
def test_options_that_would_silently_mean_something_else_are_refused(options, message):
    with pytest.raises(PosexpError, match=message):
        ExtrapolateConfig.from_dict(options, prefix="--")


def test_a_presets_method_takes_a_grid_and_keeps_each_spec():
    cfg = run_config(
        "experiment=extrapolation", "extrapolate.method='none,self_extend(group=2|4,window=8|16)'"
    )
    assert labels(cfg.extrapolate.method) == [
        "none",
        *(f"self_extend(group={g},window={w})" for g in (2, 4) for w in (8, 16)),
    ]
    # the config's plain form writes each spec as the grid's member it is
    assert cfg.to_dict()["extrapolate"]["method"] == labels(cfg.extrapolate.method)
