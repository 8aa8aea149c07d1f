"""URLs as people see them: user info and query strings never leave the process.

Camera URLs carry passwords (``rtsp://user:pass@host/...``) and tokens (``?token=...``);
ffmpeg repeats the URL it was given in its error lines. Everything shown to a person or a
machine (logs, states, API answers, metric labels) goes through ``redact_url`` or
``redact_text``, so there is one rule: ``scheme://***@host:port/path``.

The split is deliberately paranoid: everything before the LAST ``@`` of the authority is
user info, so a password with an unescaped ``/``, ``?``, ``#`` or ``@`` is hidden too (a
URL with ``@`` in its path is then shown wrongly, never leakily).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

# a URL inside free text (an ffmpeg error line): scheme://... up to whitespace or a quote
_URL_IN_TEXT = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{1,15})://[^\s'\"<>]*")
_MIN_SECRET = 3  # shorter values would blank out ordinary words


def redact_url(url: str) -> str:
    """``scheme://***@host:port/path``: the user info becomes ``***`` (shown only when there
    was some, so "no credentials" stays visible), query and fragment are dropped."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        # file:relative/path, or not a URL at all: nothing that could hold a secret but a query
        return text.split("?", 1)[0].split("#", 1)[0]
    userinfo = "@" in rest
    if userinfo:
        rest = rest[rest.rfind("@") + 1:]
    for stop in "?#":
        rest = rest.split(stop, 1)[0]
    return f"{scheme.lower()}://{'***@' if userinfo else ''}{rest}"


def url_secrets(url: str) -> list[str]:
    """The values inside ``url`` that must never be shown: the password (as written and
    percent-decoded) and query values, for scrubbing free text that repeats them."""
    found: list[str] = []
    _, sep, rest = url.strip().partition("://")
    if sep and "@" in rest:
        userinfo = rest[:rest.rfind("@")]
        password = userinfo.partition(":")[2]
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
    """Every URL in ``text`` redacted, then every known secret (and its percent-encoded
    form) replaced by ``***``: ffmpeg prints the input URL, and may print parts of it."""
    out = _URL_IN_TEXT.sub(_redact_match, text)
    for secret in sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            out = out.replace(form, "***")
    return out
