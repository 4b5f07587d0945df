"""Document masking: a row of several documents scores each as if it stood alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posexp.data.tokens import window_documents
from posexp.kernels.choice import KernelChoice
from posexp.model import GPT, ModelConfig, doc_mask
from posexp.model.attention import AttentionCall, attend_all
from posexp.pe import PEContext, build_pe


def tiny(pe: str) -> GPT:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, pe=pe, train_length=64)
    return GPT(cfg, KernelChoice(bias="sdpa")).eval()


@pytest.mark.parametrize("pe", ["rope", "alibi", "learned", "none"])
def test_a_doc_masked_row_scores_its_documents_as_if_alone(pe):
    model = tiny(pe)
    lengths = [7, 12, 5]
    docs = [
        torch.randint(0, 50, (1, n), generator=torch.Generator().manual_seed(n)) for n in lengths
    ]
    row = torch.cat(docs, dim=1)
    starts = np.cumsum([0, *lengths[:-1]])
    ids, positions = window_documents(starts, np.array([0]), row.shape[1])
    with torch.no_grad(), doc_mask.documents(ids):
        masked = model(row, positions=positions)["logits"]
        alone = torch.cat([model(d)["logits"] for d in docs], dim=1)
    torch.testing.assert_close(masked, alone, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # without the mask the later documents see the earlier ones
        plain = model(row, positions=positions)["logits"]
    assert not torch.allclose(plain[:, lengths[0] :], alone[:, lengths[0] :], atol=1e-3)


def test_window_documents_ids_and_positions_restart_at_each_document():
    starts = np.array([0, 4, 9])
    ids, pos = window_documents(starts, np.array([2, 0]), 8)
    assert ids.tolist() == [[0, 0, 1, 1, 1, 1, 1, 2], [0, 0, 0, 0, 1, 1, 1, 1]]
    assert pos.tolist() == [[0, 1, 0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 0, 1, 2, 3]]


def test_the_mask_is_the_same_for_sdpa_the_matmul_kernel_and_flex_mask_mod():
    ids = torch.tensor([[0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 1, 1]])
    mask = doc_mask.block_causal(ids)
    want = torch.zeros(2, 1, 6, 6, dtype=torch.bool)  # worked out by hand: j <= i, same doc
    for b in range(2):
        for i in range(6):
            for j in range(i + 1):
                want[b, 0, i, j] = bool(ids[b, i] == ids[b, j])
    assert torch.equal(mask, want)
    mod = doc_mask.flex_mask_mod(ids)
    b, q, k = torch.meshgrid(torch.arange(2), torch.arange(6), torch.arange(6), indexing="ij")
    assert torch.equal(mod(b, torch.zeros_like(b), q, k), want[:, 0])
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 6, 8, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    pe = build_pe("none", PEContext(16, 2, 8, 64))
    pos = torch.arange(6)
    with doc_mask.documents(ids):
        sdpa, _ = attend_all(AttentionCall(q, k, v, pos, pos, pe, kernels=KernelChoice()))
        matmul, _ = attend_all(
            AttentionCall(q, k, v, pos, pos, pe, kernels=KernelChoice(causal="matmul"))
        )
    torch.testing.assert_close(matmul.float(), sdpa.float(), atol=2e-2, rtol=2e-2)
    w = (q.float() @ k.float().transpose(-2, -1) / 8**0.5).masked_fill(~want, float("-inf"))
    torch.testing.assert_close(sdpa.float(), w.softmax(-1) @ v.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (["data=reverse"], "data=synthetic is not a text corpus"),
        (["train.pose.enabled=true", "train.pose.target_length=1024"], "train.pose draws"),
        (["pe.randomized=true", "pe.max_position=4096"], "pe.randomized draws"),
        (["pe=cope"], "pe=cope computes its attention its own way"),
        (["pe=irope"], "pe=layered computes its attention its own way"),
    ],
)
def test_doc_mask_where_it_cannot_apply_is_refused_in_one_line(overrides, why):
    from posexp.errors import PosexpError
    from tests.helpers import run_config

    with pytest.raises(PosexpError, match=f"^data.doc_mask=true does not apply here: {why}"):
        run_config(*overrides, "++data.doc_mask=true")
    assert run_config("+data.doc_mask=true").data.params["doc_mask"] is True  # kjv: text


def test_the_lm_objective_hands_the_trainer_its_windows_documents():
    from posexp.data.tokens import LMBatches

    tokens = np.arange(100, dtype=np.uint16)
    starts = np.array([0, 10, 35, 60])
    batches = LMBatches(tokens, 3, 16, seed=0)
    ids, pos = window_documents(starts, batches.window_starts(5), 16)
    x, _ = batches.batch(5)
    at = x.numpy().astype(np.int64)  # the tokens are their own offsets here
    assert np.array_equal(ids.numpy(), np.searchsorted(starts, at, side="right") - 1)
    assert (pos.numpy()[:, 0] == 0).all() and (
        np.diff(pos.numpy(), axis=1)[ids.numpy()[:, 1:] == ids.numpy()[:, :-1]] == 1
    ).all()
