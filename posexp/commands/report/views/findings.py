"""Published numbers and findings the report sets its own beside (``configs/findings.yaml``),
and how a run's positional encoding is shown (what the encoding declares, posexp/pe).

The views import it; it registers no view of its own.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from posexp.commands.report.jobs import Job
from posexp.config.paths import config_dir
from posexp.errors import PosexpError
from posexp.pe.base import PEDisplay, describe_pe

FINDINGS_FILE = "findings.yaml"


@cache
def findings() -> dict[str, Any]:
    """``configs/findings.yaml``, read once per process (shared: callers must not change it)."""
    path = Path(config_dir()) / FINDINGS_FILE
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise PosexpError(f"report: cannot read the published findings {path}: {e}") from None
    if not isinstance(data, dict):
        raise PosexpError(
            f"report: {path} must be a mapping of sections, got {type(data).__name__}"
        )
    return data


def job_pe(job: Job) -> PEDisplay:
    """How the report shows the job's PE: its label for its settings and its declared order,
    randomized positions marked (``pe=rope_randomized`` is rope with ``pe.randomized``)."""
    params = dict(job.config.pe.params) if job.config else None
    return describe_pe(job.pe, bool(job.config and job.config.positions.randomized), params)


def pe_colors(ctx: Any) -> dict[PEDisplay, str]:
    """One colour per encoding of the report, the same in every figure of it and of every
    other report and run: the style registry's (posexp.results.style)."""
    from posexp.results.style import display_style

    if "pe_colors" not in ctx.memo:
        pes = {job_pe(j) for j in ctx.jobs if j.config}
        ctx.memo["pe_colors"] = {pe: display_style(pe).color for pe in pes}
    return ctx.memo["pe_colors"]


def selects(selector: dict[str, Any], pe: PEDisplay) -> bool:
    """True when a finding's selector names ``pe`` by name (``pes``) or family (``families``);
    randomized positions are a different method from what the papers ranked, so never match."""
    return not pe.randomized and (
        pe.name in selector.get("pes", ()) or pe.family in selector.get("families", ())
    )
