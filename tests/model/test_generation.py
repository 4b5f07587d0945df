"""Batched KV-cache generation (posexp.generation) against full recomputation, for every PE."""

from __future__ import annotations

import pytest
import torch

from posexp.errors import PosexpError
from posexp.model import GPT, ModelConfig
from posexp.model.generation import generate_ids
from posexp.pe import PE_REGISTRY, PositionOutOfRange

PES = sorted(PE_REGISTRY)
VOCAB = 50


def tiny(pe: str, train_length: int = 32) -> GPT:
    return GPT(
        ModelConfig(
            vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, pe=pe, train_length=train_length
        )
    ).eval()


def full_recompute(model: GPT, prompt: list[int], n: int, eos: int | None = None) -> list[int]:
    """Greedy decoding with no cache: the whole sequence through the model at every step."""
    seq = torch.tensor([prompt])
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            token = int(model(seq)["logits"][0, -1].argmax())
            if token == eos:
                break
            out.append(token)
            seq = torch.cat([seq, torch.tensor([[token]])], dim=1)
    return out


def prompts_of(lengths: list[int]) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]


@pytest.mark.parametrize("pe", PES)
def test_batched_cached_generation_equals_full_recompute(pe):
    model = tiny(pe)
    prompts = prompts_of([3, 7, 7, 5, 3, 7])  # different lengths, and chunks of 2 within a length
    got = generate_ids(model, prompts, 10, batch_size=2)
    assert got == [full_recompute(model, p, 10) for p in prompts]


@pytest.mark.parametrize("pe", ["sinusoidal", "rope"])
def test_eos_ends_each_row_and_per_prompt_limits(pe):
    model = tiny(pe)
    prompts = prompts_of([4, 4, 6])
    free = [full_recompute(model, p, 12) for p in prompts]
    eos = free[0][3]  # a token row 0 really emits, so at least that row stops early
    got = generate_ids(model, prompts, [12, 5, 12], eos_id=eos)
    want = [full_recompute(model, p, n, eos) for p, n in zip(prompts, [12, 5, 12], strict=True)]
    assert got == want
    assert len(got[0]) == free[0].index(eos) and len(got[1]) <= 5


def test_greedy_is_deterministic_and_sampling_follows_the_seed():
    model = tiny("rope")
    prompts = prompts_of([5, 2, 5])
    assert generate_ids(model, prompts, 8) == generate_ids(model, prompts, 8)

    def sample(seed: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(seed)
        return generate_ids(model, prompts, 8, temperature=1.5, top_k=10, generator=g)

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)


def test_learned_table_end_is_a_clear_error():
    model = tiny("learned", train_length=8)
    # The last new token is predicted from position 7 and never fed back: 4 tokens fit.
    assert len(generate_ids(model, prompts_of([5]), 4)[0]) == 4
    with pytest.raises(
        PositionOutOfRange, match=r"position 8 is past the learned table \(pe.max_len=8\)"
    ):
        generate_ids(model, prompts_of([5]), 5)


def test_bad_arguments():
    model = tiny("none")
    with pytest.raises(PosexpError, match="empty prompt"):
        generate_ids(model, [[]], 3)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(PosexpError, match="temperature must be a finite number >= 0"):
            generate_ids(model, [[1]], 3, temperature=bad)
    with pytest.raises(PosexpError, match="beam size must be a positive integer, got 0"):
        generate_ids(model, [[1]], 3, beam_size=0)
    with pytest.raises(PosexpError, match="beam search decodes deterministically"):
        generate_ids(model, [[1]], 3, beam_size=4, temperature=0.5)
    with pytest.raises(PosexpError, match="length penalty must be a finite number"):
        generate_ids(model, [[1]], 3, beam_size=4, length_penalty=float("nan"))
    with pytest.raises(PosexpError, match="top_k must be a positive integer"):
        generate_ids(model, [[1]], 3, top_k=0)


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned"])
def test_beam_search_through_generate_ids_matches_one_prompt_at_a_time(pe):
    # Prompts of several lengths, batched and reordered: each equals its own beam search.
    model = tiny(pe)
    prompts = prompts_of([4, 6, 4, 5])
    eos = full_recompute(model, prompts[0], 12)[2]
    got = generate_ids(model, prompts, 10, eos_id=eos, beam_size=3, batch_size=2)
    for p, g in zip(prompts, got, strict=True):
        row, _ = model.beam_search(torch.tensor([p]), 10, beam_size=3, eos_id=eos)
        ids = row[0].tolist()
        assert g == (ids[: ids.index(eos)] if eos in ids else ids)
