"""Where posexp's own files are: the Hydra config tree (no torch import, so `--help` stays fast)."""

from __future__ import annotations

from pathlib import Path

from posexp.config.resolvers import register_resolvers
from posexp.errors import PosexpError


def config_dir() -> str:
    """Absolute configs dir (packaged copy in a wheel, the repo's in an editable install).

    Also registers the resolvers the YAML files use: whoever composes posexp's configs asks here.
    """
    register_resolvers()
    here = Path(__file__).resolve().parents[1]  # the posexp package
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "train.yaml").is_file():
            return str(candidate)
    raise PosexpError(f"posexp configs not found next to {here}; reinstall posexp")
