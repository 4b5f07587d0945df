"""The typed run config: ``run`` (the whole ``RunConfig``, built and checked in one place),
``sections`` (model, train, translate, attention, placement) and ``extrapolate``."""

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
