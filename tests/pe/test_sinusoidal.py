import math

import torch

from posexp.pe import sinusoidal_table


def test_seed_worked_numbers_d4():
    # Seed 001, d_model 4: PE[0], PE[1], PE[2].
    table = sinusoidal_table(torch.arange(3), 4)
    expected = torch.tensor(
        [[0.0, 1.0, 0.0, 1.0], [0.841, 0.540, 0.010, 0.99995], [0.909, -0.416, 0.020, 0.9998]]
    )
    assert torch.allclose(table, expected, atol=5e-4)


def test_low_dimension_is_high_frequency():
    # docs/maths.md §2: dimension 0 oscillates fastest (seed 000 is right, seed 001 is not).
    table = sinusoidal_table(torch.arange(64), 16)
    sign_changes = (table[1:] * table[:-1] < 0).sum(0)
    even = sign_changes[0::2]
    assert all(even[i] >= even[i + 1] for i in range(len(even) - 1))
    assert even[0] > even[-1]


def test_closed_form_any_position():
    pos, d = 37, 8
    row = sinusoidal_table(torch.tensor([pos]), d)[0]
    for i in range(d // 2):
        angle = pos / 10000 ** (2 * i / d)
        assert math.isclose(row[2 * i].item(), math.sin(angle), abs_tol=1e-6)
        assert math.isclose(row[2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
