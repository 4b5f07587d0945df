"""ExtensionConfig, the YAML group and the registry's extension point."""

import math
from pathlib import Path

import pytest
import torch
import yaml

from posexp.errors import PosexpError
from posexp.extension import (
    EXTENSIONS,
    ExtensionConfig,
    RopeSpec,
    register_extension,
    rope_frequencies,
)

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "extension"


def load(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())


def test_one_yaml_per_method_and_keys_match_registry():
    assert {p.stem for p in CONFIG_DIR.glob("*.yaml")} == set(EXTENSIONS)
    for name, ext in EXTENSIONS.items():
        data = load(name)
        assert data["method"] == name
        assert data["factor"] == 1.0 and data["original_length"] is None
        assert set(data) - {"method", "factor", "original_length"} == set(ext.params)


@pytest.mark.parametrize("name", sorted(EXTENSIONS))
def test_yaml_defaults_equal_none_at_factor_one(name):
    cfg = ExtensionConfig.from_dict(load(name)).with_original_length(256)
    inv_freq, af = cfg.rope_frequencies(32, seq_len=256)
    assert torch.allclose(inv_freq, rope_frequencies("none", 32)[0], rtol=1e-6, atol=0)
    assert af == 1.0


def test_override_like_the_cli():
    # `extension=yarn extension.factor=4` arrives as the yarn YAML with factor replaced by int 4.
    data = {**load("yarn"), "factor": 4}
    cfg = ExtensionConfig.from_dict(data)
    assert cfg.factor == 4.0 and isinstance(cfg.factor, float)
    assert cfg.dynamic is False
    cfg = cfg.with_original_length(512)
    assert cfg.original_length == 512
    assert cfg.with_original_length(1024).original_length == 512  # explicit value wins
    inv_freq, af = cfg.rope_frequencies(64)
    assert abs(af - 1.1386) < 5e-5
    assert cfg.to_dict() == {
        "method": "yarn",
        "factor": 4.0,
        "original_length": 512,
        "beta_fast": 32,
        "beta_slow": 1,
        "attention_factor": None,
    }


def test_config_null_original_length_is_caught_at_use():
    cfg = ExtensionConfig.from_dict({**load("llama3"), "factor": 2})
    with pytest.raises(PosexpError, match="needs original_length"):
        cfg.rope_frequencies(64)


def test_config_rejects_other_methods_params():
    with pytest.raises(PosexpError, match="unknown param 'beta_fast' for extension 'llama3'"):
        ExtensionConfig.from_dict({"method": "llama3", "beta_fast": 32})


def test_config_rejects_bad_values():
    with pytest.raises(PosexpError, match="unknown extension 'yarm'"):
        ExtensionConfig(method="yarm")
    with pytest.raises(PosexpError, match=r"factor must be >= 1, got 0\.5"):
        ExtensionConfig(method="pi", factor=0.5)
    with pytest.raises(PosexpError, match="original_length must be a positive integer"):
        ExtensionConfig(method="pi", original_length=-1)
    with pytest.raises(PosexpError, match="extension config must be a mapping"):
        ExtensionConfig.from_dict(["yarn"])


def test_config_accepts_omegaconf():
    omegaconf = pytest.importorskip("omegaconf")
    cfg = ExtensionConfig.from_dict(omegaconf.OmegaConf.create(load("dynamic_ntk")))
    assert cfg.method == "dynamic_ntk" and cfg.dynamic


@pytest.fixture
def scratch_method():
    yield "half_base"
    EXTENSIONS.pop("half_base", None)


def test_registering_a_method_needs_nothing_else(scratch_method):
    @register_extension(scratch_method)
    def half_base(spec: RopeSpec, *, shrink: float = 2.0) -> tuple[torch.Tensor, float]:
        """Toy method: base / shrink."""
        return spec.theta(spec.base / shrink), 1.0

    assert dict(EXTENSIONS[scratch_method].params) == {"shrink": 2.0}
    inv_freq, _ = rope_frequencies(scratch_method, 4, base=100.0, shrink=4.0)
    assert math.isclose(inv_freq[1].item(), 25.0**-0.5, rel_tol=1e-6)
    cfg = ExtensionConfig.from_dict({"method": scratch_method, "shrink": 4.0})
    assert cfg.params == {"shrink": 4.0}
