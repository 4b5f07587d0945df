"""Run labels: the settings that vary, short and in a fixed order; never paths or plumbing."""

from __future__ import annotations

from posexp.results.labels import (
    distinguishing,
    extension_text,
    is_plumbing,
    run_label,
    run_labels,
    run_settings,
    setting_key,
    varying,
)

BASE = {
    "pe.name": "rope",
    "pe.base": 10000.0,
    "extension.method": "none",
    "extension.factor": 1.0,
    "extension.original_length": 64,
    "model.name": "tiny",
    "model.n_heads": 4,
    "data.source": "kjv",
    "tokenizer.name": "byte",
    "train.max_steps": 600,
    "train.seq_len": 64,
    "train.threads": 2,
    "train.eval_interval": 100,
    "heads": 4,
    "seed": 0,
    "parent": None,
    "cache_dir": "outputs/.cache",
    "hydra.run.dir": "outputs/runs/x",
}


def run(**changes):
    return run_settings({**BASE, **changes})


def test_settings_say_what_a_run_is_and_drop_paths_and_plumbing():
    s = run(**{"extension.method": "yarn", "extension.factor": 4.0, "parent": "outputs/runs/a"})
    assert s["pe"] == "rope" and s["extension"] == "yarn x4" and s["fine-tuned"] is True
    assert s["data"] == "kjv" and s["model"] == "tiny" and s["heads"] == 4
    for gone in ("train.threads", "train.eval_interval", "cache_dir", "hydra.run.dir", "parent"):
        assert gone not in s
    assert "model.n_heads" not in s and "extension.original_length" not in s  # copies


def test_labels_name_only_what_varies_in_a_fixed_order_seed_last():
    runs = [run(**{"pe.name": pe, "seed": seed}) for seed in (1, 0) for pe in ("rope", "alibi")]
    assert run_labels(runs) == ["rope s1", "alibi s1", "rope s0", "alibi s0"]
    assert run_labels(runs, exclude=["seed"]) == ["rope", "alibi", "rope", "alibi"]  # groups


def test_the_issue_s_fine_tune_folder_reads_short():
    base = run(**{"train.max_steps": 600})
    tuned = run(
        **{"train.max_steps": 60, "extension.method": "yarn", "extension.factor": 4.0},
        parent="outputs/runs/2026-12-01_10-00-00_kjv_rope_h4",
    )
    labels = run_labels([base, tuned])
    # Its extension, length and steps follow from its being the fine-tune: named once.
    assert labels == ["rope", "fine-tuned"]
    other = run(**{"train.max_steps": 60, "extension.method": "pi", "extension.factor": 4.0})
    other["fine-tuned"] = True
    labels = run_labels([base, tuned, other])
    assert labels == ["no ext", "fine-tuned yarn x4", "fine-tuned pi x4"]
    assert varying([base, tuned]) == ["fine-tuned", "extension", "train.max_steps"]


def test_a_pe_s_own_settings_do_not_make_other_pes_differ():
    alibi = run(**{"pe.name": "alibi"})
    del alibi["pe.base"]  # ALiBi has no base
    assert varying([run(), alibi, run()]) == ["pe"]  # the RoPE runs share pe.base
    assert varying([run(), alibi, run(**{"pe.base": 5e5})]) == ["pe", "pe.base"]


def test_numbers_and_keys_take_their_short_forms():
    shapes = ((3e-3, 64, 4), (1e-3, 64, 4), (3e-3, 256, 8), (1e-3, 256, 4))
    runs = [run(**{"train.lr": lr, "train.seq_len": n, "heads": h}) for lr, n, h in shapes]
    assert run_labels(runs) == [
        "h4 L64 lr=0.003",
        "h4 L64 lr=0.001",
        "h8 L256 lr=0.003",
        "h4 L256 lr=0.001",
    ]
    # Two varying keys with one last name keep their full names.
    runs = [{"pe": "rope", "a.scale": a, "b.scale": b} for a, b in ((1, 2), (1, 4), (3, 4))]
    assert run_labels(runs) == ["a.scale=1 b.scale=2", "a.scale=1 b.scale=4", "a.scale=3 b.scale=4"]


def test_a_setting_that_is_off_leaves_the_name_of_its_pe():
    runs = [run(**{"pe.randomized": True}), run(**{"pe.randomized": False})]
    assert run_labels(runs) == ["randomized", "rope"]


def test_runs_alike_are_told_apart_and_a_lone_run_is_named_by_its_pe():
    assert run_labels([run(), run()]) == ["rope #1", "rope #2"]
    assert run_labels([run()], fallback=None) == ["rope"]
    assert run_label(run(**{"extension.method": "pi", "extension.factor": 2.0}), []) == "rope pi x2"
    assert run_label(run(), ["pe"], identity=False) == "rope"
    assert run_label(run(), ["nothing"], identity=False) == ""


def test_a_failed_job_s_overrides_compare_with_a_config_s_values():
    failed = {"pe": "alibi", "train.max_steps": "600", "heads": "3"}  # text, from overrides
    assert varying([run(), failed]) == ["pe", "heads"]


def test_override_keys_map_to_the_setting_they_change():
    assert setting_key("extension.factor") == "extension" and setting_key("+pe.name") == "pe"
    assert setting_key("parent") == "fine-tuned" and setting_key("train.lr") == "train.lr"
    assert is_plumbing("train.threads") and is_plumbing("hydra.launcher.n_jobs")
    assert is_plumbing("train.linear")  # the kernel, not a variable: runs pool as seeds
    assert not is_plumbing("extension.factor") and not is_plumbing("parent")
    assert extension_text("none", 4.0) == "none" and extension_text("ntk", 8) == "ntk x8"


def test_only_settings_that_split_runs_further_name_them():
    runs = [{"pe": p, "lr": lr, "seed": s} for p, lr in (("rope", 1), ("alibi", 2)) for s in (0, 1)]
    assert distinguishing(runs, ["pe", "lr", "seed"]) == ["pe", "seed"]  # lr follows from pe
    assert distinguishing(runs, ["lr", "pe", "seed"]) == ["lr", "seed"]


def test_a_composition_of_encodings_is_named_by_its_pattern():
    def layered(layers):
        return run(**{"pe.name": "layered", "pe.layers": layers, "pe.chunk": None})

    irope, other = layered(["rope", "rope", "rope", "none"]), layered("rope+alibi+rope+alibi")
    assert irope["pe"] == "rope*3+none" and "pe.layers" not in irope
    assert run_labels([irope, other, run()]) == ["rope*3+none", "rope+alibi", "rope"]
    assert layered(["rope", "nope"])["pe"] == "rope+nope"  # a removed PE: still its pattern
    assert layered(7)["pe"] == "7"  # not a pattern at all: the value as given
    assert setting_key("pe.layers") == "pe" and not is_plumbing("pe.layers")


def test_pe_irope_is_named_by_its_pattern_in_tensorboard():
    from posexp.runtime.tensorboard import hparam_dict
    from tests.helpers import run_config

    settings = hparam_dict(run_config("pe=irope", "model=small"))
    # its pattern, then what else makes it a design (so gemma and gpt-oss, both of pattern
    # "rope", read apart)
    assert settings["pe"].startswith("rope*3+none") and settings["pe.chunk"] == 64
    assert settings["pe"] == "rope*3+none (chunk 64, temperature 0.1)"
    gemma, gpt_oss = (
        hparam_dict(run_config(f"pe={p}", "model=small")) for p in ("gemma", "gpt_oss")
    )
    assert gemma["pe"] != gpt_oss["pe"] and gemma["pe"].startswith("rope (window 32/")


def test_a_fine_tune_is_named_by_what_it_changed_from_its_parent():
    from dataclasses import replace

    from posexp.config.sections import NamedConfig
    from posexp.extension import ExtensionConfig
    from posexp.results.labels import finetune_label
    from tests.helpers import run_config

    parent = run_config("model=tiny", "pe=rope", "train.seq_len=64", "train.max_steps=600")
    yarn = ExtensionConfig(method="yarn", factor=4.0, original_length=64)
    longer = replace(parent.train, seq_len=256, max_steps=200)
    tuned = replace(parent, extension=yarn, train=longer, parent="runs/a", train_length=64)
    assert finetune_label(tuned, parent) == "yarn(factor=4) L256 ft 200 steps"
    # DroPE: the encoding dropped on the same weights, at the parent's length
    shorter = replace(parent.train, max_steps=30)
    drope = replace(parent, pe=NamedConfig("none"), train=shorter, parent="runs/a")
    assert finetune_label(drope, parent) == "rope → pe=none (DroPE) ft 30 steps"
    # a parent trained with the extension: the extension is not a change
    tuned_parent = replace(parent, extension=yarn, train=longer)
    assert finetune_label(tuned, tuned_parent) == "ft 200 steps"
    # a fine-tune back to no extension says so; a parent no longer there: its own config only
    assert finetune_label(replace(parent, train=shorter), tuned_parent).startswith("ext none")
    assert finetune_label(tuned, None) == "yarn(factor=4) ft 200 steps"
