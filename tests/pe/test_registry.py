"""The PE registry: discovery, declared constraints, and the one extension rule for every PE."""

from __future__ import annotations

import re

import pytest

from posexp.errors import PosexpError
from posexp.extension import EXTENSIONS
from posexp.model import ModelConfig
from posexp.pe import PE_REGISTRY, accepted_extensions, check_extension, get_pe, register_pe
from posexp.pe.base import KINDS, PositionalEncoding

PES = sorted(PE_REGISTRY)


def test_every_module_of_the_package_registered_its_encoding():
    import pkgutil

    import posexp.pe

    # base: the interface; distance_bias: the form of a bias the CPU kernel reads
    modules = {i.name for i in pkgutil.iter_modules(posexp.pe.__path__)} - {"base", "distance_bias"}
    assert {PE_REGISTRY[n].__module__.rsplit(".", 1)[1] for n in PE_REGISTRY} == modules


@pytest.mark.parametrize("pe", PES)
def test_declared_kind_decides_which_extension_methods_apply(pe):
    cls = get_pe(pe)
    assert cls.kind in KINDS
    allowed = accepted_extensions(pe)
    assert allowed[0] == "none"
    for method, m in EXTENSIONS.items():
        # Independent of accepted_extensions: the rule written out per kind.
        # PoPE and FoPE turn q and k by tables of their own: logit methods only.
        own_tables = pe in ("pope", "fope")
        expected = (
            m.acts_on == "nothing"
            or (own_tables and m.acts_on == "logits")
            # Abacus's positions are places within numbers: no position scaling.
            or (
                m.acts_on == "positions"
                and cls.kind in ("embedding", "rotation")
                and pe != "abacus"
                and not own_tables
            )
            or (m.acts_on == "frequencies" and cls.kind == "rotation" and not own_tables)
            # Attention of its own (FoX, stick-breaking, PaTH) takes no method.
            or (m.acts_on == "logits" and cls.kind != "attention")
            # xPos decays by the raw distance, so it declines remapped ones.
            or (
                m.acts_on == "relative_positions"
                and cls.kind == "rotation"
                and pe != "xpos"
                and not own_tables
            )
        )
        assert (method in allowed) == expected, (pe, method)
        if expected:
            check_extension(pe, method)
        else:
            message = (
                f"extension '{method}' does not apply to pe '{pe}' ({cls.kind}); "
                f"allowed for {pe}: {', '.join(allowed)}"
            )
            with pytest.raises(PosexpError, match=f"^{re.escape(message)}$"):
                check_extension(pe, method)


def test_known_pairs():
    assert accepted_extensions("learned") == ["none", "pi", "logn", "blockwise"]
    assert accepted_extensions("alibi") == ["none", "logn", "blockwise"]
    assert "self_extend" not in accepted_extensions("xpos")
    assert set(accepted_extensions("rope")) == set(EXTENSIONS)


@pytest.mark.parametrize("pe", PES)
def test_even_head_dim_is_enforced_only_where_declared(pe):
    make = lambda: ModelConfig(vocab_size=10, d_model=12, n_heads=4, pe=pe)  # noqa: E731  head dim 3
    if get_pe(pe).needs_even_head_dim:
        with pytest.raises(
            PosexpError, match=f"pe={pe} needs an even head dim, got d_model/heads = 12/4 = 3"
        ):
            make()
    else:
        make()


def test_unknown_pe_and_bad_registrations():
    with pytest.raises(PosexpError, match=r"^unknown pe 'nope'; allowed: "):
        check_extension("nope", "none")
    with pytest.raises(ValueError, match="registered twice"):
        register_pe("rope")(type("Again", (PositionalEncoding,), {}))
    with pytest.raises(ValueError, match="kind must be one of"):
        register_pe("odd")(type("Odd", (PositionalEncoding,), {"kind": "sideways"}))
    assert "odd" not in PE_REGISTRY


def test_learned_declares_its_table_length():
    get_pe("learned").check_params({"max_len": 64}, seq_len=64)
    with pytest.raises(PosexpError, match=r"pe.max_len=32 is shorter than train.seq_len=64"):
        get_pe("learned").check_params({"max_len": 32}, seq_len=64)


def test_a_bias_encoding_that_declares_no_logit_term_still_gets_its_bias_applied():
    # The model calls bias() only for LogitTerm.POSITION_BIAS: a kind "bias" class that forgot
    # to say so would train as NoPE under its own name.
    from posexp.pe.base import LogitTerm, logit_term_of

    class Forgot(PositionalEncoding):
        kind = "bias"

    class Contradicts(PositionalEncoding):
        kind = "bias"
        logit_term = LogitTerm.OWN

    assert logit_term_of("forgot", Forgot) is LogitTerm.POSITION_BIAS
    with pytest.raises(ValueError, match="kind 'bias' adds"):
        logit_term_of("contradicts", Contradicts)
    for name, cls in PE_REGISTRY.items():  # every registered one is consistent already
        assert logit_term_of(name, cls) is cls.logit_term
