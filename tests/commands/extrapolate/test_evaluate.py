"""`posexp eval-extrapolate` end to end on tiny trained runs, plus the window protocols."""

from __future__ import annotations

import csv
import itertools
import json
import math
import sys

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posexp.extension import EXTENSIONS
from posexp.extension.spec import parse_specs
from posexp.model import GPT, ModelConfig
from posexp.pe import accepted_extensions
from posexp.scoring.text import score_windows
from posexp.scoring.windows import nonoverlap_windows, sliding_windows
from posexp.store.rundir import RunDir
from tests.helpers import TINY, posexp, run_config, run_dirs

# Every method RoPE takes, as the registry lists them: a new method is evaluated here too.
METHODS = accepted_extensions("rope")
# Measured (1 thread, seed 0): a tiny rope model trained like this (400 steps of 32 x 32 bytes,
# ~20 s) has test ppl ~6.4 at its training length and ~16 at 4x without extension (ratio ~2.5;
# ~1.5 with 4 heads). 150 steps are not enough (ratio ~1.0: the model barely uses context yet).
ROPE = [
    "pe=rope",
    "model=tiny",
    "heads=8",
    "train.seq_len=32",
    "train.batch_size=32",
    "train.max_steps=400",
    "train.lr=6e-3",
    "train.warmup_steps=20",
    "train.eval_interval=400",
    "train.eval_tokens=2048",
    "train.checkpoint_interval=400",
    "train.log_interval=50",
    "train.precision=fp32",  # the tolerances below are fp32's; auto takes bf16 on some CPUs
    "device=cpu",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache):
    """A trained tiny rope run and a barely trained learned run (in bf16), both at length 32."""
    cwd = tmp_path_factory.mktemp("extrapolate")
    posexp(cwd, cache, "train", *ROPE)
    posexp(cwd, cache, "train", "pe=learned", *TINY, "train.precision=bf16")
    rope, learned = run_dirs(cwd)
    return cwd, rope, learned


def records(run):
    return json.loads((run / "eval" / "extrapolate.json").read_text())


def test_rope_every_method_length_protocol(runs, cache):
    cwd, rope, _ = runs
    proc = posexp(
        cwd,
        cache,
        "eval-extrapolate",
        "--run",
        str(rope),
        "--len",
        "128",
        "--protocol",
        "both",
        "--tokens",
        "2048",
    )
    recs = records(rope)
    keys = {(r["label"], r["length"], r["protocol"]) for r in recs}
    assert keys == set(itertools.product(METHODS, [32, 64, 128], ["nonoverlap", "sliding"]))
    assert len(recs) == len(keys)
    # No terminal here: one plain progress line per item instead of the bar.
    yarn = next(
        r for r in recs if (r["label"], r["length"], r["protocol"]) == ("yarn", 128, "sliding")
    )
    assert f"{rope.name}: yarn at 128 (sliding): ppl {yarn['ppl']:.2f}  [" in proc.stderr
    assert proc.stderr.count(f"{rope.name}: ") == len(recs)
    # Each line: the cell's own tokens, then the whole evaluation's cells and tokens so far.
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"{rope.name}: ")]
    total = sum(int(line.split(", ")[1].split()[0].replace(",", "")) for line in lines)
    assert lines[-1].endswith(
        f"; in all {len(recs)}/{len(recs)} cells done, {total:,}/{total:,} tokens]"
    )
    assert f"; in all 1/{len(recs)} cells done, " in lines[0]
    # JSON and CSV of one evaluation agree, and no staging folder or temp file is left.
    assert len((rope / "eval" / "extrapolate.csv").read_text().splitlines()) == len(recs) + 1
    assert not list(rope.glob("eval.*")) and not list((rope / "eval").glob("*.tmp"))
    for r in recs:
        assert set(r) >= {
            "method",
            "length",
            "protocol",
            "factor",
            "ppl",
            "loss",
            "tokens",
            "seconds",
            "note",
        }
        assert r["tokens"] == 2048  # the same scored count at every length
        assert math.isclose(r["ppl"], math.exp(r["loss"]), rel_tol=1e-9)
        # These ignore s: recorded as 1.
        unscaled = (
            "none",
            "dynamic_ntk",
            "rerope",
            "logn",
            "blockwise",
            "streaming_llm",
            "lm_infinite",
            "dca",
        )
        expected_factor = 1.0 if r["label"] in unscaled else r["length"] / 32
        assert r["factor"] == expected_factor
    by = {(r["label"], r["length"], r["protocol"]): r for r in recs}
    # Sliding (stride 16) and non-overlapping windows agree at the training length (sliding gives
    # every token >= 16 tokens of context, so it is a little lower; measured ~3%).
    slide, nonover = by["none", 32, "sliding"]["ppl"], by["none", 32, "nonoverlap"]["ppl"]
    assert slide == pytest.approx(nonover, rel=0.06) and slide < nonover * 1.01
    # At factor 1 every static method is plain RoPE, and so are Self-Extend (G = 1 at s = 1) and
    # log scaling (every query within L0), StreamingLLM (S + W = L0) and LM-Infinite (W = L0).
    for m in ("pi", "ntk", "yarn", "llama3", "self_extend", "logn", "streaming_llm", "lm_infinite"):
        # Self-Extend runs its own kernel (an explicit softmax, not SDPA): float32 rounding
        # differs by ~2e-5 of the ppl between the two (measured), so it gets 1e-4.
        rel = 1e-4 if m in ("self_extend", "streaming_llm", "lm_infinite") else 1e-5
        assert by[m, 32, "nonoverlap"]["ppl"] == pytest.approx(
            by["none", 32, "nonoverlap"]["ppl"], rel=rel
        )
    # Dynamic NTK follows the window length: plain RoPE up to L0, rescaled past it.
    assert by["dynamic_ntk", 32, "nonoverlap"]["ppl"] == pytest.approx(
        by["none", 32, "nonoverlap"]["ppl"], rel=1e-5
    )
    assert by["dynamic_ntk", 128, "nonoverlap"]["ppl"] != pytest.approx(
        by["none", 128, "nonoverlap"]["ppl"], rel=1e-3
    )
    # Qualitative: without extension, 4x the training length is clearly worse than 1x.
    assert by["none", 128, "nonoverlap"]["ppl"] > 1.15 * by["none", 32, "nonoverlap"]["ppl"]

    rows = list(csv.DictReader((rope / "eval" / "extrapolate.csv").open()))
    assert len(rows) == len(recs) and rows[0]["method"] == "none"
    # A language model's CSV has no task columns (accuracy, examples, key depth) left empty.
    assert {"accuracy", "examples", "depth"}.isdisjoint(rows[0])
    assert {"ppl", "precision", "stride"} <= set(rows[0])
    for name in ("extrapolate.png", "per_position.png"):
        assert (rope / "eval" / name).read_bytes()[:4] == b"\x89PNG"
    per_position = json.loads((rope / "eval" / "per_position.json").read_text())
    assert per_position["length"] == 128 and set(per_position["methods"]) == set(METHODS)
    assert all(v is not None for v in per_position["methods"]["none"]["loss"])

    # The evaluation goes into the run's own TensorBoard run (one colour per run on every
    # card), a tag per method, and no folder of its own.
    assert not [p for p in (rope / "eval").rglob("events.out.tfevents.*")]
    assert len(list(rope.glob("events.out.tfevents.*.eval-extrapolate"))) == 1
    events = EventAccumulator(str(rope), size_guidance={"images": 0}).Reload()
    assert {"train/loss", "val/loss"} <= set(events.Tags()["scalars"])  # the run itself
    for method in METHODS:
        for protocol in ("nonoverlap", "sliding"):
            assert f"extrapolate/rope/{protocol}/ppl/{method}" in events.Tags()["scalars"]
        got = {
            (e.step, round(e.value, 3))
            for e in events.Scalars(f"extrapolate/rope/sliding/ppl/{method}")
        }
        assert got == {
            (r["length"], round(r["ppl"], 3))
            for r in recs
            if r["label"] == method and r["protocol"] == "sliding"
        }
    assert {"extrapolate/ppl_plot", "extrapolate/per_position_loss"} <= set(events.Tags()["images"])
    # The exact numbers in the Text tab, which no chart smoothing touches.
    (text,) = events.Tensors("extrapolate/table/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    none_sliding = {
        r["length"]: r["ppl"] for r in recs if (r["label"], r["protocol"]) == ("none", "sliding")
    }
    expected = " | ".join(f"{none_sliding[n]:,.2f}" for n in sorted(none_sliding))
    assert f"| none | sliding | {expected} |" in table
    assert "dynamic_ntk" in proc.stdout and "128" in proc.stdout  # the printed table


def test_learned_past_its_table_is_null_with_reason(runs, cache):
    cwd, _, learned = runs
    proc = posexp(
        cwd, cache, "eval-extrapolate", "--run", str(learned), "--len", "128", "--tokens", "512"
    )
    by = {(r["label"], r["length"]): r for r in records(learned)}
    # Measured in the precision it trained in, and said so.
    assert {r["precision"] for r in by.values()} == {"bf16"} and "bf16 as trained" in proc.stdout
    assert set(by) == set(itertools.product(["none", "pi", "logn", "blockwise"], [32, 64, 128]))
    assert by["none", 32]["ppl"] is not None
    for n in (64, 128):
        for method in ("none", "logn"):  # log scaling does not move the positions
            assert by[method, n]["ppl"] is None and "learned" in by[method, n]["note"]
        assert by["pi", n]["ppl"] is not None and by["pi", n]["factor"] == n / 32


def test_default_is_newest_run_and_a_second_evaluation_adds_to_the_first(runs, cache):
    cwd, _, learned = runs
    before = {r["label"]: r for r in records(learned) if r["length"] == 32}  # the test above
    proc = posexp(
        cwd,
        cache,
        "eval-extrapolate",
        "--lengths",
        "32,48",
        "--method",
        "none",
        "--method",
        "pi",
        "--tokens",
        "256",
    )
    assert learned.name in proc.stdout and f"{learned.name}: scoring 4 cells" in proc.stdout
    recs = records(learned)
    new = {(r["label"], r["length"]) for r in recs if r["sample_size"] == 256}
    assert new == set(itertools.product(["none", "pi"], [32, 48]))
    # The first evaluation's records stay, each untouched (its 512-token cells are others).
    kept = {r["label"]: r for r in recs if r["length"] == 32 and r["sample_size"] == 512}
    assert kept == before and len(recs) == 12 + 4
    assert len(list(learned.glob("events.out.tfevents.*.eval-extrapolate"))) == 1
    assert not list((learned / "eval").rglob("events.out.tfevents.*"))  # no run of its own
    # Asked again, nothing is scored and nothing is written.
    files = {p: p.stat().st_mtime_ns for p in (learned / "eval").rglob("*")}
    again = posexp(
        cwd,
        cache,
        "eval-extrapolate",
        "--lengths",
        "32,48",
        "--method",
        "none,pi",
        "--tokens",
        "256",
    )
    assert f"{learned.name}: all 4 cells already measured on these weights" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in (learned / "eval").rglob("*")} == files


BAD = {
    "unknown method": (
        ["--method", "none,rope2x"],
        f"--method 'rope2x': unknown method 'rope2x'; allowed: {', '.join(sorted(['baked', *EXTENSIONS]))}",
    ),
    "factor below 1": (["--factor", "0.5"], "--factor must be a finite number >= 1, got 0.5"),
    "len below training length": (["--len", "16"], "--len 16 is below the training length 32"),
    "not applicable": (
        ["--method", "ntk"],
        "extension 'ntk' does not apply to pe 'learned' (embedding); allowed for learned: none, pi",
    ),
    "bad protocol": (
        ["--protocol", "windows"],
        "unknown --protocol 'windows'; allowed: nonoverlap, sliding, doc_position, context_gain, both",
    ),
    "baked on a plain run": (["--method", "baked"], "has no baked-in extension"),
    "depths on a language model": (
        ["--depths", "0,0.5"],
        "--depths 0,0.5 sets where a key sits in the filler, and ",
    ),
    "depth past the filler": (
        ["--depths", "0,1.5"],
        "--depths takes key depths in [0, 1] like 0,0.5,1, got '1.5'",
    ),
    "tokens below length": (
        ["--tokens", "100", "--len", "128"],
        "--tokens 100 is below the longest length 128",
    ),
    "a length past the test split": (
        ["--lengths", "32,300000", "--method", "none"],
        "length 300,000 is longer than the run's test split (202,311 tokens): no window fits; "
        "allowed: lengths up to 202,310",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_line(runs, name, monkeypatch, capsys):
    # In-process through the console-script entry point (the same main() `posexp` runs).
    from posexp.cli import main

    cwd, _, learned = runs
    args, message = BAD[name]
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["posexp", "eval-extrapolate", "--run", str(learned), *args])
    before = sorted((learned / "eval").iterdir()) if (learned / "eval").exists() else []
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    after = sorted((learned / "eval").iterdir()) if (learned / "eval").exists() else []
    assert after == before  # nothing written


def test_a_setting_the_model_cannot_take_is_refused_before_scoring(runs, monkeypatch, capsys):
    # LongRoPE's per-pair list must match the rotated dims (8-dim heads: 4 pairs).
    from posexp.cli import main

    cwd, rope, _ = runs
    spec = "longrope(long_factor=[1,2])"
    monkeypatch.chdir(cwd)
    argv = ["posexp", "eval-extrapolate", "--run", str(rope), "--len", "64", "--method", spec]
    monkeypatch.setattr(sys, "argv", argv)
    before = sorted((rope / "eval").iterdir()) if (rope / "eval").exists() else []
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and "scoring" not in out
    assert err.strip() == (
        f"error: --method '{spec}' for '{rope}': extension.long_factor has 2 entries; the 8 "
        "rotated dims of each head need 4, one per pair"
    )
    assert (sorted((rope / "eval").iterdir()) if (rope / "eval").exists() else []) == before


def test_run_dir_without_checkpoint(tmp_path, cache):
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    proc = posexp(tmp_path, cache, "eval-extrapolate", "--run", "run", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: no checkpoint in 'run' (expected checkpoint/meta.json, or a sweep dir of runs)"
    ]


# ---- protocols, in process ------------------------------------------------------------------


@pytest.mark.parametrize("n,length,stride", [(100, 32, 8), (64, 32, 32), (7, 4, 3), (33, 32, 1)])
def test_every_target_scored_exactly_once(n, length, stride):
    for windows in (nonoverlap_windows(n, length), sliding_windows(n, length, stride)):
        scored = [t for w in windows for t in range(w.end - w.score, w.end)]
        assert scored == list(range(n))
        assert all(w.length <= length and 0 < w.score <= w.length for w in windows)
    sliding = sliding_windows(n, length, stride)
    # After the first window every target has at least length - stride tokens of context.
    assert all(w.length == length for w in sliding[1:-1])


def test_sliding_with_stride_equal_to_length_is_nonoverlap():
    assert sliding_windows(1000, 64, 64) == nonoverlap_windows(1000, 64)
    model = GPT(
        ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, pe="rope", train_length=8)
    )
    tokens = torch.randint(0, 11, (101,))
    a = score_windows(model, tokens, nonoverlap_windows(100, 8), torch.device("cpu"))
    b = score_windows(model, tokens, sliding_windows(100, 8, 8), torch.device("cpu"))
    assert a.count == b.count == 100 and a.loss == pytest.approx(b.loss, rel=1e-6)
    c = score_windows(model, tokens, sliding_windows(100, 8, 2), torch.device("cpu"))
    assert c.count == 100 and c.loss != pytest.approx(a.loss, rel=1e-6)


def test_an_unfinished_run_is_marked_in_every_record(tmp_path):
    from posexp.commands.extrapolate.plan import Settings, plan_run
    from posexp.config import ExtrapolateConfig
    from posexp.store.checkpoint import save_checkpoint

    mcfg = ModelConfig(
        vocab_size=260, d_model=32, n_layers=1, n_heads=2, pe="rope", train_length=32
    )
    config = run_config("train.max_steps=50").to_dict()
    save_checkpoint(tmp_path, GPT(mcfg), {"step": 20, "model": mcfg.to_dict(), "config": config})
    settings = Settings(ExtrapolateConfig(lengths=[32, 64], method=parse_specs("none")))
    plan = plan_run(RunDir(tmp_path), settings, n_runs=1)
    assert all(i.record.note == "unfinished run: checkpoint at step 20 of 50" for i in plan.items)
    (tmp_path / "results.json").write_text('{"status": "completed", "step": 50}')
    assert all(i.record.note == "" for i in plan_run(RunDir(tmp_path), settings, n_runs=1).items)


def test_plot_helpers_smooth_and_plain_ticks():
    from posexp.results.curves import plot_ppl
    from posexp.results.positions import smooth

    assert smooth([1.0, 2.0, 3.0, 4.0, 5.0], width=3) == [1.5, 2.0, 3.0, 4.0, 4.5]
    records = [
        {"method": m, "protocol": "nonoverlap", "length": n, "ppl": p}
        for m, pts in (
            ("none", ((64, 8.0), (128, 11.0), (1024, 19.0))),
            ("pi", ((64, 8.0), (128, 8.8), (1024, 12.0))),
        )
        for n, p in pts
    ]
    fig = plot_ppl(records, 64, "title")
    fig.canvas.draw()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128", "1,024"]
    shown = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert shown and all(t.replace(".", "").isdigit() for t in shown)  # 10, 15, 20: no 10^1
    styles = {
        line.get_label(): (line.get_linestyle(), line.get_marker()) for line in ax.get_lines()
    }
    assert styles["none"] != styles["pi"]


def test_abacus_past_its_table_gives_its_own_reason(tmp_path, cache):
    # 3-digit sums have 4-digit answers: past a 3-row Abacus table. The note says that, not the
    # learned table's words (which name rows and --method pi, neither of which applies).
    run = tmp_path / "run"
    posexp(
        tmp_path,
        cache,
        "train",
        "data=addition",
        "pe=abacus",
        "pe.max_digits=3",
        "data.train_lengths=[1,2]",
        "data.test_lengths=[2,3]",
        "data.test_examples=4",
        *TINY,
        f"hydra.run.dir={run}",
    )
    posexp(tmp_path, cache, "eval-extrapolate", "--run", str(run))
    by = {r["length"]: r for r in records(run)}
    assert by[2]["accuracy"] is not None and by[3]["accuracy"] is None
    assert by[3]["note"] == (
        "not applicable: a number of more than 3 digits is past the Abacus table "
        "(pe.max_digits=3); raise pe.max_digits"
    )


def test_passkey_depths_given_replace_the_runs_own(tmp_path, cache):
    # --depths scores the depths asked for (a needle sweep), not the run's data.depths.
    run = tmp_path / "run"
    posexp(
        tmp_path,
        cache,
        "train",
        "data=passkey",
        "data.train_lengths=[76,90]",
        "data.test_lengths=[90]",
        "data.test_examples=3",
        *TINY,
        "train.seq_len=96",
        f"hydra.run.dir={run}",
    )
    posexp(tmp_path, cache, "eval-extrapolate", "--run", str(run), "--method", "none")
    assert sorted(r["depth"] for r in records(run)) == [0.0, 0.5, 1.0]
    posexp(
        tmp_path,
        cache,
        "eval-extrapolate",
        "--run",
        str(run),
        "--method",
        "none",
        "--depths",
        "0.1,0,0.1",
    )
    # The second call scores only its new depth; the union stays in the records.
    assert sorted((r["depth"], r["examples"]) for r in records(run)) == [
        (0.0, 3),
        (0.1, 3),
        (0.5, 3),
        (1.0, 3),
    ]


def test_a_sweep_whose_every_job_is_skipped_says_how_many(tmp_path):
    import io

    from rich.console import Console

    from posexp.commands.extrapolate.evaluate import JobFailures, share_runs
    from posexp.errors import PosexpError

    skipped = JobFailures(Console(file=io.StringIO()))
    skipped.skip(tmp_path / "extension=pi", "no checkpoint to evaluate (status failed)")
    with pytest.raises(PosexpError, match=r"^no checkpoint|pi: no checkpoint"):
        share_runs([], Console(), skipped)  # one run: its own reason
    skipped.skip(tmp_path / "extension=yarn", "no checkpoint to evaluate (status failed)")
    with pytest.raises(PosexpError, match=r"all 2 were skipped \(each named above"):
        share_runs([], Console(), skipped)
