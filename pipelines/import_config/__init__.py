"""`python -m pipelines import-config train_config.json`: an EmbodiChain config as params.yaml.

EmbodiChain configures a run with one JSON file, `{trainer, env, policy, algorithm: {name,
cfg}}`, its env id in an `env` section or in the file that `trainer.gym_config` names. Every
key of that file ends up in one of two lists, printed and written as the output's header:
imported (with the conversion where units or meanings differ) or not imported (with why).
Algorithm keys the file leaves out take EmbodiChain's defaults, as they did there; every
other value is this project's default. The result is validated by
`pipelines.params.parse_params` and written whole (every section, as DVC's stages track them).

A config is often a colleague's, so it is data and nothing else: only values that map to
our keys reach the output, each type-checked (a string or boolean is never a number); keys
that are not imported are listed by name, never with their values; the gym config is read
only from within the config's own directory tree; the text written is read back and
validated before it replaces `-o`, which must be a new or a regular file.

Exit codes: 0 written; 2 a bad input, one `error: <file>: <key>: <what to do>` line each.
"""

from pipelines.import_config.mapping import every_iters, import_config
from pipelines.import_config.read import ConfigImportError, Imported
from pipelines.import_config.write import import_config_main, render

__all__ = [
    "ConfigImportError",
    "Imported",
    "every_iters",
    "import_config",
    "import_config_main",
    "render",
]
