"""Settings at startup: unknown CAMPUSGUARD_* names are refused with a guess at the intended one.

Apart from the model of the settings (``settings.py``) so that each stays one job: this is
what turns the environment and ``.env`` into a ``Settings`` or one ConfigError.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from pydantic import ValidationError

from app.config.settings import ENV_FILE, ENV_PREFIX, Settings
from app.core.errors import ConfigError

# --- settings hygiene ---------------------------------------------------------------------
# Variables with our prefix that are not settings but are set on purpose for other tools:
# docker compose reads the image tags from deploy/.env; the test suite reads its data paths.
FOREIGN_VARIABLES: dict[str, str] = {
    "CAMPUSGUARD_IMAGE": "image tag of the ROCm service in docker compose (deploy/.env)",
    "CAMPUSGUARD_CUDA_IMAGE": "image tag of the NVIDIA service in docker compose (deploy/.env)",
}
# the test suite's own variables (tests/conftest.py); `campusguard gateway`'s options (app/ingest/gateway.py);
# camera credentials for the site file's ${VAR} (app/core/secrets.py: the only environment names it reads)
FOREIGN_PREFIXES: tuple[str, ...] = ("CAMPUSGUARD_TEST_", "CAMPUSGUARD_GATEWAY_", "CAMPUSGUARD_CAMERA_")
# Names people plausibly guess, for which spelling distance finds the wrong setting.
GUESSES: dict[str, str] = {
    "MAX_QUEUE": "queue_size", "QUEUE": "queue_size", "QUEUE_LENGTH": "queue_size", "MAX_QUEUE_SIZE": "queue_size",
    "BATCH_SIZE": "max_batch_size", "BATCH": "max_batch_size", "MODEL": "weights", "MODEL_PATH": "weights",
    "API_KEY": "api_keys", "KEYS": "api_keys", "KEYS_FILE": "api_keys_file", "API_KEY_FILE": "api_keys_file",
    "GPU": "device", "TIMEOUT": "request_timeout_s",
    "FP16": "precision", "HALF": "precision", "INT8": "precision", "CONFIDENCE": "conf",
    "WORKERS": "preprocess_workers", "SITE": "site_config",
}


# Settings that were replaced: naming the old one stops startup with the new one's name.
RENAMED: dict[str, str] = {
    "CAMPUSGUARD_HALF": "set CAMPUSGUARD_PRECISION=fp16 instead (CAMPUSGUARD_HALF=false is the default, fp32)",
    "CAMPUSGUARD_MIGRAPHX_FP16": "set CAMPUSGUARD_PRECISION=fp16 instead (MIGraphX then compiles the graph in fp16)",
}


def setting_names() -> set[str]:
    """Every environment name that is a setting, e.g. CAMPUSGUARD_QUEUE_SIZE."""
    return {ENV_PREFIX + name.upper() for name in Settings.model_fields}


def unknown_variables(names: Iterable[str]) -> list[str]:
    """One message per CAMPUSGUARD_* name that is neither a setting nor allowed on purpose."""
    known = setting_names()
    problems = []
    for name in sorted(set(names)):
        upper = name.upper()
        if (not upper.startswith(ENV_PREFIX) or upper in known or upper in FOREIGN_VARIABLES
                or upper.startswith(FOREIGN_PREFIXES)):
            continue
        if upper in RENAMED:
            problems.append(f"{name} was replaced: {RENAMED[upper]}")
            continue
        rest = upper.removeprefix(ENV_PREFIX)  # compare without the shared prefix, which every name matches
        guess = GUESSES.get(rest)
        close = [guess.upper()] if guess else difflib.get_close_matches(
            rest, [k.removeprefix(ENV_PREFIX) for k in known], n=1, cutoff=0.6)
        hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else " (the README lists every setting)"
        problems.append(f"{name} is not a setting{hint}")
    return problems


def load_settings(environ: Mapping[str, str] | None = None, env_file: Path | None = ENV_FILE,
                  **overrides: Any) -> Settings:
    """Settings for a command at startup: unknown CAMPUSGUARD_* names in the environment or
    ``.env`` and invalid values both become one ConfigError (the CLI exits 2 with it), because
    a misspelt setting silently left at its default is a misconfiguration nobody sees."""
    environ = os.environ if environ is None else environ
    names = list(environ)
    if env_file is not None and env_file.is_file():
        names += [k for k in dotenv_values(env_file) if k]
    problems = unknown_variables(names)
    if problems:
        raise ConfigError("; ".join(problems))
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        details = "; ".join((f"{ENV_PREFIX}{'_'.join(map(str, e['loc'])).upper()}: " if e["loc"] else "")
                            + e["msg"] for e in exc.errors())
        raise ConfigError(f"invalid settings: {details}") from None
