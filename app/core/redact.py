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
  ``scrub``: every URL in it becomes its ``target`` form and ``password=...`` pairs are masked;
* a camera's source (``rtsp://user:pass@cam:554/Streaming/Channels/102?token=``), whose path
  says which stream it is, is shown as ``rtsp://***@cam:554/Streaming/Channels/102``
  (``redact_url``: user info and query never shown), and ffmpeg's error lines, which repeat
  the URL and parts of it, go through ``redact_text`` with the source's ``url_secrets``.
  Everything before the LAST ``@`` of the authority counts as user info, so a password with
  an unescaped ``/``, ``?``, ``#`` or ``@`` is hidden too. ffmpeg reads ``rtsp:/user:pw@host``
  and ``rtsp:user:pw@host`` as ``rtsp://user:pw@host`` (it skips up to two ``/`` after the
  scheme), so these forms are masked the same way (and shown in the ``scheme://`` form); the
  site file refuses them anyway (app/rules/site/source.py).

Everything that names a URL calls one of these three; nothing formats a configured URL itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

MASK = "***"
UNPARSEABLE = "<unparseable URL>"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_USERINFO = re.compile(r"//([^/@:]*):[^@]*@")  # //user:password@
_TRAILING = ".,;:!?)]}"  # punctuation that ends a sentence, not the URL
_PASSWORD_PAIR = re.compile(r"(?i)\b(password|passwd|pwd|secret|token|api_key|apikey)"
                            r"(\s*[=:]\s*)('[^']*'|\"[^\"]*\"|[^\s&;,]+)")


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


# --- camera sources (app/ingest) --------------------------------------------------------------
# a URL inside free text (an ffmpeg error line): scheme://... up to whitespace or a quote
_URL_IN_TEXT = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{1,15})://[^\s'\"<>]*")
_MIN_SECRET = 3  # shorter values would blank out ordinary words


# scheme:, scheme:/ or scheme:// (what ffmpeg's av_url_split skips before the authority)
_SCHEME_HEAD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(/{0,2})")


def _split_scheme(text: str) -> tuple[str, str, str] | None:
    """(scheme, slashes, rest) of a URL in any form ffmpeg accepts; None without a scheme."""
    match = _SCHEME_HEAD.match(text)
    if match is None:
        return None
    return match.group(1), match.group(2), text[match.end():]


def redact_url(url: str) -> str:
    """``scheme://***@host:port/path``: the user info becomes ``***`` (shown only when there
    was some, so "no credentials" stays visible), query and fragment are dropped. A URL
    written ``scheme:/user:pw@host`` or ``scheme:user:pw@host`` (ffmpeg reads both as
    ``scheme://``) is masked too; ``file:relative/path`` is shown as written."""
    text = url.strip()
    parts = _split_scheme(text)
    if parts is None or (parts[1] != "//" and (parts[0].lower() == "file" or "@" not in parts[2])):
        # file:relative/path, a URL without user info, or not a URL at all: nothing that could
        # hold a secret but a query
        return text.split("?", 1)[0].split("#", 1)[0]
    scheme, _, rest = parts
    userinfo = "@" in rest
    if userinfo:
        rest = rest[rest.rfind("@") + 1:]
    for stop in "?#":
        rest = rest.split(stop, 1)[0]
    return f"{scheme.lower()}://{'***@' if userinfo else ''}{rest}"


def url_secrets(url: str) -> list[str]:
    """The values inside ``url`` that must never be shown: the user info's password (as
    written and percent-decoded, in every form ffmpeg reads) and query values, for scrubbing
    free text that repeats them."""
    found: list[str] = []
    parts = _split_scheme(url.strip())
    if parts is not None and "@" in parts[2]:
        userinfo = parts[2][:parts[2].rfind("@")]
        password = userinfo.partition(":")[2] or userinfo  # no ":": the user info is a token
        found += [password, unquote(password)]
    with_query = urlsplit(url.strip())
    found += [value for _, value in parse_qsl(with_query.query, keep_blank_values=False)]
    return sorted({s for s in found if len(s) >= _MIN_SECRET}, key=len, reverse=True)


def _redact_match(match: re.Match[str]) -> str:
    """A URL found in text, redacted; punctuation after it (``url: reason``) is kept."""
    token = match.group(0)
    core = token.rstrip(":;,.)]")
    return redact_url(core) + token[len(core):]


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Every URL in ``text`` redacted, ``password=...``-style pairs masked, then every known
    secret (and its percent-encoded form) replaced by ``***``: ffmpeg prints the input URL,
    and may print parts of it; a gateway's ``last_error`` may quote a camera's reply."""
    out = _URL_IN_TEXT.sub(_redact_match, text)
    if "=" in out or ":" in out:
        out = _PASSWORD_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", out)
    for secret in sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            out = out.replace(form, "***")
    return out
