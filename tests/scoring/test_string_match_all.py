"""string_match_all: RULER's per-instance score on greedy answers, against hand-worked cases."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from posexp.data.tokenizers import ByteTokenizer
from posexp.errors import PosexpError
from posexp.scoring import Scoring, Work
from posexp.scoring.string_match_all import Instance, cut, match_all, score


def test_match_all_is_the_share_of_items_found_in_any_order_and_case():
    assert match_all("4821 1234", ["1234", "4821"]) == 1.0
    assert match_all("4821 9999", ["1234", "4821"]) == 0.5
    assert match_all("XyZ abc", ["xyz", "ABC", "def"]) == pytest.approx(2 / 3)
    assert match_all("123", ["1234"]) == 0.0  # a prefix is not the item
    assert match_all("anything", []) == 0.0


class Scripted(torch.nn.Module):
    """A model whose greedy continuation of prompt i is ``outputs[i]`` (token ids), so the
    scorer's decoding, eos cut and counting are checked apart from any learning."""

    def __init__(self, outputs: list[list[int]], vocab: int = 260) -> None:
        super().__init__()
        self.outputs, self.calls, self.vocab = outputs, [], vocab

    def forward(self, idx: torch.Tensor, **kwargs) -> dict[str, torch.Tensor]:
        """Uniform next-token logits: every answer token's loss is ln(vocab)."""
        return {"logits": torch.zeros(*idx.shape, self.vocab)}

    def generate(self, prompts: torch.Tensor, max_new_tokens: int, eos_id: int) -> torch.Tensor:
        self.calls.append((tuple(prompts.shape), max_new_tokens, eos_id))
        rows = self.outputs[: len(prompts)]
        self.outputs = self.outputs[len(prompts) :]
        return torch.tensor([(r + [eos_id] * max_new_tokens)[:max_new_tokens] for r in rows])


def test_score_decodes_up_to_eos_and_averages_over_instances():
    tok = ByteTokenizer()
    data = [
        Instance("What? A:", ("1234", "5678"), 9, "1234 5678"),  # both found
        Instance("What? B:", ("1234", "5678"), 9, "1234 5678"),  # one found
        Instance("What? C:", ("42",), 9, "42"),  # found only after eos: not counted
    ]
    outputs = [
        tok.encode("5678 1234"),
        tok.encode("1234 0000"),
        [*tok.encode("4"), tok.eos_id, *tok.encode("42")],
    ]
    model = Scripted(outputs, tok.vocab_size)
    seen = []
    scoring = Scoring(torch.device("cpu"), batch_tokens=1 << 16, tokenizer=tok, advance=seen.append)
    out = score(model, Work(0, data), scoring)
    assert out["score"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert out["accuracy"] == pytest.approx(1 / 3)
    assert out["examples"] == 3
    # the teacher-forced answer loss of uniform logits: ln(vocab) per token, ppl = vocab
    assert out["loss"] == pytest.approx(math.log(tok.vocab_size))
    assert out["ppl"] == pytest.approx(tok.vocab_size)
    # one batch of three equal-length prompts (prompt + sep), the longest answer + eos
    assert model.calls == [((3, len("What? A:") + 1), 10, tok.eos_id)]
    assert sum(seen) == out["tokens"] == 3 * (len("What? A:") + 1 + 10)


def test_prompts_of_different_lengths_are_decoded_in_separate_batches():
    tok = ByteTokenizer()
    data = [
        Instance("ab", ("x",), 1, "x"),
        Instance("abc", ("y",), 1, "y"),
        Instance("ab", ("z",), 1, "z"),
    ]
    model = Scripted([tok.encode("x"), tok.encode("q"), tok.encode("y")])
    scoring = Scoring(torch.device("cpu"), batch_tokens=1 << 16, tokenizer=tok)
    out = score(model, Work(0, data), scoring)
    assert [c[0] for c in model.calls] == [(2, 3), (1, 4)]
    # rows "ab"(x) and "ab"(z) got "x" and "q"; "abc"(y) got "y"
    assert out["score"] == pytest.approx(2 / 3)


def test_randomized_position_runs_are_refused_in_one_line():
    tok = ByteTokenizer()
    scoring = Scoring(torch.device("cpu"), 1024, tokenizer=tok, positions=lambda *a: None)
    with pytest.raises(PosexpError, match=r"^string_match_all decodes .*pe.randomized"):
        score(Scripted([]), Work(0, [Instance("a", ("b",), 1)]), scoring)


def test_a_cells_work_size_is_the_tokens_scoring_then_reads():
    # The progress bar's total is the cells' work sizes; a cell read more than its size, so the
    # bar ended past its total (4,209/4,191 tokens on a RULER run).
    tok = ByteTokenizer()
    prompts = [("needle ab", "17"), ("needle abc", "4"), ("needle ab", "9")]
    task = SimpleNamespace(answer_length=lambda n: 3, items=lambda a: [a])
    source = SimpleNamespace(task=task, examples=lambda *args: prompts)
    cell = SimpleNamespace(task=None, length=10, sample_size=3, depth=None)
    work = cut(cell, source)
    seen = []
    scoring = Scoring(torch.device("cpu"), batch_tokens=16, tokenizer=tok, advance=seen.append)
    out = score(Scripted([tok.encode(a) for _, a in prompts]), work, scoring)
    assert sum(seen) == out["tokens"] == work.size
