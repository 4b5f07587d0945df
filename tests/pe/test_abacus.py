import pytest
import torch

from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model.decoding import reorder_cache
from posexp.pe import PEContext, PositionOutOfRange, build_pe
from posexp.pe.abacus import digit_places
from tests.helpers import run_config

SEP = 259  # the byte tokenizer's <sep>


def tokens(text: str, sep_at: int | None = None) -> torch.Tensor:
    ids = list(text.encode())
    if sep_at is not None:
        ids.insert(sep_at, SEP)
    return torch.tensor([ids])


def abacus(max_digits=16):
    return build_pe("abacus", PEContext(4, 1, 4, 8), max_digits=max_digits)


def test_places_restart_at_every_number_worked_by_hand():
    # 47 + 85 written least significant digit first: "74+58", answer 132 -> "231".
    assert digit_places(tokens("74+58231", sep_at=5)).tolist() == [[1, 2, 0, 1, 2, 0, 1, 2, 3]]
    assert digit_places(tokens("a1b22c333")).tolist() == [[0, 1, 0, 1, 2, 0, 1, 2, 3]]


def test_a_carried_run_continues_the_number_decoding_left_off():
    # "12" was decoded before: the next digits are the 3rd and 4th of that number.
    assert digit_places(tokens("34+5"), torch.tensor([2])).tolist() == [[3, 4, 0, 1]]
    assert digit_places(tokens("+5"), torch.tensor([2])).tolist() == [[0, 1]]


def test_evaluation_adds_row_k_to_the_kth_digit_and_nothing_elsewhere():
    pe = abacus().eval()
    x = torch.randn(1, 4, 4)
    out = pe.embed_tokens(x, tokens("12+3"), torch.arange(4))
    rows = pe.table.weight
    assert torch.equal(out[0, 0], x[0, 0] + rows[1]) and torch.equal(out[0, 1], x[0, 1] + rows[2])
    assert torch.equal(out[0, 2], x[0, 2])  # '+': row 0, kept at zero
    assert torch.equal(out[0, 3], x[0, 3] + rows[1])


def test_training_shifts_every_digit_of_a_row_by_one_offset_within_the_table():
    pe = abacus(max_digits=6).train()
    with torch.no_grad():  # row r = r in every dimension, so the added row names its place
        pe.table.weight.copy_(torch.arange(7.0)[:, None].expand(7, 4))
    batch = tokens("123+45").expand(400, -1)
    places = pe.embed_tokens(torch.zeros(400, 6, 4), batch, torch.arange(6))[..., 0]
    offsets = places[:, :1] - 1
    digit = torch.tensor([[1.0, 1, 1, 0, 1, 1]])
    assert torch.equal(places, torch.tensor([[1.0, 2, 3, 0, 1, 2]]) + offsets * digit)
    # offsets 0..3 keep the 3-digit number inside rows 1..6; every one of them is drawn
    assert set(offsets.flatten().long().tolist()) == {0, 1, 2, 3}


def test_a_number_past_the_table_is_a_clear_error():
    with pytest.raises(PositionOutOfRange, match=r"number of more than 4 digits .*pe.max_digits=4"):
        abacus(max_digits=4).eval().embed_tokens(torch.zeros(1, 5, 4), tokens("12345"), None)


def test_in_the_model_non_digits_still_add_nothing():
    # The model's weight init must not give row 0 (untrainable: padding_idx) a random value.
    model = GPT(ModelConfig(vocab_size=260, d_model=32, n_layers=1, n_heads=4, pe="abacus"))
    assert torch.count_nonzero(model.pe.table.weight[0]) == 0
    assert torch.count_nonzero(model.pe.table.weight[1]) == 32
    x = torch.randn(1, 3, 32)
    out = model.pe.eval().embed_tokens(x, tokens("+a="), None)
    assert torch.equal(out, x)


def test_kv_cache_and_beam_reordering_keep_the_digit_runs():
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=260, d_model=32, n_layers=2, n_heads=4, pe="abacus")).eval()
    idx = torch.cat([tokens("123+4567"), tokens("9+876543")])
    full = model(idx)["logits"]
    cache = model.new_cache()
    steps = [model(idx[:, :3], cache=cache)["logits"]]  # stops inside the first number
    for t in range(3, idx.shape[1]):
        steps.append(model(idx[:, t : t + 1], cache=cache)["logits"])
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    # a beam step that swaps the rows swaps what each row carries too
    reorder_cache(cache, torch.tensor([1, 0]))
    assert cache.memo["abacus_run"].tolist() == [6, 4]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data=copy"], "got data.task=copy; allowed: data=addition$"),
        (["data=kjv"], "got data=kjv; allowed: data=addition$"),
    ],
)
def test_refused_outside_tasks_with_numbers_in_one_line(overrides, message):
    with pytest.raises(PosexpError, match=message) as e:
        run_config("pe=abacus", *overrides)
    assert "\n" not in str(e.value) and "pe=abacus reads digit tokens" in str(e.value)


def test_accepted_on_addition_and_takes_no_position_scaling():
    assert run_config("pe=abacus", "data=addition").pe.params["max_digits"] == 128
    with pytest.raises(PosexpError, match="extension 'pi' does not apply to pe 'abacus'"):
        run_config("pe=abacus", "data=addition", "extension=pi")
