"""T5 relative position bias: buckets against transformers' T5 and worked numbers, the lookup."""

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.pe import PEContext, build_pe
from posexp.pe.t5 import relative_buckets


def test_buckets_match_transformers_t5_decoder_bucketing():
    from transformers.models.t5.modeling_t5 import T5Attention

    distance = torch.arange(-5, 3000)
    for buckets, max_distance in ((32, 128), (8, 20), (16, 500)):
        ours = relative_buckets(distance, buckets, max_distance)
        # transformers takes key - query; bidirectional=False is the decoder's causal bucketing.
        theirs = T5Attention._relative_position_bucket(
            -distance, bidirectional=False, num_buckets=buckets, max_distance=max_distance
        )
        assert torch.equal(ours, theirs)


def test_bucket_worked_numbers():
    b = relative_buckets(torch.tensor([-3, 0, 1, 15, 16, 20, 127, 128, 10_000]), 32, 128)
    # exact below 16; 20 -> 16 + floor(ln(20/16) / ln(128/16) * 16) = 16 + floor(1.717) = 17.
    assert math.floor(math.log(20 / 16) / math.log(8) * 16) == 1
    assert b.tolist() == [0, 0, 1, 15, 16, 17, 31, 31, 31]


def test_bias_is_the_table_row_of_each_bucket_per_head():
    pe = build_pe(
        "t5",
        PEContext(d_model=16, n_heads=4, head_dim=4, train_length=32),
        num_buckets=8,
        max_distance=20,
    )
    q = torch.arange(5, 9)
    k = torch.arange(0, 9)
    bias = pe.bias(q, k, torch.float32)
    assert bias.shape == (4, 4, 9)
    for h in range(4):
        for i, qi in enumerate(q.tolist()):
            for j, kj in enumerate(k.tolist()):
                bucket = int(relative_buckets(torch.tensor(qi - kj), 8, 20))
                assert bias[h, i, j] == pe.table[bucket, h]
    per_row = pe.bias(torch.stack([q, q + 1]), torch.stack([k, k + 1]), torch.float32)
    assert per_row.shape == (2, 4, 4, 9) and torch.equal(per_row[0], bias)
    assert torch.equal(per_row[1], bias)  # only distances matter


def test_one_table_shared_by_all_layers_and_trained():
    from posexp.model import GPT, ModelConfig

    model = GPT(ModelConfig(vocab_size=20, d_model=16, n_layers=3, n_heads=4, pe="t5"))
    tables = [n for n, _ in model.named_parameters() if "table" in n]
    assert tables == ["pe.table"]
    x = torch.randint(0, 20, (2, 12))
    model(x, x)["loss"].backward()
    assert model.pe.table.grad is not None and model.pe.table.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "params,message",
    [
        ({"num_buckets": 1}, "pe.num_buckets must be an integer >= 2, got 1"),
        (
            {"num_buckets": 32, "max_distance": 16},
            "pe.max_distance must be an integer > num_buckets / 2 = 16, got 16",
        ),
    ],
)
def test_bad_settings_are_one_line_errors(params, message):
    with pytest.raises(PosexpError, match=message.replace("(", r"\(")):
        build_pe("t5", PEContext(16, 4, 4, 32), **params)
