"""Beam search (posexp.decoding) against greedy decoding and a plain uncached reference."""

from __future__ import annotations

import math

import pytest
import torch

from posexp.errors import PosexpError
from posexp.kernels.choice import KernelChoice
from posexp.model import GPT, KVCache, ModelConfig
from posexp.model.decoding import beam_search, length_penalty

VOCAB = 12
ALPHA = 0.6


def tiny(pe: str = "rope", seed: int = 0) -> GPT:
    """A random model made peaked (large embeddings), so hypotheses differ in length and score."""
    torch.manual_seed(seed)
    # attention=sdpa: these tests compare decoding paths, not kernels. CPU FlexAttention (what
    # auto picks for a bias PE without gradients) rounds differently from the explicit bias:
    # on an AMD EPYC the beam scores of one ALiBi model differ by up to 6.6e-4 (sdpa: 1e-7);
    # tests/kernels/test_flex.py checks FlexAttention against the explicit bias itself.
    model = GPT(
        ModelConfig(
            vocab_size=VOCAB,
            d_model=32,
            n_layers=2,
            n_heads=4,
            pe=pe,
            train_length=64,
        ),
        KernelChoice(bias="sdpa"),
    ).eval()
    with torch.no_grad():
        model.tok_emb.weight.mul_(5.0)
    return model


def prompts(n: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n, length), generator=torch.Generator().manual_seed(seed))


def score_of(model: GPT, prompt: list[int], hyp: list[int], alpha: float = ALPHA) -> float:
    """sum log p(hyp) / lp(|hyp|), recomputed in one uncached forward pass (float64 sum)."""
    seq = torch.tensor([prompt + hyp])
    with torch.no_grad():
        logp = model(seq)["logits"][0].double().log_softmax(-1)
    total = sum(float(logp[len(prompt) - 1 + i, tok]) for i, tok in enumerate(hyp))
    return total / length_penalty(len(hyp), alpha)


def cut(row: list[int], eos: int | None) -> list[int]:
    """A hypothesis up to and including its first eos."""
    return row[: row.index(eos) + 1] if eos is not None and eos in row else row


def reference_beam(model, prompt, k, alpha, eos, max_new):
    """Beam search written plainly for one prompt: lists, a sort, the whole sequence every step."""
    live = [(0.0, [])]
    best = (-math.inf, None)
    for t in range(1, max_new + 1):
        cands = []
        for s, toks in live:
            with torch.no_grad():
                logp = (
                    model(torch.tensor([prompt + toks]))["logits"][0, -1].double().log_softmax(-1)
                )
            cands += [(s + float(logp[v]), toks + [v]) for v in range(VOCAB)]
        cands = sorted(cands, key=lambda c: -c[0])[:k]
        lp = length_penalty(t, alpha)
        for s, toks in cands:
            if toks[-1] == eos and s / lp > best[0]:
                best = (s / lp, toks)
        live = [c for c in cands if c[1][-1] != eos]
        if not live:
            break
        if t == max_new:
            if live[0][0] / lp > best[0]:
                best = (live[0][0] / lp, live[0][1])
            break
        bound = live[0][0] / max(length_penalty(t + 1, alpha), length_penalty(max_new, alpha))
        if best[0] >= bound:
            break
    return best


def frequent_token(model: GPT, x: torch.Tensor, n: int) -> int:
    """A token greedy decoding really emits early on, to use as eos."""
    out = model.generate(x, n)
    return int(out[:, 3].mode().values)


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned"])
def test_beam_one_is_greedy_token_for_token(pe):
    model = tiny(pe)
    x = prompts(6, 5)
    for eos in (None, frequent_token(model, x, 10)):
        greedy = model.generate(x, 10, eos_id=eos)
        beam, _ = model.beam_search(x, 10, beam_size=1, length_penalty=ALPHA, eos_id=eos)
        for g, b in zip(greedy.tolist(), beam.tolist(), strict=True):
            assert cut(b, eos) == cut(g, eos)


@pytest.mark.parametrize("k", [2, 4])
def test_beam_scores_at_least_greedy_for_every_example(k):
    model = tiny("sinusoidal", seed=3)
    x = prompts(8, 4, seed=5)
    eos = frequent_token(model, x, 12)
    greedy = model.generate(x, 12, eos_id=eos).tolist()
    beam, scores = model.beam_search(x, 12, beam_size=k, length_penalty=ALPHA, eos_id=eos)
    for i, row in enumerate(x.tolist()):
        hyp = cut(beam[i].tolist(), eos)
        # The reported score is the hypothesis' real score, and no worse than greedy's.
        assert scores[i].item() == pytest.approx(score_of(model, row, hyp), abs=1e-4)
        assert scores[i].item() >= score_of(model, row, cut(greedy[i], eos)) - 1e-5


@pytest.mark.parametrize("pe", ["rope", "alibi", "sinusoidal"])
@pytest.mark.parametrize("alpha", [0.0, 0.6, -0.5])
def test_cached_batched_beam_equals_uncached_reference(pe, alpha):
    model = tiny(pe, seed=2)
    x = prompts(5, 3, seed=7)
    eos = frequent_token(model, x, 8)
    beam, scores = model.beam_search(x, 8, beam_size=3, length_penalty=alpha, eos_id=eos)
    for i, row in enumerate(x.tolist()):
        ref_score, ref_tokens = reference_beam(model, row, 3, alpha, eos, 8)
        assert cut(beam[i].tolist(), eos) == ref_tokens
        assert scores[i].item() == pytest.approx(ref_score, abs=1e-4)


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned", "fox", "path"])
def test_prompts_of_different_lengths_in_one_batch_decode_as_each_alone(pe):
    # Rows read the rest of their prompts while shorter ones already generate: each row's
    # hypothesis and score equal the plain single-prompt reference, with per-row limits too.
    model = tiny(pe, seed=6)
    rows = [prompts(1, n, seed=20 + n)[0].tolist() for n in (2, 6, 3, 6, 9)]
    limits = [8, 5, 8, 3, 7]
    eos = frequent_token(model, prompts(4, 3, seed=11), 8)
    width = max(map(len, rows))
    x = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    lengths = [len(r) for r in rows]
    beam, scores = model.beam_search(x, limits, beam_size=3, eos_id=eos, lengths=lengths)
    greedy = model.generate(x, limits, eos_id=eos, lengths=lengths)
    for i, row in enumerate(rows):
        ref_score, ref_tokens = reference_beam(model, row, 3, ALPHA, eos, limits[i])
        assert cut(beam[i].tolist(), eos)[: limits[i]] == ref_tokens
        assert scores[i].item() == pytest.approx(ref_score, abs=1e-4)
        alone = model.generate(torch.tensor([row]), limits[i], eos_id=eos)[0].tolist()
        assert cut(greedy[i].tolist(), eos)[: limits[i]] == cut(alone, eos)


def test_rows_report_only_the_steps_they_generate():
    # Progress counts generated tokens, not the prompt tokens a row reads after the prefill.
    model = tiny("rope")
    x = torch.tensor([[1, 2, 0, 0], [1, 2, 3, 4]])
    for beam in (1, 3):
        seen: list[int] = []
        model.generate(x, 5, beam_size=beam, lengths=[2, 4], on_step=seen.append)
        assert sum(seen) == 10 and seen[:2] == [1, 1]


class Scripted:
    """A fake model: next-token log-probs chosen by a table keyed by the tokens so far."""

    def __init__(self, table: dict[tuple[int, ...], list[float]], vocab: int) -> None:
        self.table, self.vocab = table, vocab

    def step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """The history lives in the 'k' slot of the cache, so beam reordering moves it."""
        layer = cache.layers[0]
        layer["k"] = tokens if "k" not in layer else torch.cat((layer["k"], tokens), 1)
        rows = []
        for hist in layer["k"].tolist():
            probs = self.table.get(tuple(hist[1:]), [1.0 / self.vocab] * self.vocab)
            rows.append(torch.tensor(probs).log())
        return torch.stack(rows)


EOS, A, B = 0, 1, 2


def test_finished_hypothesis_kept_while_a_longer_one_can_still_win():
    # eos first is greedy's choice; "a eos" scores better once length-normalised (alpha 0.6).
    fake = Scripted({(): [0.49, 0.47, 0.04], (A,): [0.99, 0.005, 0.005]}, 3)
    x = torch.zeros(1, 1, dtype=torch.long)
    greedy, g_score = beam_search(
        fake.step, KVCache([{}]), x, 5, beam_size=1, alpha=0.6, eos_id=EOS
    )
    beam, b_score = beam_search(fake.step, KVCache([{}]), x, 5, beam_size=2, alpha=0.6, eos_id=EOS)
    assert greedy[0].tolist() == [EOS]
    assert beam[0].tolist() == [A, EOS]
    assert b_score[0] == pytest.approx(math.log(0.47 * 0.99) / length_penalty(2, 0.6), rel=1e-5)
    assert g_score[0] == pytest.approx(math.log(0.49), rel=1e-5)


def test_eos_at_step_one_and_rows_that_finish_at_different_times():
    # eos is the best first token: the hypothesis is eos alone. Then real rows that stop at
    # different steps (and leave the batch) match each row searched alone.
    fake = Scripted({(): [0.97, 0.02, 0.01]}, 3)
    x = torch.tensor([[7]])
    out, score = beam_search(fake.step, KVCache([{}]), x, 6, beam_size=4, alpha=0.6, eos_id=EOS)
    assert out.tolist() == [[EOS]] and score[0] == pytest.approx(math.log(0.97), rel=1e-5)

    model = tiny("rope", seed=4)
    x = prompts(4, 3, seed=9)
    eos = frequent_token(model, x, 8)
    batched, s_batched = model.beam_search(x, 8, beam_size=3, eos_id=eos)
    for i in range(4):
        alone, s_alone = model.beam_search(x[i : i + 1], 8, beam_size=3, eos_id=eos)
        assert cut(batched[i].tolist(), eos) == cut(alone[0].tolist(), eos)
        assert s_batched[i].item() == pytest.approx(s_alone[0].item(), abs=1e-5)


def test_ties_give_a_valid_deterministic_hypothesis():
    # Every token equally likely: every hypothesis of a length ties. With alpha 0 the shortest,
    # eos at once, is the best; the beam must find one of the optimal hypotheses.
    fake = Scripted({}, 4)
    x = torch.zeros(2, 1, dtype=torch.long)
    out, score = beam_search(fake.step, KVCache([{}]), x, 5, beam_size=4, alpha=0.0, eos_id=EOS)
    assert out.tolist() == [[EOS], [EOS]]
    assert score.tolist() == pytest.approx([math.log(0.25)] * 2)
    again, _ = beam_search(fake.step, KVCache([{}]), x, 5, beam_size=4, alpha=0.0, eos_id=EOS)
    assert torch.equal(out, again)
    # Two tokens tied for best at every step, no eos: the beam returns a full-length hypothesis
    # with the tied optimum's score.
    tied = Scripted({(): [0.0, 0.5, 0.5], (A,): [0.0, 0.5, 0.5], (B,): [0.0, 0.5, 0.5]}, 3)
    out, score = beam_search(
        tied.step, KVCache([{}]), torch.zeros(1, 1, dtype=torch.long), 2, beam_size=2, alpha=0.0
    )
    assert out.shape == (1, 2) and set(out[0].tolist()) <= {A, B}
    assert score[0] == pytest.approx(2 * math.log(0.5), rel=1e-5)


def test_bad_beam_settings_are_one_line_errors():
    model = tiny()
    x = prompts(1, 3)
    with pytest.raises(PosexpError, match="beam size"):
        model.beam_search(x, 5, beam_size=0)
    with pytest.raises(PosexpError, match="temperature"):
        model.generate(x, 5, temperature=0.7, beam_size=4)
