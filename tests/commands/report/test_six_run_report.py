"""A six-run report (three PEs, two seeds, fine-tunes with long names, many methods) reads
cleanly: short labels from what varies, and no text box of any figure overlaps another."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch.utils.tensorboard import SummaryWriter

from posexp.commands.report import view as view_mod
from posexp.commands.report.runs_section import runs_section
from posexp.commands.report.view import ReportContext
from posexp.commands.report.views import curves, extrapolation
from posexp.results.figures import text_overlaps
from posexp.results.labels import run_settings
from tests.helpers import record_view

METHODS = ("none", "pi", "ntk", "yarn", "dynamic_ntk", "llama3", "self_extend", "blockwise")
L0 = 64


def six_jobs(tmp_path):
    jobs = []
    for i, (pe, tuned) in enumerate(
        [("rope", False), ("rope", True), ("alibi", False), ("alibi", True), ("learned", False)]
        + [("rope", False)]
    ):
        seed = 1 if i == 5 else 0
        flat = {
            "pe.name": pe,
            "extension.method": "yarn" if tuned else "none",
            "extension.factor": 4.0 if tuned else 1.0,
            "model.name": "tiny",
            "train.max_steps": 60 if tuned else 600,
            "train.lr": 1e-3 if tuned else 3e-3,
            "train.seq_len": 4 * L0 if tuned else L0,
            "parent": "outputs/runs/2026-12-01_10-00-00_kjv_rope_h4" if tuned else None,
            "train.threads": 2,
            "seed": seed,
        }
        path = tmp_path / f"job{i}"
        writer = SummaryWriter(str(path))
        for step in range(0, 61, 10):
            writer.add_scalar("train/loss", 4.0 - step / 30 - 0.1 * i, step)
            writer.add_scalar("val/loss", 4.1 - step / 30 - 0.1 * i, step)
        writer.close()
        methods = ("none",) if pe == "learned" else METHODS
        records = [
            record_view(m, protocol="nonoverlap", length=n, ppl=20.0 + i + k + n / 64, tokens=4096)
            for k, m in enumerate(methods)
            for n in (L0, 2 * L0, 4 * L0, 8 * L0)
        ]
        jobs.append(
            SimpleNamespace(
                name=f"sweep/pe={pe},seed={seed}" + (",finetune=yarn" if tuned else ""),
                path=path,
                pe=pe,
                config=None,
                params={"pe": pe, "seed": str(seed)},
                flat_config=flat,
                settings=run_settings(flat),
                train_length=L0,
                extrapolate=records,
                metrics={"final/val_ppl": 20.0 + i, "step": 60},
                status="completed",
                error="",
            )
        )
    return jobs


@pytest.fixture
def figures(monkeypatch):
    """Every figure a view saves, checked for overlapping text before it is written."""
    seen: dict[str, list[tuple[str, str]]] = {}
    save = view_mod.ReportContext.save_figure

    def checked(self, fig, name):
        seen[name] = text_overlaps(fig)
        return save(self, fig, name)

    monkeypatch.setattr(view_mod.ReportContext, "save_figure", checked)
    return seen


def test_a_six_run_report_has_short_labels_and_no_overlapping_text(tmp_path, figures):
    jobs = six_jobs(tmp_path)
    swept = ["pe", "fine-tuned", "extension", "train.seq_len", "train.max_steps", "seed"]
    ctx = ReportContext(tmp_path, jobs, swept)
    md, _ = runs_section(ctx)
    md += curves.render(ctx) + extrapolation.render_extrapolation(ctx)
    labels = [ctx.label(j) for j in jobs]
    assert labels == [
        "rope s0",
        "rope fine-tuned s0",
        "alibi s0",
        "alibi fine-tuned s0",
        "learned s0",
        "rope s1",
    ]
    assert "outputs/runs" not in md and "threads" not in md  # never paths or plumbing
    lines = md.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("| PE + method")]
    names = []  # the extrapolation tables' rows: PE (+ method) names
    for i in heads:
        for line in lines[i + 2 :]:
            if not line.startswith("| "):
                break
            names.append(line.split("|")[1].strip())
    assert max(map(len, names)) == len("ALiBi [fine-tuned]+self_extend")  # names, not commands
    assert set(figures) == {
        "report_runs.png",
        "report_curves.png",
        "report_extrapolation_nonoverlap.png",
    }
    assert figures == {name: [] for name in figures}


def test_the_overlap_check_finds_a_legend_over_a_title():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(4, 3))
    a.set_title("a title far too long for its own panel, running into the next one")
    b.set_title("the next panel's title")
    assert text_overlaps(fig)  # the titles collide
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    ax.plot([1, 2], [1, 2], label="a line")
    ax.set_title("a short title")
    ax.legend(loc="lower right")
    assert text_overlaps(fig) == []
    plt.close(fig)


def test_a_curve_is_the_seed_mean_at_the_steps_every_seed_logged():
    seeds = [{0: 4.0, 10: 3.0, 20: 2.0}, {0: 6.0, 10: 5.0}]  # the second stopped early
    assert curves.seed_mean(seeds) == [
        (0, 5.0, pytest.approx(2**0.5), 2),
        (10, 4.0, pytest.approx(2**0.5), 2),
    ]


def test_the_curves_come_from_the_run_s_own_event_files(tmp_path):
    (job,) = six_jobs(tmp_path)[:1]
    data = curves.scalars(job)
    assert sorted(data) == ["train/loss", "val/loss"] and sorted(data["val/loss"]) == [
        0,
        10,
        20,
        30,
        40,
        50,
        60,
    ]
    assert data["val/loss"][0] == pytest.approx(4.1)
    (job.path / "events.out.tfevents.0.broken").write_bytes(b"\x00garbage")
    assert curves.scalars(job)["val/loss"][0] == pytest.approx(4.1)  # one bad file skipped


def test_the_curves_legend_orders_settings_by_their_numbers(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(curves, "scalars", lambda job: {"val/loss": {0: 1.0}})
    # as the folder sorts them
    jobs = [SimpleNamespace(name=h, path=tmp_path / h) for h in ("h1", "h16", "h4")]
    ctx = SimpleNamespace(label=lambda job, exclude: job.name, target=tmp_path)
    groups, unreadable = curves.group_curves(ctx, jobs)
    assert list(groups) == ["h1", "h4", "h16"] and unreadable == []


def test_curves_say_when_training_and_validation_loss_count_different_tokens(tmp_path, monkeypatch):
    # A task run with data.loss_on=all trains on every token; its val loss is the answers'.
    from types import SimpleNamespace

    jobs = [
        SimpleNamespace(name=n, path=tmp_path, config=None, flat_config={"data.loss_on": on})
        for n, on in (("a", "all"), ("b", "answer"))
    ]
    ctx = SimpleNamespace(
        jobs=jobs,
        target=tmp_path,
        label=lambda job, exclude: job.name,
        write_csv=lambda name, rows, fields: tmp_path / name,
    )
    monkeypatch.setattr(curves, "event_files", lambda job: [tmp_path])
    monkeypatch.setattr(
        curves, "scalars", lambda job: {"val/loss": {0: 1.0}, "train/loss": {5: 0.4}}
    )
    monkeypatch.setattr(curves, "curves_plot", lambda ctx, *a: tmp_path / "report_curves.png")
    md = curves.render(ctx)
    assert "1 of 2 runs train on every token (`data.loss_on=all`)" in md


def test_a_pe_by_setting_sweep_colours_lines_by_encoding_and_styles_them_by_the_rest(tmp_path):
    import matplotlib.colors as mcolors

    from posexp.commands.report.views.findings import job_pe, pe_colors

    jobs = []
    for pe in ("rope", "alibi"):
        for lr in (1e-3, 3e-3):
            flat = {"pe.name": pe, "train.lr": lr, "seed": 0}
            config = SimpleNamespace(
                pe=SimpleNamespace(params={}), positions=SimpleNamespace(randomized=False)
            )
            jobs.append(
                SimpleNamespace(
                    name=f"pe={pe},lr={lr}", pe=pe, config=config, flat_config=flat,
                    settings=run_settings(flat),
                )
            )  # fmt: skip
    ctx = ReportContext(tmp_path, jobs, ["pe", "train.lr"])
    lines = curves.line_pes(ctx, jobs)
    assert len(lines) == 4 and {rest for _, rest in lines.values()} == {"lr=0.001", "lr=0.003"}
    groups = {
        ctx.label(j, exclude=("seed",)): {"train/loss": [{0: 4.0, 10: 3.0 + i}]}
        for i, j in enumerate(jobs)
    }
    figures = []
    save = ctx.save_figure
    ctx.save_figure = lambda fig, name: (figures.append(fig), save(fig, name))[1]
    curves.curves_plot(ctx, groups, lines)
    drawn = {line.get_label(): line for line in figures[0].axes[0].get_lines()}
    colors = pe_colors(ctx)
    for job in jobs:
        pe, rest = lines[ctx.label(job, exclude=("seed",))]
        line = drawn[f"{pe.label} · {rest}"]
        assert mcolors.same_color(line.get_color(), colors[job_pe(job)])
        assert line.get_linestyle() == ("-" if rest == "lr=0.001" else "--")
    # legend in the encodings' display order, then by the other setting's value
    assert list(drawn) == [
        "RoPE · lr=0.001",
        "RoPE · lr=0.003",
        "ALiBi · lr=0.001",
        "ALiBi · lr=0.003",
    ]
