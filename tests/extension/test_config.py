"""ExtensionConfig, the YAML group and the registry's extension point."""

import math
import sys
import textwrap
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
from posexp.extension.settings import Setting, number_rule
from posexp.pe import PEContext, build_pe
from posexp.registry import discover

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "extension"


def load(name: str) -> dict:
    return yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())


def frequencies(cfg: ExtensionConfig, head_dim: int, seq_len: int | None = None):
    """rope_frequencies for a config: the public entry point, which checks its inputs."""
    return rope_frequencies(
        cfg.method,
        head_dim,
        factor=cfg.factor,
        original_length=cfg.original_length,
        seq_len=seq_len,
        **cfg.params,
    )


def model_frequencies(cfg: ExtensionConfig, head_dim: int, seq_len: int, train_length: int = 256):
    """What the model's RoPE computes from the config (the path that checks nothing again)."""
    ctx = PEContext(2 * head_dim, 2, head_dim, train_length, cfg)
    return build_pe("rope", ctx).frequencies(seq_len)


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
    for inv_freq, af in (frequencies(cfg, 32, seq_len=256), model_frequencies(cfg, 32, 256)):
        assert torch.allclose(inv_freq, rope_frequencies("none", 32)[0], rtol=1e-6, atol=0)
        assert af == 1.0


def test_override_like_the_cli():
    # `extension=yarn extension.factor=4` arrives as the yarn YAML with factor replaced by int 4.
    data = {**load("yarn"), "factor": 4}
    cfg = ExtensionConfig.from_dict(data)
    assert cfg.factor == 4.0 and isinstance(cfg.factor, float)
    assert cfg.registered.dynamic is False
    cfg = cfg.with_original_length(512)
    assert cfg.original_length == 512
    assert cfg.with_original_length(1024).original_length == 512  # explicit value wins
    inv_freq, af = frequencies(cfg, 64)
    assert abs(af - 1.1386) < 5e-5
    model_inv_freq, model_af = model_frequencies(cfg, 64, seq_len=2048)
    assert torch.equal(model_inv_freq, inv_freq) and model_af == af
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
        frequencies(cfg, 64)


def test_config_rejects_other_methods_params():
    with pytest.raises(PosexpError, match="unknown param 'beta_fast' for extension 'llama3'"):
        ExtensionConfig.from_dict({"method": "llama3", "beta_fast": 32})


def test_config_rejects_bad_values():
    with pytest.raises(PosexpError, match="unknown extension 'yarm'"):
        ExtensionConfig(method="yarm")
    with pytest.raises(
        PosexpError, match=r"^extension.factor must be a finite number >= 1, got 0\.5$"
    ):
        ExtensionConfig(method="pi", factor=0.5)
    with pytest.raises(PosexpError, match="original_length must be a positive integer"):
        ExtensionConfig(method="pi", original_length=-1)
    # A method's own values are checked here too, once, not when frequencies are computed.
    with pytest.raises(
        PosexpError,
        match=r"^extension.beta_fast must be > beta_slow, got beta_fast=1, "
        r"beta_slow=32$",
    ):
        ExtensionConfig.from_dict({"method": "yarn", "beta_fast": 1, "beta_slow": 32})
    with pytest.raises(
        PosexpError,
        match=r"^extension.attention_factor must be a finite number > 0 "
        r"or null, got -1$",
    ):
        ExtensionConfig.from_dict({"method": "yarn", "attention_factor": -1})
    with pytest.raises(PosexpError, match="extension config must be a mapping"):
        ExtensionConfig.from_dict(["yarn"])


def test_config_accepts_omegaconf():
    omegaconf = pytest.importorskip("omegaconf")
    cfg = ExtensionConfig.from_dict(omegaconf.OmegaConf.create(load("dynamic_ntk")))
    assert cfg.method == "dynamic_ntk" and cfg.registered.dynamic


@pytest.fixture
def scratch_method(monkeypatch):
    # Registrations made by the test go into a copy of the registry, dropped afterwards.
    monkeypatch.setattr(EXTENSIONS, "_items", dict(EXTENSIONS.items()))
    return "half_base"


SHRINK = (Setting("shrink", "a number > 0: base / shrink", number_rule("> 0")),)


def test_registering_a_method_needs_nothing_else(scratch_method):
    @register_extension(scratch_method, settings=SHRINK)
    def half_base(spec: RopeSpec, *, shrink: float = 2.0) -> tuple[torch.Tensor, float]:
        """Toy method: base / shrink."""
        return spec.theta(spec.base / shrink), 1.0

    assert dict(EXTENSIONS[scratch_method].params) == {"shrink": 2.0}
    inv_freq, _ = rope_frequencies(scratch_method, 4, base=100.0, shrink=4.0)
    assert math.isclose(inv_freq[1].item(), 25.0**-0.5, rel_tol=1e-6)
    cfg = ExtensionConfig.from_dict({"method": scratch_method, "shrink": 4.0})
    assert cfg.params == {"shrink": 4.0}
    # Its settings are checked where they are named, by its own declaration.
    with pytest.raises(PosexpError, match=r"^extension.shrink must be a finite number > 0, got 0$"):
        ExtensionConfig.from_dict({"method": scratch_method, "shrink": 0})


def test_a_method_must_declare_every_setting_it_takes(scratch_method):
    with pytest.raises(ValueError, match=r"settings \[\] must declare its keyword-only params"):

        @register_extension(scratch_method)
        def undeclared(spec: RopeSpec, *, shrink: float = 2.0) -> tuple[torch.Tensor, float]:
            return spec.theta(), 1.0

    assert scratch_method not in EXTENSIONS


def test_a_method_module_is_found_by_name(scratch_method, tmp_path, monkeypatch, request):
    # A new method is one module in the package: discovery imports it, nothing else names it.
    package = tmp_path / "more_methods"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / f"{scratch_method}.py").write_text(
        textwrap.dedent(f'''
        from posexp.extension import RopeSpec, register_extension
        from posexp.extension.settings import Setting, number_rule

        @register_extension(
            "{scratch_method}",
            settings=(Setting("shrink", "a number > 0", number_rule("> 0")),),
        )
        def half_base(spec: RopeSpec, *, shrink: float = 2.0):
            return spec.theta(spec.base / shrink), 1.0
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(
        lambda: [
            sys.modules.pop(m, None) for m in ("more_methods", f"more_methods.{scratch_method}")
        ]
    )
    discover("more_methods", [str(package)])
    assert scratch_method in EXTENSIONS and dict(EXTENSIONS[scratch_method].params) == {
        "shrink": 2.0
    }
    assert ExtensionConfig(scratch_method, 2.0).to_dict()["shrink"] == 2.0


def test_a_name_registered_twice_is_refused(scratch_method):
    with pytest.raises(ValueError, match="extension 'yarn' registered twice"):
        register_extension("yarn")(lambda spec: (spec.theta(), 1.0))
    assert EXTENSIONS["yarn"].needs_original_length  # the first registration stands
