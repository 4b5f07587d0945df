"""pe=layered: encodings composed per layer (iRoPE), checked against single-PE models and
references written out here: the temperature at worked values, chunked attention as an
explicit masked softmax, the pattern's expansion, the one-line errors, per-layer extensions."""

from __future__ import annotations

import math
import re

import pytest
import torch

from posexp.errors import PosexpError
from posexp.extension import EXTENSIONS, ExtensionConfig
from posexp.model import GPT, ModelConfig
from posexp.model.attention import AttentionCall, attend
from posexp.pe import PEContext, accepted_extensions, build_pe, get_pe
from posexp.pe.layered import parse_layers, pattern_text, query_temperature

VOCAB = 40


def model(pe: str = "layered", n_layers: int = 2, ext: ExtensionConfig | None = None, **params):
    cfg = ModelConfig(
        vocab_size=VOCAB,
        d_model=32,
        n_layers=n_layers,
        n_heads=4,
        pe=pe,
        pe_params=params,
        train_length=16,
        extension=ext or ExtensionConfig(),
    )
    return GPT(cfg).eval()


# ---- the temperature s(p) = 1 + a ln(1 + floor((p + 1) / F)) ---------------------------------


def test_temperature_at_worked_values():
    p = torch.tensor([0, 100, 8190, 8191, 32767, 131071])
    s = query_temperature(p, 0.1, 8192)
    # (p + 1) // 8192 = 0, 0, 0, 1, 4, 16: exactly 1 while p + 1 < F, then 1 + 0.1 ln(1 + n).
    want = [1.0, 1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(5), 1 + 0.1 * math.log(17)]
    assert s[:3].tolist() == [1.0, 1.0, 1.0]
    assert torch.allclose(s, torch.tensor(want), rtol=1e-6)


def test_nope_layer_queries_are_scaled_by_position_and_keys_are_not():
    m = model(layers=["none"], n_layers=1, temperature=0.5, floor_scale=3)
    layer = m.pe.layer(0)
    qk = torch.randn(2, 10, 2, 4, 8)  # the model's packing: (B, T, q/k, H, d)
    q, k = qk[:, :, 0].transpose(1, 2), qk[:, :, 1].transpose(1, 2)
    pos = torch.arange(10)
    q2, k2 = layer.rotate_qk(qk, pos)
    factor = torch.tensor([1 + 0.5 * math.log(1 + (p + 1) // 3) for p in range(10)])
    assert torch.allclose(q2, q * factor[:, None], atol=1e-6) and torch.equal(k2, k)
    # Per-row positions (a decoding step at positions 7 and 9): one factor per row.
    rows = torch.tensor([[7], [9]])
    q3, _ = layer.rotate(q[:, :, :1], k[:, :, :1], rows, rows)
    assert torch.allclose(q3[0], q[0, :, :1] * (1 + 0.5 * math.log(3)), atol=1e-6)
    assert torch.allclose(q3[1], q[1, :, :1] * (1 + 0.5 * math.log(4)), atol=1e-6)


# ---- chunked attention ------------------------------------------------------------------------


def masked_reference(q, k, v, chunk):
    """softmax(QKᵀ/√d) V over keys j <= i in query i's own chunk, written out."""
    T = q.shape[2]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    visible = (j <= i) & (i // chunk == j // chunk)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~visible, -math.inf)
    w = scores.softmax(-1)
    return w @ v, w


@pytest.mark.parametrize("chunk", [1, 4, 5, 11, 64])
def test_chunked_attention_equals_explicit_masked_attention(chunk):
    q, k, v = (torch.randn(2, 3, 11, 8) for _ in range(3))
    pos = torch.arange(11)
    none = build_pe("none", PEContext(24, 3, 8, 16))
    none.attention_chunk = chunk  # what a chunked layer of a pattern declares
    want, weights = masked_reference(q, k, v, chunk)
    got, none_w = attend(AttentionCall(q, k, v, pos, pos, none))
    assert none_w is None and torch.allclose(got, want, atol=1e-5)
    got, got_w = attend(AttentionCall(q, k, v, pos, pos, none, need_weights=True))
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(got_w, weights, atol=1e-6)


def test_a_chunked_rope_layer_is_rope_attention_within_chunks():
    m = model(layers=["rope"], n_layers=1, chunk=4)
    rope = model("rope", n_layers=1)
    rope.load_state_dict(m.state_dict())
    x = torch.randn(2, 10, 32)
    attn, pos = m.blocks[0].attn, torch.arange(10)
    q, k, v = (t.view(2, 10, 4, 8).transpose(1, 2) for t in attn.qkv(x).split(32, dim=2))
    q, k = rope.pe.rotate(q, k, pos, pos, rope.pe.prepare(10, x.device))
    y, _ = masked_reference(q, k, v, 4)
    want = attn.out(y.transpose(1, 2).reshape(2, 10, 32))
    got, _ = attn(x, m.pe.layer(0), pos, m.pe.layer(0).prepare(10, x.device))
    assert torch.allclose(got, want, atol=1e-5)
    # A chunk past the sequence changes nothing: the plain RoPE model's attention.
    wide = model(layers=["rope"], n_layers=1, chunk=10)
    wide.load_state_dict(m.state_dict())
    idx = torch.randint(0, VOCAB, (2, 10))
    assert torch.allclose(wide(idx)["logits"], rope(idx)["logits"], atol=1e-5)
    assert not torch.allclose(m(idx)["logits"], rope(idx)["logits"], atol=1e-4)


# Chunked layers keep their own KV cache, under every way of caching keys a method needs.
@pytest.mark.parametrize("method", ["none", "yarn", "dynamic_ntk", "self_extend", "logn"])
def test_kv_cache_decoding_equals_full_forward_with_the_extras(method):
    ext = ExtensionConfig(method, 2.0, 16)
    m = model(n_layers=4, ext=ext, layers="rope*3+none", chunk=4, temperature=0.5, floor_scale=3)
    idx = torch.randint(0, VOCAB, (3, 19))
    full = m(idx)["logits"]
    cache = m.new_cache()
    steps = [m(idx[:, :6], cache=cache)["logits"]]
    for t in range(6, 19):
        steps.append(m(idx[:, t : t + 1], cache=cache)["logits"])
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


def test_greedy_and_beam_decoding_with_the_extras():
    from posexp.model.generation import generate_ids

    m = model(n_layers=4, layers="rope*3+none", chunk=3, temperature=0.5, floor_scale=4)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (4, 6, 4, 5)]
    with torch.no_grad():  # greedy, each step a full forward without a cache
        for prompt, got in zip(prompts, generate_ids(m, prompts, 8, batch_size=2), strict=True):
            seq = list(prompt)
            for _ in range(8):
                seq.append(int(m(torch.tensor([seq]))["logits"][0, -1].argmax()))
            assert got == seq[len(prompt) :]
    # Beam search reorders the chunked layers' caches like any other: batched equals one by one.
    got = generate_ids(m, prompts, 8, beam_size=3, batch_size=2)
    for prompt, ids in zip(prompts, got, strict=True):
        row, _ = m.beam_search(torch.tensor([prompt]), 8, beam_size=3)
        assert ids == row[0].tolist()


def test_attention_maps_of_a_chunked_layer_stay_within_chunks():
    m = model(layers=["rope", "none"], chunk=3)
    weights = m(torch.randint(0, VOCAB, (1, 8)), need_weights=True)["attention"]
    i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
    assert torch.all(weights[0][..., i // 3 != j // 3] == 0)  # the rope layer: its chunk only
    assert torch.all(weights[1][..., (j <= i) & (i // 3 != j // 3)] > 0)  # none: every key


# ---- the pattern -------------------------------------------------------------------------------


def test_text_and_list_forms_and_the_cyclic_expansion():
    irope = ("rope", "rope", "rope", "none")
    assert parse_layers("rope*3,none") == parse_layers("rope*3+none") == irope
    assert parse_layers(["rope*2", "rope", "none"]) == parse_layers(list(irope)) == irope
    m = model(n_layers=6, layers="rope*3,none")
    assert [m.pe.layer(i).name for i in range(6)] == [
        "rope",
        "rope",
        "rope",
        "none",
        "rope",
        "rope",
    ]
    assert pattern_text(["rope", "none", "rope", "none"]) == "rope+none"  # one period
    assert pattern_text(irope) == "rope*3+none"
    assert pattern_text(["rope", "none", "rope"]) == "rope+none+rope"  # not a repeat of rope+none


def test_a_rope_none_model_is_a_rope_layer_then_a_nope_layer():
    m, rope, nope = model(layers=["rope", "none"]), model("rope"), model("none")
    rope.load_state_dict(m.state_dict())
    nope.load_state_dict(m.state_dict())
    idx = torch.randint(0, VOCAB, (2, 12))
    pos = torch.arange(12)
    x = rope.tok_emb(idx) * math.sqrt(32)
    x, _ = rope.blocks[0](x, rope.pe, pos, rope.pe.prepare(12, x.device))
    x, _ = nope.blocks[1](x, nope.pe, pos)
    want = rope.lm_head(rope.ln_f(x))
    assert torch.allclose(m(idx)["logits"], want, atol=1e-5)


def test_layers_of_one_name_share_its_parameters():
    m = model(n_layers=4, layers=["t5", "rope"])
    assert m.pe.layer(0) is m.pe.layer(2) and m.pe.layer(1) is m.pe.layer(3)
    t5 = model("t5", n_layers=4)
    assert m.num_params() == t5.num_params()  # one table, as a T5 model has
    m.pe.layer(0).table.data.fill_(0.5)
    assert torch.all(m.pe.layer(2).table == 0.5)


# ---- extension methods per layer ---------------------------------------------------------------


def test_an_extension_acts_only_in_the_layers_that_take_it():
    yarn = ExtensionConfig("yarn", 4.0, 16)
    m, plain = model(ext=yarn, layers=["rope", "none"]), model(layers=["rope", "none"])
    rope, nope = m.pe.layer(0), m.pe.layer(1)
    assert rope.ctx.extension.method == "yarn" and nope.ctx.extension.method == "none"
    cpu = torch.device("cpu")
    assert not torch.allclose(rope.prepare(32, cpu).cos, plain.pe.layer(0).prepare(32, cpu).cos)
    # A training-free method: the attention plan goes to the blocks whose layer takes it.
    ext = ExtensionConfig("self_extend", 4.0, 16)
    m = model(ext=ext, layers=["rope", "alibi"])
    assert m.blocks[0].attn.plan is not None and m.blocks[1].attn.plan is None


def test_the_composition_offers_what_some_child_takes():
    assert accepted_extensions("layered") == accepted_extensions("rope")
    cls = get_pe("layered")
    assert cls.accepted_for({"layers": ["alibi", "none"]}) == get_pe("alibi").accepted()


# ---- one-line errors ---------------------------------------------------------------------------


def check(params, seq_len=16):
    get_pe("layered").check_params(params, seq_len)


ALLOWED = "alibi, cope, "  # the start of every list of allowed children


@pytest.mark.parametrize(
    "params, message",
    [
        ({"layers": ["rope", "nope"]}, f"pe.layers: unknown pe 'nope'; allowed: {ALLOWED}"),
        (
            {"layers": "rope,learned"},
            "pe.layers: 'learned' is an embedding (it acts once, on the input, not per layer); "
            f"allowed: {ALLOWED}",
        ),
        ({"layers": ["layered"]}, f"pe.layers: 'layered' cannot be nested; allowed: {ALLOWED}"),
        ({"layers": "rope*0"}, "pe.layers: 'rope*0' is not a PE name; allowed: name or name*n"),
        ({"layers": ["rope", 3]}, "pe.layers: 3 is not a PE name; allowed: name or name*n"),
        ({"layers": []}, "pe.layers must name at least one PE, got []"),
        ({"layers": 7}, "pe.layers must be a list of PE names or text like rope*3+none, got 7"),
        (
            {"layers": ["rope", "none"], "layer_params": {"t5": {}}},
            "pe.layer_params.t5: no layer uses 't5'; allowed: rope, none",
        ),
        (
            {"layer_params": {"rope": {"bass": 2}}},
            "unknown setting pe.layer_params.rope.bass; allowed: base",
        ),
        ({"layer_params": {"rope": {"base": 0.5}}}, "pe.base must be a finite number > 1"),
        ({"chunk": 0}, "pe.chunk must be a positive integer or null, got 0"),
        ({"temperature": -1}, "pe.temperature must be a finite number >= 0, got -1"),
        (
            {"chunk": 8, "randomized": True},
            "pe.chunk needs positions shared by the batch, and pe.randomized=true draws them "
            "per row; allowed: pe.chunk=null, or pe.randomized=false",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(params, message):
    with pytest.raises(PosexpError, match=f"^{re.escape(message)}") as e:
        check(params)
    assert "\n" not in str(e.value)


def test_an_odd_head_dim_and_a_method_no_layer_takes_are_refused_at_build():
    ctx = PEContext(12, 4, 3, 16, n_layers=2)  # head dim 3
    with pytest.raises(PosexpError, match=r"^pe.layers=rope\+none: rope needs an even head dim"):
        build_pe("layered", ctx, layers=["rope", "none"])
    build_pe("layered", ctx, layers=["alibi", "none"])  # nothing to rotate: fine
    yarn = PEContext(32, 4, 8, 16, ExtensionConfig("yarn", 4.0, 16), n_layers=2)
    # ALiBi and NoPE take the methods that scale logits, and none.
    taken = [n for n, e in EXTENSIONS.items() if e.acts_on in ("nothing", "logits")]
    message = (
        "extension 'yarn' applies to no layer of pe.layers=alibi+none; allowed for this "
        f"pattern: {', '.join(taken)}"
    )
    with pytest.raises(PosexpError, match=f"^{re.escape(message)}$"):
        build_pe("layered", yarn, layers=["alibi", "none"])
    build_pe("layered", yarn, layers=["alibi", "rope"])  # the rope layer takes it


def test_the_irope_preset_is_layered_with_llama_4_s_pattern_and_extras():
    from posexp.runtime.build import model_config
    from tests.helpers import run_config

    cfg = run_config("pe=irope", "model=small")  # four layers
    assert cfg.pe.name == "layered" and cfg.pe.params["layers"] == ["rope", "rope", "rope", "none"]
    m = GPT(model_config(cfg, vocab_size=VOCAB))
    layers = [m.pe.layer(i) for i in range(4)]
    assert [pe.attention_chunk for pe in layers] == [64, 64, 64, None]  # chunked RoPE layers
    assert layers[3].a == 0.1 and layers[3].floor_scale == cfg.train.seq_len  # null: L
    with pytest.raises(PosexpError, match="^pe.layers: 'sinusoidal' is an embedding"):
        run_config("pe=layered", "pe.layers=rope+sinusoidal")


# ---- training -----------------------------------------------------------------------------------


class Stop(Exception):
    pass


def test_an_irope_run_resumed_ends_bitwise_equal_to_an_uninterrupted_one(
    tmp_path, cache, monkeypatch
):
    from safetensors.torch import load_file

    from posexp.commands import train as train_module
    from posexp.commands.train import run_training
    from tests.helpers import TINY, run_config

    # Four layers (three chunked RoPE, one tempered NoPE), chunks and steps inside 32 tokens.
    extras = ("pe=irope", "model.n_layers=4", "pe.chunk=8", "pe.floor_scale=16")
    cfg = run_config(*TINY, *extras, f"cache_dir={cache}")
    run_training(cfg, tmp_path / "full")
    save = train_module.Trainer.save

    def save_then_stop(self):
        save(self)
        if self.step == 3:
            raise Stop  # killed right after the middle checkpoint

    monkeypatch.setattr(train_module.Trainer, "save", save_then_stop)
    with pytest.raises(Stop):
        run_training(cfg, tmp_path / "cut")
    monkeypatch.undo()
    run_training(cfg.replace(resume=str(tmp_path / "cut")), tmp_path / "cut")
    full, cut = (
        load_file(str(tmp_path / d / "checkpoint" / "model.safetensors")) for d in ("full", "cut")
    )
    assert full.keys() == cut.keys() and all(torch.equal(full[n], cut[n]) for n in full)


def test_a_pattern_without_a_rotation_is_offered_only_what_its_layers_take():
    from posexp.pe import accepted_extensions

    assert accepted_extensions("layered", {"layers": ["alibi", "none"]}) == accepted_extensions(
        "alibi"
    )
    assert "yarn" in accepted_extensions("layered", {"layers": ["rope", "none"]})


def test_reports_name_a_layered_run_by_its_pattern_and_chunk():
    from posexp.pe.base import describe_pe

    irope = describe_pe("layered", params={"layers": ["rope", "rope", "rope", "none"], "chunk": 64})
    assert irope.label == "rope*3+none (chunk 64)"
    # The query temperature (and its floor scale) make another method: another column.
    pattern = ["rope", "rope", "rope", "none"]
    tempered = describe_pe("layered", params={"layers": pattern, "chunk": 64, "temperature": 0.1})
    assert tempered.label == "rope*3+none (chunk 64, temperature 0.1)"
    floored = {"layers": pattern, "temperature": 0.1, "floor_scale": 128}
    assert (
        describe_pe("layered", params=floored).label == "rope*3+none (temperature 0.1, floor 128)"
    )
    off = {"layers": pattern, "temperature": 0.0, "floor_scale": 128}  # no temperature: no floor
    assert describe_pe("layered", params=off).label == "rope*3+none"
    other = describe_pe("layered", params={"layers": "alibi+none", "chunk": None})
    assert other.label == "alibi+none" and other != irope  # two patterns, two report columns
    assert describe_pe("layered").label == "Layered"


def test_a_pattern_takes_the_causal_kernel_where_a_layer_leaves_attention_to_the_model():
    from posexp.pe import get_pe

    layered = get_pe("layered")
    assert layered.uses_causal_kernel({"layers": ["rope", "rope", "rope", "none"]})
    assert not layered.uses_causal_kernel({"layers": ["stick_breaking", "path"]})
    assert layered.uses_causal_kernel({"layers": ["stick_breaking", "alibi"]})


def test_a_pattern_longer_than_the_model_is_refused_before_it_is_spelt_out():
    # pe=irope on a 2-layer model never reached its NoPE layer, and trained without a word.
    from tests.helpers import run_config

    with pytest.raises(
        PosexpError, match=r"^pe.layers=rope\*3\+none has 4 entries and the model 2"
    ):
        run_config("pe=irope", "model=tiny")
    layered = get_pe("layered")
    layered.check_depth({"layers": "rope*3+none"}, 4)  # every entry acts: fine
    layered.check_depth({"layers": "rope+none"}, 3)  # repeated over the layers: fine
    with pytest.raises(PosexpError, match=r"entries 2-2 \(none\) would act in no layer"):
        layered.check_depth({}, 1)  # the default pattern, rope+none
    # Counted, not listed: spelt out, this pattern took a minute and gigabytes.
    with pytest.raises(PosexpError, match=r"names 100,000,000 layers"):
        parse_layers("rope*100000000")


# ---- local attention per layer: windows, sinks, the sink logit ----------------------------------


def test_windows_repeat_over_the_layers_and_null_is_full_attention():
    m = model(n_layers=6, layers=["rope"], windows=[8, 8, 8, 8, 8, None], sinks=2)
    assert [b.attn.window for b in m.blocks] == [8, 8, 8, 8, 8, None]
    assert all(b.attn.sinks == 2 and b.attn.sink_logit is None for b in m.blocks)
    m = model(n_layers=4, layers=["rope"], windows=[4, None], sink_logit=True)
    assert [b.attn.window for b in m.blocks] == [4, None, 4, None]
    assert all(b.attn.sink_logit.shape == (4,) for b in m.blocks)


def test_a_windowed_layer_attends_as_the_window_reference():
    # A pattern [rope] windowed in layer 0 only gives the logits of a model whose attention
    # option sets that window, when layer 1 is given the same (full) attention.
    idx = torch.randint(0, VOCAB, (2, 24))
    torch.manual_seed(0)
    layered = model(layers=["rope"], windows=[5, None])
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, pe="rope", train_length=16, window=5
    )
    windowed = GPT(cfg).eval()
    windowed.blocks[1].attn.window = None
    layered.load_state_dict(windowed.state_dict(), strict=False)
    assert torch.allclose(layered(idx)["logits"], windowed(idx)["logits"], atol=1e-6)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (dict(windows=[0, None]), "pe.windows must be a positive integer"),
        (dict(windows="64"), "pe.windows must be a list"),
        (dict(windows=[4], sinks=-1), "pe.sinks"),
    ],
)
def test_bad_windows_are_one_line(params, message):
    with pytest.raises(PosexpError, match=message):
        model(**params)


@pytest.mark.parametrize(
    ("preset", "windows", "layers"),
    [
        ("gpt_oss", [32, None], ["rope"]),
        ("gemma", [32, 32, 32, 32, 32, None], ["rope"]),
        ("swan_gpt", [None, 128, 128, 128], ["none", "rope", "rope", "rope"]),
        ("rnope_swa", [128, 128, 128, None], ["rope", "rope", "rope", "none"]),
    ],
)
def test_the_hybrid_presets_are_layered_windows(preset, windows, layers):
    from posexp.runtime.build import model_config
    from tests.helpers import run_config

    cfg = run_config(f"pe={preset}", "model.n_layers=6")
    assert cfg.pe.name == "layered"
    assert cfg.pe.params["windows"] == windows and cfg.pe.params["layers"] == layers
    assert cfg.pe.params["sink_logit"] == (preset == "gpt_oss")
    m = GPT(model_config(cfg, vocab_size=VOCAB))
    assert [b.attn.window for b in m.blocks] == [windows[i % len(windows)] for i in range(6)]


def test_the_gated_and_ssmax_presets_set_every_layers_attention():
    from posexp.runtime.build import model_config
    from tests.helpers import run_config

    gated = GPT(model_config(run_config("pe=gated_rope"), vocab_size=VOCAB))
    assert all(b.attn.gate is not None and b.attn.gate.kind == "elementwise" for b in gated.blocks)
    ss = GPT(model_config(run_config("pe=ssmax_rope"), vocab_size=VOCAB))
    assert all(torch.allclose(b.attn.ssmax.s, torch.full((4,), 0.43)) for b in ss.blocks)
    assert get_pe("layered").label_for({"layers": ["rope"], "gate": "elementwise"}) == (
        "rope (elementwise gate)"
    )
    # The pattern's option wins over the model's, the model's holds elsewhere.
    m = model(layers=["rope"], ssmax=0.5)
    assert m.blocks[0].attn.ssmax.s[0].item() == 0.5 and m.blocks[0].attn.gate is None
