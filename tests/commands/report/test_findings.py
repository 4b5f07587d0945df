"""Published findings live as data (configs/findings.yaml), and the report shows each PE the way
its class declares, a PE it has never heard of included."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from posexp.commands.report.view import ReportContext
from posexp.commands.report.views import extrapolation, tasks
from posexp.commands.report.views.findings import findings
from posexp.pe import PE_REGISTRY, register_pe
from posexp.pe.base import PositionalEncoding, describe_pe
from tests.helpers import record_view

DOCS = Path(__file__).resolve().parents[3] / "docs" / "experiments.md"


def docs_rows(first_cell: str) -> list[list[str]]:
    """Cells of the Markdown table rows of docs/experiments.md starting with ``| first_cell |``."""
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in DOCS.read_text().splitlines()
        if line.startswith(f"| {first_cell} |")
    ]


def test_vaswani_table_3_matches_the_docs():
    rows = findings()["head_ablation"]["rows"]
    assert sorted(rows) == [1, 4, 8, 16, 32]
    for h, paper in rows.items():
        (doc,) = docs_rows(str(h))[:1]  # | h | d_k = d_v | PPL | BLEU |
        assert (float(doc[2]), float(doc[3])) == (paper["ppl"], paper["bleu"])
    assert rows[1] == {"ppl": 5.29, "bleu": 24.9}


def test_alibi_paper_numbers_match_the_docs():
    paper = findings()["extrapolation"]
    header = next(
        line for line in DOCS.read_text().splitlines() if line.startswith("| eval length |")
    )
    columns = [c.strip() for c in header.strip("|").split("|")][
        1:
    ]  # sinusoidal, rotary, T5 bias, ALiBi
    assert columns == ["sinusoidal", "rotary", "T5 bias", "ALiBi"]
    for i, n in enumerate(paper["lengths"]):
        doc = [row for row in docs_rows(str(n)) if len(row) == 5][-1]
        published = [paper["ppl"][pe][i] for pe in ("sinusoidal", "rope", "t5", "alibi")]
        assert [None if "memory" in c else float(c) for c in doc[1:]] == published


def test_findings_name_only_registered_pes_and_declared_families():
    families = {describe_pe(pe).family for pe in PE_REGISTRY}
    assert set(findings()["extrapolation"]["ppl"]) <= set(PE_REGISTRY)
    for finding in findings()["length_generalization"]:
        assert finding["cite"] and finding["finding"]
        assert finding["compare"] in ("ranks", "randomized")
        for side in ("best", "worst"):
            selector = finding.get(side, {})
            assert set(selector.get("pes", ())) <= set(PE_REGISTRY)
            assert set(selector.get("families", ())) <= families
    assert findings() is findings()  # read once


@pytest.fixture
def throwaway_pe():
    """A PE registered for one test only, declaring where it goes and how it reads."""

    @register_pe("test_throwaway")
    class Throwaway(PositionalEncoding):
        label, order, family = "Throwaway PE", 5, "absolute"

    yield Throwaway
    # PE_REGISTRY is a dict, or a Registry around one.
    del getattr(PE_REGISTRY, "_items", PE_REGISTRY)["test_throwaway"]


def fake_job(pe: str, ppl: float) -> SimpleNamespace:
    """What the extrapolation view reads of a job: its PE, swept params and records."""
    records = [
        record_view("none", protocol="nonoverlap", length=n, ppl=ppl * n / 32, tokens=64)
        for n in (32, 64, 128)
    ]
    return SimpleNamespace(
        pe=pe,
        config=None,
        params={"pe": pe},
        settings={"pe": pe},
        flat_config={},  # no saved config: trained from scratch
        name=f"pe={pe}",
        train_length=32,
        extrapolate=records,
    )


def test_declared_label_and_order_drive_the_extrapolation_view(throwaway_pe, tmp_path):
    jobs = [
        fake_job(pe, v)
        for pe, v in (("alibi", 3.0), ("removed_pe", 4.0), ("test_throwaway", 5.0), ("none", 6.0))
    ]
    ctx = ReportContext(tmp_path, jobs, ["pe"])
    columns = extrapolation.extrapolation_columns(ctx)
    # NoPE (order 0), the throwaway (5), ALiBi (40), then the PE nobody declares, as itself.
    assert [c.label for c in columns] == ["NoPE", "Throwaway PE", "ALiBi", "removed_pe"]
    md = extrapolation.render_extrapolation(ctx)
    rows = [line.split(" | ")[0][2:] for line in md.splitlines() if line.startswith("| ")]
    assert rows[1:5] == ["NoPE", "Throwaway PE", "ALiBi", "removed_pe"]  # PEs are the rows
    assert (tmp_path / "report_extrapolation_nonoverlap.png").is_file()
    csv_header = (tmp_path / "report_extrapolation.csv").read_text().splitlines()[0]
    assert csv_header == ",".join(
        ["protocol", "length", "multiple"]
        + [
            f"{pe}{s}"
            for pe in ("none", "test_throwaway", "alibi", "removed_pe")
            for s in ("", " std", " n")
        ]
    )
    # Its own shape beside the paper's, for the PEs the paper measured: ALiBi only here.
    assert (
        "beside Press et al. 2022 (ALiBi): ALiBi against Press et al. 2022 (ALiBi) (ppl ratio): "
        "not comparable: other data."
    ) in md


def test_declared_label_and_order_drive_the_tasks_view(throwaway_pe, tmp_path):
    shown = {pe: describe_pe(pe) for pe in ("test_throwaway", "sinusoidal", "none", "removed_pe")}
    assert tasks.ordered(shown.values()) == [
        shown[p] for p in ("none", "test_throwaway", "sinusoidal", "removed_pe")
    ]
    summary = {
        "copy": {
            shown["none"]: 0.2,
            shown["test_throwaway"]: 0.1,
            shown["sinusoidal"]: 0.1,
            shown["removed_pe"]: 0.9,
        }
    }
    lines = tasks.reading(summary)
    assert lines[0] == (
        "- **copy**: best past the training sizes removed_pe (0.90), worst "
        "Throwaway PE, sinusoidal (APE) (0.10)."
    )
    # It declares the family "absolute", so the finding about absolute PEs names it too.
    assert "Throwaway PE or sinusoidal (APE) among the worst on 1" in lines[1]
    data = {
        "copy": {pe: {4: 1.0, 8: acc, 16: acc / 2} for pe, acc in summary["copy"].items()},
        "reverse": {
            shown["none"]: {4: 1.0, 8: 0.5, 16: 0.1},
            describe_pe("rope", randomized=True): {4: 0.9, 8: 0.6, 16: 0.3},
        },
    }
    ctx, figures = ReportContext(tmp_path, [], []), []
    save = ctx.save_figure
    ctx.save_figure = lambda fig, name: (figures.append(fig), save(fig, name))[1]
    assert tasks.plot(ctx, data, (1, 4)).is_file()
    # One legend for both panels: every PE of any panel, in declared order, then the shading.
    (legend,) = figures[0].legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "NoPE",
        "Throwaway PE",
        "sinusoidal (APE)",
        "RoPE + randomized",
        "removed_pe",
        "training sizes 1–4",
    ]


def test_a_shape_word_holds_only_within_its_stated_bound():
    from posexp.commands.report.views.extrapolation_paper import shape

    assert shape(1.04) == "stays flat" and shape(0.96) == "stays flat"
    assert shape(1.17) == "rises"  # a 17% rise is not flat
    assert shape(1.08, spread=0.1) == "stays flat"  # within the seeds' spread
    assert shape(0.93) == "falls" and shape(1.57) == "degrades" and shape(6.0) == "explodes"


def test_each_encoding_has_one_colour_in_every_figure_of_a_report():
    from types import SimpleNamespace

    from posexp.commands.report.views.findings import pe_colors
    from posexp.pe.base import describe_pe

    def job(pe):
        config = SimpleNamespace(
            pe=SimpleNamespace(params={}), positions=SimpleNamespace(randomized=False)
        )
        return SimpleNamespace(pe=pe, config=config)

    ctx = SimpleNamespace(jobs=[job(p) for p in ("alibi", "rope", "none", "rope")], memo={})
    colors = pe_colors(ctx)
    order = sorted({describe_pe(p) for p in ("alibi", "rope", "none")}, key=lambda p: p.sort_key)
    from posexp.results.style import pe_style

    # the registry's colours: the same in any report, whatever the jobs' order
    assert [colors[p] for p in order] == [pe_style(p.name).color for p in order]
    assert len({colors[p] for p in order}) == 3
    assert pe_colors(ctx) is colors  # computed once per report
