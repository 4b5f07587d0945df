"""The ``extrapolate`` section (a preset's defaults for ``posexp eval-extrapolate``), which is
also what the command's options build: one dataclass and one checker for both."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from posexp import checks
from posexp.errors import PosexpError
from posexp.extension import check_factor
from posexp.extension.spec import BAKED, MethodSpec, parse_specs


@dataclass(frozen=True)
class ExtrapolateConfig:
    """``posexp eval-extrapolate``'s settings: a preset's ``extrapolate`` section, or the options.

    One name per knob: ``extrapolate.len`` in a preset is ``--len`` on the command line and
    ``len`` here. Every field is optional (None: the preset's value, else the command's
    default); ``eval-extrapolate`` checks the values against each run when it plans.
    """

    BAKED = BAKED  # a method name: the extension a fine-tuned run was trained with

    len: int | None = None
    lengths: list[int] | None = None
    method: list[MethodSpec] | None = None  # method specs as parsed (grids expanded)
    factor: float | None = None
    protocol: list[str] | None = None  # registered text protocols (posexp/scoring)
    stride: int | None = None
    tokens: int | None = None
    depths: list[float] | None = None  # passkey, niah_*: key depths to score, not data.depths
    # Also measure where attention goes (posexp attention) at L0 and the longest length.
    attention: bool | None = None

    @classmethod
    def from_dict(cls, value: Any, prefix: str = "extrapolate.") -> ExtrapolateConfig:
        """Check and normalise the knobs (absent ones stay None); errors name them ``prefix``+key:
        ``extrapolate.len`` in a preset, ``--len`` for the command's options."""
        d = checks.mapping(prefix.rstrip("."), value)
        checks.known_keys("extrapolate", d, [f.name for f in dataclasses.fields(cls)])
        null = prefix.endswith(".")  # a preset may write null; an option is just left out

        def count(key: str) -> int | None:
            v = d.get(key)
            return None if v is None else checks.positive_int(prefix + key, v, allow_none=null)

        if d.get("len") is not None and d.get("lengths") is not None:
            raise PosexpError(
                f"{prefix}len and {prefix}lengths both given; use one ({prefix}len "
                f"doubles from the training length, {prefix}lengths lists them)"
            )
        from posexp.scoring import parse_protocols

        specs = parse_specs(d.get("method"), prefix + "method")
        factor = d.get("factor")
        return cls(
            len=count("len"),
            lengths=cls._lengths(prefix + "lengths", d.get("lengths")),
            method=specs,
            protocol=parse_protocols(d.get("protocol"), prefix + "protocol"),
            stride=count("stride"),
            factor=None if factor is None else check_factor(factor, prefix + "factor"),
            tokens=count("tokens"),
            depths=cls._depths(prefix + "depths", d.get("depths")),
            attention=None
            if d.get("attention") is None
            else checks.boolean(prefix + "attention", d["attention"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The knobs given, in the YAML layout (each method spec as it is written)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.method is not None:
            out["method"] = [spec.label for spec in self.method]
        return {k: v for k, v in out.items() if v is not None}

    @staticmethod
    def _texts(value: Any) -> list[str]:
        # "64,128,256" (a string) or [64, 128] (a list): the items as stripped strings.
        items = value.split(",") if isinstance(value, str) else value
        items = items if isinstance(items, (list, tuple)) else [items]
        return [str(item).strip() for item in items]

    @classmethod
    def _lengths(cls, name: str, value: Any) -> list[int] | None:
        if value is None:
            return None
        texts = cls._texts(value)
        if "" in texts:
            raise PosexpError(
                f"{name} has an empty item in {value!r}; give integers like 64,128,256"
            )
        try:
            out = [int(text) for text in texts]
        except ValueError:
            raise PosexpError(f"{name} takes integers like 64,128,256, got {value!r}") from None
        if not out or min(out) <= 0:
            raise PosexpError(f"{name} must be positive integers, got {out}")
        return out

    @classmethod
    def _depths(cls, name: str, value: Any) -> list[float] | None:
        # Each a fraction of the filler: 0 opens it, 1 ends it.
        if value is None:
            return None
        out = []
        for text in cls._texts(value):
            try:
                depth = float(text)
            except ValueError:
                depth = None
            if depth is None or not 0 <= depth <= 1:
                raise PosexpError(f"{name} takes key depths in [0, 1] like 0,0.5,1, got {text!r}")
            out.append(depth)
        return list(dict.fromkeys(out)) or None
