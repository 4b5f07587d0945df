"""The typed run config: ``run`` (the whole ``RunConfig``, built and checked in one place),
``sections`` (model, train, translate, attention, placement) and ``extrapolate``; ``paths``
(where posexp's config tree is) and ``resolvers`` (the resolvers its YAML files use).

The config types are imported on first use: ``--help`` asks ``posexp.config.paths`` for the
config tree and must not pull in torch (the extension methods) through them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from posexp.config.extrapolate import ExtrapolateConfig
    from posexp.config.run import RunConfig, from_composed
    from posexp.config.sections import (
        DEVICES,
        MISSING,
        NETWORK_ROOTS,
        PRECISIONS,
        RESUME_ROOTS,
        SEED_MAX,
        THREADS_MAX,
        AttentionConfig,
        ModelSpec,
        NamedConfig,
        PlacementConfig,
        TrainConfig,
        TranslateConfig,
    )

__all__ = [
    "DEVICES",
    "PRECISIONS",
    "MISSING",
    "NETWORK_ROOTS",
    "RESUME_ROOTS",
    "SEED_MAX",
    "THREADS_MAX",
    "AttentionConfig",
    "ExtrapolateConfig",
    "ModelSpec",
    "NamedConfig",
    "PlacementConfig",
    "RunConfig",
    "TrainConfig",
    "TranslateConfig",
    "from_composed",
]


def __getattr__(name: str) -> Any:
    """One of ``__all__``, from the module that defines it."""
    if name == "ExtrapolateConfig":
        from posexp.config import extrapolate as home
    elif name in ("RunConfig", "from_composed"):
        from posexp.config import run as home
    elif name in __all__:
        from posexp.config import sections as home
    else:
        raise AttributeError(f"module 'posexp.config' has no attribute {name!r}")
    return getattr(home, name)
