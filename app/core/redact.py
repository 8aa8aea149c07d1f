"""How the service shows a URL anywhere (logs, API replies, metric labels, the console): one rule set.

A configured URL can carry a secret in three places: the user info (``mqtts://user:pass@``),
the path (a webhook's ``/hooks/<token>``) and the query string (``?token=``). So:

* a delivery target (a webhook, the MQTT broker, any other URL) is shown as scheme, host
  and port only: ``target("https://u:p@hooks.example/x/T0KEN?sig=1")`` is ``https://hooks.example``;
* a database DSN keeps what identifies the database and masks the password:
  ``dsn("postgresql+psycopg://app:pw@db:5432/events?sslkey=/k")`` is
  ``postgresql+psycopg://app:***@db:5432/events`` (the query string is dropped: libpq
  options such as ``password=`` can sit there);
* free text that may quote one (an exception's message, a driver's error) goes through
  ``scrub``: every URL in it becomes its ``target`` form and ``password=...`` pairs are masked.

Everything that names a URL calls one of these three; nothing formats a configured URL itself.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

MASK = "***"
UNPARSEABLE = "<unparseable URL>"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_USERINFO = re.compile(r"//([^/@:]*):[^@]*@")  # //user:password@
_TRAILING = ".,;:!?)]}"  # punctuation that ends a sentence, not the URL
_PASSWORD_PAIR = re.compile(r"(?i)\b(password|passwd|pwd|secret|token|api_key|apikey)(\s*[=:]\s*)('[^']*'|\"[^\"]*\"|[^\s&;,]+)")


def _host_port(parts) -> str:
    host = parts.hostname or "?"
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def target(url: str) -> str:
    """A URL as scheme, host and port: never its user info, path or query string."""
    try:
        parts = urlsplit(str(url).strip())
    except ValueError:
        return UNPARSEABLE
    if not parts.scheme:
        return UNPARSEABLE
    return f"{parts.scheme}://{_host_port(parts)}"


def dsn(url: str) -> str:
    """A database URL with its password masked and its query string dropped; a file path
    (``sqlite:///...``) is kept, since it names the database and holds no secret."""
    head = str(url).strip().split("?", 1)[0].split("#", 1)[0]
    if "://" not in head:
        return UNPARSEABLE
    return _USERINFO.sub(lambda m: f"//{m.group(1)}:{MASK}@", head, count=1)


def scrub(text: str) -> str:
    """Free text with every URL in it reduced to its ``target`` and ``password=...``-style
    pairs masked (libpq's ``key=value`` connection strings, query strings quoted in errors)."""
    text = str(text)
    if "://" in text:
        def repl(m: re.Match[str]) -> str:
            url = m.group(0)
            tail = ""
            while url and url[-1] in _TRAILING:
                url, tail = url[:-1], url[-1] + tail
            return target(url) + tail

        text = _URL.sub(repl, text)
    if "=" in text or ":" in text:
        text = _PASSWORD_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return text
