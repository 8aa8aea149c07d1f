"""Secrets from files: ``<SETTING>_FILE`` variables and ``${VAR}`` references.

Why files: a value in an environment variable shows in ``docker inspect``, in
``/proc/<pid>/environ`` and in every child process; Docker and Kubernetes secrets are files
mounted read-only (``/run/secrets/...``). So each secret-bearing setting has a ``_FILE``
twin that names a file holding the value (``CAMPUSGUARD_EVENTS_DB_URL_FILE``, ...), and a
``${VAR}`` in the site file (a camera URL's credentials) is read from
``CAMPUSGUARD_SECRETS_DIR/VAR`` or, failing that, from the environment variable ``VAR`` when
its name starts with ``CAMPUSGUARD_CAMERA_``. Only names meant for camera credentials: the
site file is edited by people who must not read the service's own settings
(``${CAMPUSGUARD_API_KEYS}`` would show the admin key in a camera's URL), nor anything else
of its environment.

Every error names the variable or the file, never the value: nothing here ever puts a
secret into a message, and so into a log line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from app.core.errors import ConfigError
from app.core.smallfile import FileRefused, read_regular

MAX_SECRET_BYTES = 64 * 1024  # a URL, a key or a certificate fits; a wrongly named log file does not
_VAR = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CAMERA_ENV_PREFIX = "CAMPUSGUARD_CAMERA_"  # the only environment variables a ${VAR} may read
SERVICE_PREFIX = "CAMPUSGUARD_"  # the service's own settings: never a ${VAR}, not even from the secrets dir


class SecretError(ConfigError):
    """A secret could not be read (the message names the variable or file, never a value)."""

    code = "secret_error"


def read_secret_file(path: str | os.PathLike[str], what: str) -> str:
    """The content of a secret file with one trailing newline removed (``echo x > file``
    writes one). ``what`` names the setting in the error (``CAMPUSGUARD_WEBHOOK_SECRET_FILE``).
    Only a regular file of at most MAX_SECRET_BYTES is read (app/core/smallfile.py)."""
    path = Path(path)
    try:  # a regular file only, its size checked first: /dev/zero or a FIFO must not hang or fill memory
        data, _ = read_regular(path, MAX_SECRET_BYTES)
    except FileRefused as exc:
        raise SecretError(f"{what}: {path} {exc.reason}") from None
    except OSError as exc:
        raise SecretError(f"{what}: cannot read {path}: {exc.strerror or exc.__class__.__name__}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"{what}: {path} is not UTF-8 text") from None
    text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    if not text.strip():
        raise SecretError(f"{what}: {path} is empty")
    if "\n" in text or "\0" in text:
        raise SecretError(f"{what}: {path} holds more than one line (one value per file)")
    return text


def resolve_file_settings(data: dict, names: tuple[str, ...], prefix: str) -> dict:
    """For each setting ``name`` whose ``name_file`` is given, put the file's content in
    ``name`` (a settings validator's input). Giving both is refused: which one wins would be
    a guess."""
    for name in names:
        path = data.get(f"{name}_file")
        if path is None or str(path) == "":
            continue
        if data.get(name) not in (None, ""):
            raise SecretError(f"{prefix}{name.upper()} and {prefix}{name.upper()}_FILE are both set; set one")
        data[name] = read_secret_file(str(path), f"{prefix}{name.upper()}_FILE")
    return data


def check_var_name(name: str) -> None:
    """SecretError unless ``${name}`` may be filled in: letters, digits and ``_`` (so it cannot
    reach outside the secrets directory), and not one of the service's own settings
    (``CAMPUSGUARD_*`` other than ``CAMPUSGUARD_CAMERA_*``)."""
    if not _NAME.fullmatch(name):
        raise SecretError(f"${{{name[:64]}}} is not a variable name (letters, digits and _, not first a digit)")
    upper = name.upper()
    if upper.startswith(SERVICE_PREFIX) and not upper.startswith(CAMERA_ENV_PREFIX):
        raise SecretError(f"${{{name[:64]}}} names one of the service's own settings: a ${{VAR}} is a file of "
                          f"CAMPUSGUARD_SECRETS_DIR or an environment variable named {CAMERA_ENV_PREFIX}*")


def resolve_vars(text: str, environ: Mapping[str, str], secrets_dir: str | os.PathLike[str] | None,
                 encode: Callable[[int, str], str] | None = None) -> str:
    """``text`` with every ``${NAME}`` replaced: the file ``secrets_dir/NAME`` when it exists,
    else ``environ[NAME]`` when NAME starts with ``CAMPUSGUARD_CAMERA_``; anything else is a
    SecretError naming NAME (and never a value).

    For the site file's credentials (camera source URLs): ``rtsp://${GATE_USER}:${GATE_PW}@10.0.0.5/stream``.
    ``$${`` stands for a literal ``${``. Names are ``[A-Za-z_][A-Za-z0-9_]*``, so a reference
    cannot reach outside ``secrets_dir``, and never a setting of the service (``check_var_name``).
    ``encode(position, value)``, when given, turns each value into what is inserted at that
    position of ``text`` (a URL's user info percent-encodes a password, app/ingest/source.py).
    """
    directory = Path(secrets_dir) if secrets_dir else None
    parts: list[str] = []
    pos = 0
    for match in _VAR.finditer(text):
        start = match.start()
        if start > 0 and text[start - 1] == "$":  # $${ -> a literal ${
            parts.append(text[pos:start - 1] + match.group(0))
            pos = match.end()
            continue
        name = match.group(1)
        check_var_name(name)
        parts.append(text[pos:start])
        value = _lookup(name, environ, directory)
        parts.append(encode(start, value) if encode is not None else value)
        pos = match.end()
    parts.append(text[pos:])
    return "".join(parts)


def _lookup(name: str, environ: Mapping[str, str], directory: Path | None) -> str:
    if directory is not None and (directory / name).is_file():
        return read_secret_file(directory / name, f"${{{name}}}")
    from_env = name.startswith(CAMERA_ENV_PREFIX)
    if from_env and name in environ:
        return environ[name]
    where = f"no file {directory / name}" if directory is not None else "no CAMPUSGUARD_SECRETS_DIR set"
    env = f"no environment variable {name}" if from_env else \
        f"the environment fills only names that start with {CAMERA_ENV_PREFIX}"
    raise SecretError(f"${{{name}}} is not defined: {where} and {env}")
