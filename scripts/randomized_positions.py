"""Diagnosis: a run trained on randomized positions, scored two ways on its test instances.

    python -m scripts.randomized_positions outputs/diag/randomized_m64_12000

`posexp eval-extrapolate` scores such a run with positions drawn as in training (sorted random
subsets of [0, pe.max_position), as Ruoss et al.'s reference code does at test time); this prints
that accuracy per test size beside the accuracy with consecutive positions 0..T-1, the protocol
posexp used before, which left the trained sizes short of 0.95 however long the run trained.
"""

from __future__ import annotations

import argparse

import torch

from posexp.commands.extrapolate.tasks import task_data
from posexp.commands.generate import run_tokenizer
from posexp.errors import PosexpError
from posexp.objectives.synthetic import score_examples
from posexp.positions.randomized import scoring_positions
from posexp.runtime.weights import load_model
from posexp.store.rundir import RunDir


def main() -> None:
    """Print accuracy per test size: consecutive positions, then drawn as in training."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a synthetic-task run trained with pe.randomized=true")
    a = p.parse_args()
    run = RunDir.open(a.run, "run")
    cfg = run.config()
    draw = scoring_positions(cfg.positions)
    if draw is None:
        raise SystemExit(f"error: {a.run!r} was not trained with pe.randomized=true")
    data, (tokenizer, _) = task_data(cfg), run_tokenizer(cfg)
    model, cpu = load_model(run, "cpu"), torch.device("cpu")
    print(
        f"{'size':>5} {'consecutive':>12} {'as trained':>11}   (M = {cfg.positions.max_position})"
    )
    for n in data.test_lengths:
        examples = data.examples("test", n, data.test_examples)
        plain = score_examples(model, examples, tokenizer, cpu).accuracy
        drawn = score_examples(model, examples, tokenizer, cpu, positions=draw).accuracy
        print(f"{n:>5} {plain:>12.2f} {drawn:>11.2f}")


if __name__ == "__main__":
    try:
        main()
    except PosexpError as e:
        raise SystemExit(f"error: {e}") from None
