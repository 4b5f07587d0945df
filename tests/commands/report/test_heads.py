"""The head-count view of `posexp report` on a language-model sweep: bits per byte and verdict."""

from __future__ import annotations

import csv
import json
import math
import statistics

import pytest
import yaml

from posexp.commands.report.views.heads import BPB, PPL, HeadJob, summarize, verdict
from posexp.commands.report.write import write_report

# final val loss (nats per byte) by (heads, seed): h = 1 clearly worse than h = 4.
LOSSES = {
    (1, 0): 1.40,
    (1, 1): 1.42,
    (1, 2): 1.41,
    (4, 0): 1.30,
    (4, 1): 1.31,
    (4, 2): 1.32,
    (16, 0): 1.33,
    (16, 1): 1.35,
    (16, 2): 1.31,
}


def fake_sweep(root, losses, tokenizer="byte"):
    """Job dirs as `posexp train -m heads=... seed=...` leaves them (config, overrides, results)."""
    for (h, s), loss in losses.items():
        job = root / f"heads={h},seed={s}"
        (job / ".hydra").mkdir(parents=True)
        cfg = {
            "heads": h,
            "seed": s,
            "model": {"d_model": 128, "n_layers": 4},
            "train": {"max_steps": 600, "batch_size": 16, "seq_len": 256},
            "data": {"source": "kjv"},
            "tokenizer": {"name": tokenizer},
        }
        (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"heads={h}", f"seed={s}"]))
        (job / "results.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "final/val_loss": loss,
                    "final/val_ppl": math.exp(loss),
                    "final/params": 820864,
                }
            )
        )
    return root


def test_lm_sweep_report_in_bits_per_byte_with_a_computed_verdict(tmp_path):
    sweep = fake_sweep(tmp_path / "sweep", LOSSES)
    write_report(sweep, evaluate=False)
    with open(sweep / "report_heads.csv") as f:
        reader = csv.DictReader(f)
        rows = {r["h"]: r for r in reader}
    # Only the metrics shown: no loss, BLEU or copy-baseline columns left empty for a byte LM.
    assert reader.fieldnames == [
        "h", "d_k", "d_v", "params", "ppl_mean", "ppl_std", "bpb_mean", "bpb_std", "seeds", "status"
    ]  # fmt: skip
    assert all(row[k] != "" for row in rows.values() for k in ("ppl_mean", "bpb_std", "seeds"))
    for h in (1, 4, 16):
        bits = [LOSSES[(h, s)] / math.log(2) for s in range(3)]
        assert float(rows[str(h)]["bpb_mean"]) == pytest.approx(statistics.mean(bits))
        assert float(rows[str(h)]["bpb_std"]) == pytest.approx(statistics.stdev(bits))
    md = (sweep / "report.md").read_text()
    gap = (1.41 - 1.31) / math.log(2)
    noise = 0.01 / math.log(2)  # both groups' sample std: 0.01 nats
    assert f"worse by {gap:.4f}, {gap / noise:.1f}× the larger seed std" in md
    assert "beyond seed noise: this sweep shows Table 3's effect" in md
    assert "| bits per byte |" in md and "copy BLEU" not in md
    assert (sweep / "report_heads.png").read_bytes()[:4] == b"\x89PNG"
    assert (sweep / "report_heads.svg").read_text().lstrip().startswith("<?xml")


def jobs_of(values: dict[tuple[int, int], float]) -> list[HeadJob]:
    return [
        HeadJob(
            f"h{h}s{s}", h, s, 128, "completed", {"final/val_loss": v, "final/val_ppl": math.exp(v)}
        )
        for (h, s), v in values.items()
    ]


def test_verdict_within_noise_not_worse_and_too_few_seeds():
    noisy = {(1, 0): 1.30, (1, 1): 1.40, (1, 2): 1.35, (4, 0): 1.28, (4, 1): 1.38, (4, 2): 1.33}
    text = verdict(summarize(jobs_of(noisy), [BPB, PPL]), BPB)
    assert "0.4× the larger seed std" in text and "within seed noise" in text
    # The same gap on every seed: paired by seed, it is no noise at all (each seed's data order
    # is shared across head counts).
    assert "paired by seed, h = 1 is worse on 3 of 3 seeds, by 0.0289 on average, over 100×" in text
    assert text.endswith("(beyond 2 std).")
    mixed = noisy | {(1, 1): 1.36}  # one seed where h = 1 is better
    assert "worse on 2 of 3 seeds" in verdict(summarize(jobs_of(mixed), [BPB, PPL]), BPB)
    better = {(1, s): 1.2 for s in range(3)} | {(4, s): 1.3 + s / 100 for s in range(3)}
    assert "h = 1 is not worse" in verdict(summarize(jobs_of(better), [BPB, PPL]), BPB)
    two = {k: v for k, v in LOSSES.items() if k[1] < 2}
    assert "no verdict on seed noise: 2 completed seed(s)" in verdict(
        summarize(jobs_of(two), [BPB, PPL]), BPB
    )
    assert verdict(summarize(jobs_of({(4, 0): 1.3}), [BPB]), BPB).startswith("No verdict")


def test_a_sweep_over_more_than_heads_gets_no_head_view(tmp_path):
    sweep = fake_sweep(tmp_path / "sweep", {(1, 0): 1.4, (4, 0): 1.3})
    for job in sweep.iterdir():  # the jobs also differ in pe: not a head-count ablation
        pe = "rope" if "heads=1" in job.name else "alibi"
        (job / ".hydra" / "overrides.yaml").write_text(
            yaml.safe_dump([f"heads={1 if pe == 'rope' else 4}", "seed=0", f"pe={pe}"])
        )
    write_report(sweep, evaluate=False)
    assert "Head-count ablation" not in (sweep / "report.md").read_text()


def ablation_sweep(root, losses, cache):
    """``fake_sweep`` with each job's full config (a byte-level King James model, as
    experiment=head_ablation_cpu trains): the data and tokenizer a view reads the test text of."""
    from tests.helpers import run_config

    fake_sweep(root, losses)
    for h, s in losses:
        cfg = run_config(
            "data=kjv", "tokenizer=byte", f"heads={h}", f"seed={s}", f"cache_dir={cache}"
        )
        (root / f"heads={h},seed={s}" / ".hydra" / "config.yaml").write_text(
            yaml.safe_dump(cfg.to_dict())
        )
    return root


def test_head_counts_at_the_unigram_level_get_the_learned_little_caveat(tmp_path, cache):
    # The extrapolation view's check: a model at about the unigram ppl has learned token
    # frequencies only, and "h = 1 is worse" would read as a finding about heads.
    from posexp.commands.report.jobs import find_jobs
    from posexp.commands.report.views.unigram import unigram_ppl

    probe = ablation_sweep(tmp_path / "probe", {(1, 0): 1.0}, cache)
    unigram = unigram_ppl(find_jobs(probe)[0])
    assert unigram is not None
    # h = 4 a little better than h = 1 in every seed, both at about 97% of the unigram ppl
    near = {
        (h, s): math.log(unigram * (0.98 - 0.01 * (h == 4))) + s / 1000
        for h in (1, 4)
        for s in range(3)
    }
    sweep = ablation_sweep(tmp_path / "near", near, cache)
    write_report(sweep, evaluate=False)
    md = (sweep / "report.md").read_text()
    assert "**Verdict.** h = 1 scores" in md
    assert "Caveat: at h = 1 and 4 the validation ppl (" in md
    assert (
        f"of the test text's unigram ppl ({unigram:.2f}), so those models have learned little "
        "beyond token frequencies, and the verdict says little about heads."
    ) in md
    learned = ablation_sweep(tmp_path / "learned", {k: v - 0.5 for k, v in near.items()}, cache)
    write_report(learned, evaluate=False)
    assert "Caveat" not in (learned / "report.md").read_text()
