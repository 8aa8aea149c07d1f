"""The service's settings: their model (``settings``, with how some values are read in
``values``) and reading them at startup (``loading``).

Only the composition root and the commands above it import this package (import-linter
contract in pyproject.toml): components below take small option objects, never ``Settings``.
"""

from app.config.loading import ENV_FILE, ENV_PREFIX, FOREIGN_VARIABLES, load_settings, setting_names, unknown_variables
from app.config.settings import (
                                DEFAULT_DATA_DIR,
                                DEFAULT_WEIGHTS,
                                FILE_SETTINGS,
                                ONNX_PROVIDER_ALIASES,
                                Settings,
                                normalize_device,
)

__all__ = ["DEFAULT_DATA_DIR", "DEFAULT_WEIGHTS", "ENV_FILE", "ENV_PREFIX", "FILE_SETTINGS", "FOREIGN_VARIABLES",
           "ONNX_PROVIDER_ALIASES", "Settings", "load_settings", "normalize_device", "setting_names",
           "unknown_variables"]
