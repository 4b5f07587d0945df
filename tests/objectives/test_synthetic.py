"""The synthetic objective: loss mask, exact-match accuracy, and its equality with greedy decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posexp.data import ByteTokenizer
from posexp.data.synthetic import make_data
from posexp.model import GPT, ModelConfig
from posexp.objectives.synthetic import exact_match, right_tokens, score_examples

TOK = ByteTokenizer()


class Oracle(torch.nn.Module):
    """A 'model' whose argmax is the given next token at every position (optionally one wrong)."""

    def __init__(self, answers: dict[str, str], wrong_digit: bool = False) -> None:
        super().__init__()
        self.answers, self.wrong_digit = answers, wrong_digit

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = torch.full((*x.shape, TOK.vocab_size), -10.0)
        for r, row in enumerate(x.tolist()):
            sep = row.index(TOK.sep_id)
            prompt = bytes(row[:sep]).decode()
            answer = [*TOK.encode(self.answers[prompt]), TOK.eos_id]
            if self.wrong_digit:
                answer[0] = TOK.encode("x")[0]
            for i, t in enumerate(answer):
                logits[r, sep + i, t] = 10.0
        return {"logits": logits}


def test_a_perfect_hypothesis_scores_one_and_a_wrong_digit_zero():
    data = make_data("addition", train_lengths=[1, 3], test_lengths=[6])
    examples = data.examples("test", 6, 12)
    answers = dict(examples)
    perfect = score_examples(Oracle(answers), examples, TOK, torch.device("cpu"), batch_tokens=64)
    wrong = score_examples(Oracle(answers, wrong_digit=True), examples, TOK, torch.device("cpu"))
    assert perfect.accuracy == 1.0 and perfect.rows == 12 and perfect.loss < 1e-3
    assert wrong.accuracy == 0.0 and wrong.loss > 1.0


def test_per_token_accuracy_counts_the_right_answer_tokens_without_eos():
    # One wrong token per answer: exact match 0, per-token (len - 1) / len summed over answers.
    data = make_data("addition", train_lengths=[1, 3], test_lengths=[6])
    examples = data.examples("test", 6, 12)
    answers = dict(examples)
    wrong = score_examples(Oracle(answers, wrong_digit=True), examples, TOK, torch.device("cpu"))
    lengths = [len(TOK.encode(a)) for _, a in examples]
    assert wrong.answer_tokens == sum(lengths)
    assert wrong.token_accuracy == pytest.approx(sum(n - 1 for n in lengths) / sum(lengths))
    perfect = score_examples(Oracle(answers), examples, TOK, torch.device("cpu"))
    assert perfect.token_accuracy == 1.0 and wrong.accuracy == 0.0


def test_right_tokens_leaves_out_eos_and_unscored_positions():
    eos = TOK.eos_id
    targets = torch.tensor([[-100, 5, 6, eos], [-100, 5, -100, -100]])
    logits = F.one_hot(torch.tensor([[5, 5, 0, 1], [0, 5, 5, 5]]), TOK.vocab_size).float()
    assert right_tokens(logits, targets, eos) == (2, 3)


def test_exact_match_needs_every_scored_position():
    targets = torch.tensor([[-100, 5, 6, -100], [-100, 5, 6, 7], [-100, -100, -100, -100]])
    logits = F.one_hot(torch.tensor([[0, 5, 6, 0], [0, 5, 6, 8], [0, 0, 0, 0]]), 10).float()
    assert exact_match(logits, targets).tolist() == [True, False, False]


def test_training_rows_carry_loss_on_the_answer_and_eos_only():
    from posexp.objectives.synthetic import SyntheticTask
    from tests.helpers import run_config

    cfg = run_config("data=reverse", "train.batch_size=8")

    class Data:
        corpus = type("C", (), {"task": make_data(**cfg.data.params)})()
        tokenizer = TOK

    objective = SyntheticTask(cfg, Data(), torch.device("cpu"), None)
    x, y = objective.batch(3)
    assert x.shape == (8, objective.row_tokens) == (8, 41)
    for row, targets in zip(x.tolist(), y.tolist(), strict=True):
        sep = row.index(TOK.sep_id)
        prompt = bytes(row[:sep]).decode()
        scored = [t for t in targets if t != -100]
        assert scored == [*TOK.encode(prompt[::-1]), TOK.eos_id]
        assert all(t == -100 for t in targets[:sep])  # no loss on the prompt
    assert torch.equal(objective.batch(3)[0], x) and not torch.equal(objective.batch(4)[0], x)


def test_teacher_forced_exact_match_equals_greedy_decoding():
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=TOK.vocab_size, d_model=32, n_layers=2, n_heads=2)).eval()
    prompts = torch.randint(97, 107, (6, 9))
    prompts[:, -1] = TOK.sep_id
    greedy = model.generate(prompts, 5)
    for flip in (None, 2):
        answer = greedy.clone()
        if flip is not None:
            answer[::2, flip] = (answer[::2, flip] + 1) % TOK.vocab_size  # every other row wrong
        x = torch.cat([prompts, answer[:, :-1]], 1)
        y = torch.full_like(x, -100)
        y[:, prompts.shape[1] - 1 :] = answer
        got = exact_match(model(x)["logits"], y)
        assert got.tolist() == [flip is None or r % 2 == 1 for r in range(6)]


def test_generate_answers_a_task_prompt():
    from posexp.commands.generate import prompt_ids

    assert prompt_ids(TOK, "ab", "synthetic") == [97, 98, TOK.sep_id]  # the model answers after sep
    assert prompt_ids(TOK, "ab", "lm") == [97, 98]
