"""Logging setup: one line per request, text or JSON; image bytes and API keys never logged."""

from __future__ import annotations

import json
import logging
import re
import sys
import time

_EXTRA_KEYS = ("route", "method", "status", "latency_ms", "camera_id", "detections", "key", "client")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for key in _EXTRA_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_control(text: str) -> str:
    """Control characters as visible escapes: a request path with %0a must not start a
    forged line in a text log (JSON logs escape them already)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


class TextFormatter(logging.Formatter):
    """One line per record: string arguments (request data) have control characters escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, str) for a in args):
            record = logging.makeLogRecord(record.__dict__)
            record.args = tuple(escape_control(a) if isinstance(a, str) else a for a in args)
        line = super().format(record)
        if getattr(record, "camera_id", None) is not None or getattr(record, "detections", None) is not None:
            camera = getattr(record, "camera_id", None)
            camera = escape_control(camera) if isinstance(camera, str) else camera
            line += f" camera={camera} detections={getattr(record, 'detections', None)}"
        client = getattr(record, "client", None)
        if client is not None:  # the access log: who, from where (a key's name, never a key)
            key = getattr(record, "key", None) or "-"
            line += f" client={escape_control(str(client))} key={escape_control(str(key))}"
        return line


# uvicorn's access log is replaced by ours; ultralytics is chatty; httpx and httpcore log every
# request's full URL at INFO, which for a webhook is its user info and path token: a secret.
# Alembic logs its plugins and every migration's multi-line docstring at INFO: the store logs one
# line instead ("event store migrated from X to Y", app/rules/store/migrate.py).
QUIET_LOGGERS = ("uvicorn.access", "ultralytics", "httpx", "httpcore", "alembic")


def quiet_third_party_loggers() -> None:
    """Libraries that log per request (and may name a secret URL) speak only at WARNING."""
    for noisy in QUIET_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def configure_logging(log_format: str = "text", level: str = "INFO") -> None:
    """One handler on stderr, text or JSON lines, at ``level`` (uvicorn's own logs go through it)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet_third_party_loggers()
    logging.getLogger("uvicorn.error").handlers[:] = []
    logging.getLogger("uvicorn.error").propagate = True
