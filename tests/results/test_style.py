"""The style registry: one look per PE and method spec, whatever else a figure shows."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

from posexp.results.curves import MOST_CURVES, method_panels, plot_ppl  # noqa: E402
from posexp.results.style import method_style, pe_style  # noqa: E402


def test_a_style_depends_on_the_name_not_on_the_order_of_plotting():
    assert pe_style("rope") == pe_style("rope")
    assert pe_style("rope").color != pe_style("alibi").color
    assert method_style("yarn", "yarn(factor=16)") == method_style("yarn", "yarn(factor=16)")
    # the specs of one method differ in look (one hue family), another method in hue
    a, b = method_style("yarn", "yarn(factor=4)"), method_style("yarn", "yarn(factor=16)")
    assert (a.marker, a.dash, a.color) != (b.marker, b.dash, b.color)
    assert method_style("logn").color != method_style("yarn").color
    assert method_style("none").color == "#000000"


def records(methods):
    return [
        {
            "method": m,
            "name": m.split("(")[0],
            "protocol": "nonoverlap",
            "length": n,
            "ppl": 5.0 + i + n / 1000,
        }
        for i, m in enumerate(methods)
        for n in (64, 128, 256)
    ]


def line_styles(fig):
    return {
        line.get_label(): (line.get_color(), line.get_marker(), line.get_linestyle())
        for ax in fig.axes
        for line in ax.lines
        if not line.get_label().startswith(("training", "_"))
    }


def test_a_spec_keeps_its_style_in_every_figure():
    # in one figure yarn(factor=16) is drawn third, in the other first: the same look
    one = line_styles(plot_ppl(records(["none", "logn", "yarn(factor=16)"]), 64, "a"))
    two = line_styles(plot_ppl(records(["yarn(factor=16)", "none"]), 64, "b"))
    assert one["yarn(factor=16)"] == two["yarn(factor=16)"]
    assert one["logn"][0] != one["yarn(factor=16)"][0]  # the two greens


def test_no_panel_holds_more_than_eight_curves_and_methods_stay_together():
    specs = ["none"]
    specs += [f"self_extend(group={g},window={w})" for g in (2, 4, 8) for w in (8, 16)]
    specs += [f"yarn(factor={f})" for f in (4, 8, 16)] + ["logn", "ntk"]
    names = {s: s.split("(")[0] for s in specs}  # the test's own: records carry the name
    panels = method_panels(specs, names)
    assert all(len(p) <= MOST_CURVES and p[0] == "none" for p in panels)
    assert sorted(m for p in panels for m in p[1:]) == sorted(specs[1:])
    # the six self_extend specs fit one panel with the plain line: not split across panels
    assert [p for p in panels if any("self_extend" in m for m in p)][0][1:] == specs[1:7]
    fig = plot_ppl(records(specs), 64, "t")
    for ax in fig.axes:
        assert len([line for line in ax.lines if line.get_label() in specs]) <= MOST_CURVES
    assert len(fig.axes) == len(panels)


def test_a_method_with_more_specs_than_a_panel_fills_panels_of_its_own():
    specs = ["none", *(f"yarn(factor={f})" for f in range(2, 12))]
    names = {s: s.split("(")[0] for s in specs}  # the test's own: records carry the name
    panels = method_panels(specs, names)
    assert [len(p) for p in panels] == [8, 4]


def test_layered_presets_get_a_style_each_and_plain_encodings_keep_theirs():
    from posexp.pe.base import PEDisplay, describe_pe
    from posexp.results.style import display_style, pe_style

    assert display_style(describe_pe("rope")) == pe_style("rope")
    assert display_style(describe_pe("rope", randomized=True)) == pe_style("rope randomized")
    labels = [
        "rope (window 32/full, sink logit)",
        "rope (window 32/32/32/32/32/full)",
        "none+rope*3 (window full/128/128/128)",
        "rope*3+none (window 128/128/128/full)",
        "rope*3+none (chunk 64, temperature 0.1)",
        "rope (elementwise gate)",
        "rope (SSMax 0.43)",
    ]
    styles = [display_style(PEDisplay("layered", False, label, 0, "")) for label in labels]
    assert len(set(styles)) == len(labels)  # seven presets of pe=layered: seven looks
    assert styles == [display_style(PEDisplay("layered", False, x, 0, "")) for x in labels]


def test_every_registered_encoding_has_a_colour_of_its_own_and_no_design_takes_one(monkeypatch):
    from pathlib import Path

    from posexp.commands.report.views.findings import job_pe
    from posexp.pe.base import PE_REGISTRY
    from posexp.results.style import display_style, pe_style
    from tests.helpers import run_config

    configs = Path(__file__).resolve().parents[2] / "configs" / "pe"
    shipped = [n for n in PE_REGISTRY.names() if (configs / f"{n}.yaml").is_file()]
    pe_style.cache_clear()  # as a fresh process has them: no encoding other tests registered
    monkeypatch.setattr(PE_REGISTRY, "names", lambda: list(shipped))
    registered = {pe_style(n).color for n in shipped}
    assert len(shipped) >= 20 and len(registered) == len(shipped)  # NoPE's blue is not PATH's
    presets = [p.stem for p in sorted(configs.glob("*.yaml")) if "- layered" in p.read_text()]
    assert {"gpt_oss", "rnope_swa", "swan_gpt", "gemma"} <= set(presets)
    looks = []
    for name in presets:  # each shipped design as a report shows it
        config = run_config("model=small", f"pe={name}")
        style = display_style(job_pe(SimpleNamespace(pe=config.pe.name, config=config)))
        assert style.color not in registered, (name, style)  # RNoPE-SWA is not NoPE's blue
        looks.append(style.color)
    assert len(set(looks)) == len(presets)  # seven designs, seven hues
    pe_style.cache_clear()


def test_a_randomized_variant_pairs_with_its_encoding_and_takes_no_other_encodings_look():
    from posexp.pe.base import PE_REGISTRY
    from posexp.results.style import pe_style

    plain, randomized = pe_style("t5"), pe_style("t5 randomized")
    assert randomized.marker == plain.marker and randomized.color != plain.color
    assert randomized.dash == "--"
    others = {pe_style(n) for n in PE_REGISTRY.names()}
    assert all(pe_style(f"{n} randomized") not in others for n in PE_REGISTRY.names())
