import pytest
import torch

from posexp.extension import ExtensionConfig
from posexp.pe import PEContext, PositionOutOfRange, build_pe


def learned(max_len=8, **ext):
    return build_pe(
        "learned", PEContext(4, 1, 4, 8, ExtensionConfig.from_dict(ext)), max_len=max_len
    )


def test_adds_table_rows():
    pe = learned()
    x = torch.zeros(1, 3, 4)
    assert torch.equal(pe.embed(x, torch.arange(3))[0], pe.table.weight[:3])


def test_position_past_table_is_a_clear_error():
    pe = learned(max_len=8)
    with pytest.raises(PositionOutOfRange, match=r"position 9 .*max_len=8"):
        pe.prepare(10, torch.device("cpu"))


def test_pi_interpolates_between_rows():
    pe = learned(max_len=8, method="pi", factor=2.0)
    pe.prepare(16, torch.device("cpu"))
    out = pe.embed(torch.zeros(1, 16, 4), torch.arange(16))[0]
    w = pe.table.weight
    assert torch.allclose(out[4], w[2], atol=1e-6)
    assert torch.allclose(out[5], (w[2] + w[3]) / 2, atol=1e-6)
    with pytest.raises(PositionOutOfRange):
        pe.prepare(17, torch.device("cpu"))  # position 16 is past 8 rows x 2
