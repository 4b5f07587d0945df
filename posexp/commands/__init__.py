"""The CLI's commands, one module or subpackage each: train, finetune, extrapolate
(eval-extrapolate), report, generate, runs. ``posexp/cli/app.py`` parses; these do the work.

Importing this package registers the config resolvers and quiets one Hydra warning: a sweep's
worker processes import a command function without going through ``posexp.config.paths.config_dir()``
or the CLI, yet compose and resolve the job's config.
"""

import warnings

from posexp.config.resolvers import register_resolvers

SCHEMA_MATCH_WARNING = r"(?s).*is validated against ConfigStore schema with the same name"


def quiet_schema_match_warning() -> None:
    """Hide Hydra's notice that a launcher config completes its plugin's schema.

    configs/hydra/launcher/ completes the plugins' own schemas under their names on purpose
    (`hydra/launcher=joblib` keeps working), and Hydra says so, in every process that composes a
    sweep's config (the CLI's and each joblib worker's), on every sweep."""
    warnings.filterwarnings("ignore", SCHEMA_MATCH_WARNING, UserWarning)


register_resolvers()
quiet_schema_match_warning()
