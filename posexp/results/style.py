"""The style registry: one colour, marker and dash per PE and per method spec, the same in every
figure of every report and run.

A style is derived from the name alone, never from the order of plotting, so a curve keeps its
look when a figure shows fewer or more curves. Each registered PE takes a hue of its own from
its declared order (posexp/pe); a design made from one by its settings (a preset of
``pe=layered``) takes a hue and marker from a hash of its label, in hues no registered PE uses.
A method takes its colour from the method registry's order (all ``yarn(...)`` specs are one
hue, ``self_extend(...)`` another), and a spec's settings pick its shade, marker and dash from a
hash of its label, so the specs of one method differ in marker and dash within that hue. No
extension is black, solid, circles.
"""

from __future__ import annotations

import colorsys
import zlib
from dataclasses import dataclass
from functools import cache
from typing import Any

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")
# Colour-blind-friendlier tab10 first, then tab20b/c's darker tones: 20 hues, one for each
# registered encoding (tests/results/test_style.py holds them apart).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#e7ba52",
    "#6b6ecf",
    "#b5cf6b",
    "#d6616b",
    "#ce6dbd",
)
# Designs built from a registered encoding by its settings (the presets of pe=layered) draw from
# hues of their own, so a design never takes the look of an encoding it sits beside.
DESIGN_PALETTE = (
    "#1b9e77",
    "#d95f02",
    "#7570b3",
    "#e7298a",
    "#66a61e",
    "#e6ab02",
    "#a6761d",
    "#0067a5",
    "#be0032",
    "#604e97",
    "#008856",
    "#666666",
)
# Methods draw from colours of their own, none of them grey (no extension is black beside them)
# and none of them an encoding's tab10 tone, so a method never reads as a PE of another panel.
METHOD_PALETTE = (
    "#e6194b",
    "#3cb44b",
    "#4363d8",
    "#f58231",
    "#911eb4",
    "#42d4f4",
    "#f032e6",
    "#469990",
    "#9a6324",
    "#800000",
    "#808000",
    "#000075",
    "#a9a900",
    "#ff7f9f",
    "#6b8e23",
)
NONE_STYLE_COLOR = "#000000"
# Prefixed to a design's label before hashing: with it, the shipped presets of pe=layered take
# seven different hues of DESIGN_PALETTE (tests/results/test_style.py holds them to that).
DESIGN_SALT = "14"


@dataclass(frozen=True)
class Style:
    """How one curve is drawn."""

    color: str
    marker: str
    dash: str


def _digest(text: str) -> int:
    """A stable hash of ``text`` (Python's ``hash`` changes between processes)."""
    return zlib.crc32(text.encode())


RANDOMIZED = " randomized"  # how callers name an encoding's randomized-position variant


@cache
def pe_style(name: str) -> Style:
    """The style of the encoding registered as ``name`` (``rope``, ``alibi``), from its declared
    order among the registered encodings; an unknown name, from a hash of it."""
    from posexp.pe.base import PE_REGISTRY, describe_pe

    if name.endswith(RANDOMIZED) and name[: -len(RANDOMIZED)] in PE_REGISTRY:
        # Randomized positions: the encoding's own marker in a lighter tone, dashed, so that a
        # figure pairs "RoPE" with "RoPE + randomized" and no other encoding takes their look.
        plain = pe_style(name[: -len(RANDOMIZED)])
        return Style(_shade(plain.color, 0.15), plain.marker, "--")
    names = sorted(PE_REGISTRY.names(), key=lambda n: describe_pe(n).sort_key)
    index = names.index(name) if name in names else _digest(name)
    return Style(PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)], "-")


def display_style(pe: Any) -> Style:
    """The style of an encoding as a report shows it (a ``PEDisplay``): its registered name's,
    randomized positions apart; but where its settings make it another design (a layered
    pattern such as gpt-oss's windows and sinks, an attention option), from its label, so that
    seven presets of ``pe=layered`` are seven styles, the same in every figure."""
    from posexp.pe.base import describe_pe

    name = pe.name + (" randomized" if pe.randomized else "")
    if pe.label == describe_pe(pe.name, pe.randomized).label:
        return pe_style(name)
    d = _digest(DESIGN_SALT + pe.label)
    return Style(
        DESIGN_PALETTE[d % len(DESIGN_PALETTE)],
        MARKERS[(d // len(DESIGN_PALETTE)) % len(MARKERS)],
        ("-", "-.")[(d // (len(DESIGN_PALETTE) * len(MARKERS))) % 2],
    )


def _shade(color: str, amount: float) -> str:
    """``color`` made lighter (amount > 0) or darker (< 0) in lightness, its hue kept."""
    r, g, b = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    h, lightness, s = colorsys.rgb_to_hls(r, g, b)
    lightness = min(0.8, max(0.15, lightness + amount))
    r, g, b = colorsys.hls_to_rgb(h, lightness, s)
    return "#" + "".join(f"{round(v * 255):02x}" for v in (r, g, b))


SHADES = (0.0, -0.15, 0.15)


@cache
def method_style(name: str, spec: str = "") -> Style:
    """The style of a method spec: ``name`` the method (``yarn``), ``spec`` its display label
    (``yarn(factor=4)``; empty or equal to the name: the method at its defaults)."""
    from posexp.extension import EXTENSIONS, baseline_method

    if name == baseline_method():
        return Style(NONE_STYLE_COLOR, "o", "-")
    names = [n for n in EXTENSIONS.names() if n != baseline_method()]
    index = names.index(name) if name in names else _digest(name)
    color = METHOD_PALETTE[index % len(METHOD_PALETTE)]
    if not spec or spec == name:
        return Style(color, MARKERS[index % len(MARKERS)], "--")
    digest = _digest(spec)
    return Style(
        _shade(color, SHADES[digest % len(SHADES)]),
        MARKERS[(digest // 3) % len(MARKERS)],
        DASHES[1 + (digest // 24) % (len(DASHES) - 1)],
    )
