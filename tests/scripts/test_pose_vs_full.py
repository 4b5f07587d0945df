"""scripts/pose_vs_full.py's step memory: one training step of the run's model, in a fresh
process, needs more memory on longer rows (what PoSE's short windows save)."""

from __future__ import annotations

from posexp.model import GPT, ModelConfig
from posexp.store.checkpoint import save_checkpoint
from tests.helpers import load_script, run_config


def test_a_step_on_rows_eight_times_longer_needs_several_times_the_memory(tmp_path):
    cfg = ModelConfig(vocab_size=260, d_model=128, n_layers=2, n_heads=4, train_length=1024)
    config = run_config("train.seq_len=1024").to_dict()
    save_checkpoint(tmp_path, GPT(cfg), {"step": 1, "model": cfg.to_dict(), "config": config})
    script = load_script("pose_vs_full")
    short = script.step_memory(tmp_path, 128, 16, threads=1)
    long = script.step_memory(tmp_path, 1024, 16, threads=1)
    # Activations grow linearly with the row (plus the scores' L^2 inside SDPA's kernel): at
    # 16 x 1024 x 128 fp32 each saved tensor alone is 8 MiB.
    assert long > 4 * max(short, 1.0) and long > 40
