"""Conditional GET for JSON documents the console polls (ETag / If-None-Match -> 304).

A page that refreshes every few seconds sends back the ETag it holds; when the document is
unchanged the answer is an empty 304 instead of the document again (GET /site is 386 KB at
300 cameras). The tag is computed from the bytes that would be sent (or handed in by a route
that knows a cheaper identity, such as the site file's version), so it changes exactly when
the body does.
"""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

MAX_TAGS = 32  # If-None-Match lists more than this are not looked through (a client sends one)


def body_tag(body: bytes) -> str:
    """A strong ETag of a body: the first 20 hex digits of its SHA-256, quoted."""
    return f'"{hashlib.sha256(body).hexdigest()[:20]}"'


def matches(request: Request, tag: str) -> bool:
    """Whether the request's If-None-Match names ``tag`` (weak comparison, RFC 9110 13.1.2; ``*``
    matches any current document). A malformed header simply does not match."""
    header = request.headers.get("if-none-match")
    if not header:
        return False
    wanted = tag.removeprefix("W/")
    for part in header.split(",")[:MAX_TAGS]:
        part = part.strip()
        if part == "*" or part.removeprefix("W/") == wanted:
            return True
    return False


def not_modified(tag: str) -> Response:
    return Response(status_code=304, headers={"ETag": tag, "Cache-Control": "no-cache"})


def conditional_json(request: Request, content: Any, tag: str | None = None) -> Response:
    """``content`` as JSON with its ETag, or 304 when the client already holds it.
    ``Cache-Control: no-cache``: a browser may keep it but must ask again every time."""
    if tag is not None and matches(request, tag):
        return not_modified(tag)
    response = JSONResponse(content)
    tag = tag or body_tag(bytes(response.body))
    if matches(request, tag):
        return not_modified(tag)
    response.headers["ETag"] = tag
    response.headers["Cache-Control"] = "no-cache"
    return response
