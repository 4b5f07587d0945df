"""The tasks behind the CLI's commands.

Importing this package registers the config resolvers: a sweep's worker processes import a task
function without going through ``posexp.paths.config_dir()``, yet resolve the job's config.
"""

from posexp.resolvers import register_resolvers

register_resolvers()
