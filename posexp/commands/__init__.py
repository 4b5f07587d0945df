"""The CLI's commands, one module or subpackage each: train, finetune, extrapolate
(eval-extrapolate), report, generate, runs. ``posexp/cli.py`` parses; these do the work.

Importing this package registers the config resolvers: a sweep's worker processes import a
command function without going through ``posexp.paths.config_dir()``, yet resolve the job's config.
"""

from posexp.resolvers import register_resolvers

register_resolvers()
