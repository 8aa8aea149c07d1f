"""The whole session's logs must never hold a test secret: the watch that checks it.

``WATCH`` learns every secret the session hands the service: each ``Settings`` built in this
process (API keys, the webhook secret, the MQTT password, passwords in URLs, the ``key:``
entries of a keys file), the environment of every real server (tests/conftest.py
``start_server``), and what tests add with ``remember`` (e.g. a key made by
``campusguard keys new``). It sees every log line: a handler on the root logger (at INFO,
so the service's info lines are made and checked too) checks each record as it is emitted,
and the log file of every real server is read at the end of the session.

Each process checks its own: with pytest-xdist every worker watches its tests and servers,
and hands what it found to the controller (``workeroutput``), which fails the run
(tests/conftest.py ``pytest_sessionfinish``). A finding names the log line's place and the
secret's first characters only, so the report itself leaks nothing.
"""

from __future__ import annotations

import logging
import re
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import yaml

MIN_SECRET = 5  # shorter test keys ("k1") match ordinary text; they are not checked
# pytest's temporary folders (named after the tests: "test_a_wrong_key0", "fuzz-keyed0") appear in
# log lines as paths; they are left out of the check, or a key named like a test would match its folder
TMP_PATH = re.compile(re.escape(tempfile.gettempdir()) + r"/pytest-of-[^\s'\"]*")
SECRET_VARIABLES = ("CAMPUSGUARD_API_KEYS", "CAMPUSGUARD_WEBHOOK_SECRET", "CAMPUSGUARD_MQTT_PASSWORD")
URL_VARIABLES = ("CAMPUSGUARD_EVENTS_DB_URL", "CAMPUSGUARD_MQTT_URL")
FILE_VARIABLES = ("CAMPUSGUARD_API_KEYS_FILE",)


def key_secrets(entries: Iterable[str]) -> list[str]:
    """The secrets of ``[role:]key`` entries (the role prefix is not secret)."""
    from app.core.roles import parse_key

    return [parse_key(e.strip())[1] for e in entries if e.strip()]


def keys_file_secrets(path: str | Path) -> list[str]:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return []
    return [str(e["key"]) for e in doc or [] if isinstance(e, dict) and e.get("key")] if isinstance(doc, list) else []


class _Handler(logging.Handler):
    def __init__(self, watch: "SecretWatch") -> None:
        super().__init__(logging.NOTSET)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a broken record is not ours to judge
            return
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + repr(record.exc_info[1])
        extras = " ".join(str(v) for k, v in vars(record).items() if k in ("route", "camera_id", "key", "client"))
        self.watch.check(f"{record.name} ({record.pathname}:{record.lineno})", f"{text} {extras}")


class SecretWatch:
    def __init__(self) -> None:
        self.secrets: set[str] = set()
        self.files: list[Path] = []
        self.found: list[str] = []
        self._lock = threading.Lock()
        self.handler = _Handler(self)

    # --- learning secrets -------------------------------------------------------------------
    def remember(self, *values: str | None) -> None:
        with self._lock:
            self.secrets.update(v for v in values if v and len(v) >= MIN_SECRET)

    def learn_settings(self, settings) -> None:
        """A ``Settings`` built in this process."""
        self.remember(*key_secrets(k.get_secret_value() for k in settings.api_keys))
        self.remember(settings.webhook_secret.get_secret_value(), settings.mqtt_password.get_secret_value())
        for url in (settings.events_db_url, settings.mqtt_url):
            self.remember(*self._url_password(url))
        if settings.api_keys_file is not None:
            self.remember(*keys_file_secrets(settings.api_keys_file))

    def learn_environment(self, env: Mapping[str, str]) -> None:
        """The environment of a real server."""
        self.remember(*key_secrets(env.get("CAMPUSGUARD_API_KEYS", "").split(",")))
        self.remember(*(env.get(name) for name in SECRET_VARIABLES[1:]))
        for name in URL_VARIABLES:
            self.remember(*self._url_password(env.get(name)))
        for name in FILE_VARIABLES:
            if env.get(name):
                self.remember(*keys_file_secrets(env[name]))

    @staticmethod
    def _url_password(url: str | None) -> list[str]:
        try:
            password = urlsplit(url).password if url else None
        except ValueError:
            return []
        return [password] if password else []

    # --- checking -----------------------------------------------------------------------------
    def watch_file(self, path: Path) -> None:
        self.files.append(Path(path))

    def check(self, where: str, text: str) -> None:
        text = TMP_PATH.sub("<tmp>", text)  # pytest's folders are named after tests ("fuzz-keyed0"), not secrets
        for secret in list(self.secrets):
            if secret in text:
                with self._lock:
                    self.found.append(f"{where}: a secret starting {secret[:3]!r} ({len(secret)} characters)")

    def leaks(self) -> list[str]:
        """Every finding so far, server log files included (read now, against every secret learned)."""
        for path in self.files:
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for n, line in enumerate(lines, 1):
                self.check(f"{path.name}:{n}", line)
        self.files.clear()
        return list(dict.fromkeys(self.found))

    def install(self) -> None:
        """Watch every log record of this process, at INFO and above."""
        root = logging.getLogger()
        if self.handler not in root.handlers:
            root.addHandler(self.handler)
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)


WATCH = SecretWatch()


def watch_settings() -> None:
    """Learn the secrets of every ``Settings`` built in this process from now on."""
    from app.config import Settings

    if getattr(Settings.__init__, "_watched", False):
        return
    original = Settings.__init__

    def init(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        WATCH.learn_settings(self)

    init._watched = True  # type: ignore[attr-defined]
    Settings.__init__ = init  # type: ignore[method-assign]
