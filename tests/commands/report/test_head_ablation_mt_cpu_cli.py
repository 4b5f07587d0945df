"""`experiment=head_ablation_mt_cpu_lm` then `experiment=head_ablation_mt_cpu` through the CLI,
shrunk: each head count's language model is the parent of its translation jobs, and the report
names it."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.helpers import posexp

SHRINK = [
    "model.d_model=32",
    "model.n_layers=1",
    "tokenizer.vocab_size=300",
    "train.max_steps=3",
    "train.seq_len=48",
    "train.batch_size=4",
    "train.eval_interval=3",
    "train.eval_tokens=256",
    "train.log_interval=1",
    "train.checkpoint_interval=3",
    "train.warmup_steps=1",
    "hydra.launcher.n_jobs=1",  # joblib runs the jobs in this process: no worker start-ups
]


@pytest.fixture(scope="module")
def stages(tmp_path_factory, cache):
    """Stage 1 (heads 1, 2) into the preset's fixed dir, then stage 2 (heads 1, 2, seed 0)."""
    cwd = tmp_path_factory.mktemp("mt_cpu")
    posexp(cwd, cache, "train", "-m", "experiment=head_ablation_mt_cpu_lm", "heads=1,2", *SHRINK)
    sweep = cwd / "sweep"
    posexp(
        cwd,
        cache,
        "train",
        "-m",
        "experiment=head_ablation_mt_cpu",
        "heads=1,2",
        "seed=0",
        *SHRINK,
        "translate.bleu_examples=2",
        "translate.test_examples=3",
        f"hydra.sweep.dir={sweep}",
        "hydra.sweep.subdir=h${heads}",
    )
    return cwd, sweep


def test_each_head_count_translates_from_its_own_language_model(stages):
    cwd, sweep = stages
    lm = cwd / "outputs" / "pretrained" / "head_ablation_mt_cpu"
    assert sorted(p.name for p in lm.iterdir() if p.is_dir()) == ["heads=1", "heads=2"]
    lm_config = yaml.safe_load((lm / "heads=1" / ".hydra" / "config.yaml").read_text())
    assert lm_config["data"]["source"] == "wyc2kjv_text"
    for h in (1, 2):
        # The checkpoint's config is the resolved one (.hydra/config.yaml keeps ${heads}).
        meta = json.loads((sweep / f"h{h}" / "checkpoint" / "meta.json").read_text())
        assert meta["config"]["parent"] == f"outputs/pretrained/head_ablation_mt_cpu/heads={h}"
        assert meta["config"]["data"] == {"source": "wyc2kjv", "loss_on": "all"}
        assert "initialised from parent run" in (sweep / f"h{h}" / "train.log").read_text()
        results = json.loads((sweep / f"h{h}" / "results.json").read_text())
        assert results["status"] == "completed" and "final/bleu" in results


def test_the_report_names_the_pre_training_beside_the_table(stages, cache):
    cwd, sweep = stages
    posexp(cwd, cache, "report", str(sweep))
    md = (sweep / "report.md").read_text()
    assert "## Head-count ablation" in md
    assert (
        "Pre-training: every job starts from the language model of its head count, shared by "
        "its seeds: h = 1: `outputs/pretrained/head_ablation_mt_cpu/heads=1` (step 3 of "
        "data=wyc2kjv_text); h = 2: `outputs/pretrained/head_ablation_mt_cpu/heads=2` (step 3 "
        "of data=wyc2kjv_text)."
    ) in md
    assert "copy BLEU" in md and (sweep / "attention" / "h1_seed0_layer0.png").is_file()
