"""``POST /admin/reload?dry_run=true``: the site file in the request body, validated and replayed.

The body is read here, not by FastAPI, because it is YAML (or JSON) text, checked the way
the reload checks the file: ``parse_site_text`` (``yaml.safe_load``, a cap on the values
the document expands to, the same validator). The body is capped at ``MAX_SITE_BYTES``
below the server-wide ``max_body_bytes`` that the middleware enforces: a real site file is
a few kilobytes, and pure-Python YAML parsing of megabytes would hold a thread for long.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from fastapi import Request

from app.api.bodies import read_capped
from app.api.schemas import DryRunResult
from app.core.errors import PayloadTooLarge, UnsupportedMediaType
from app.rules.site.schema import SiteConfig
from app.rules.site.loader import SiteConfigError, parse_site_text
from app.rules.port import Rules
from app.core.timeutil import shift_clamped, utcnow

MAX_SITE_BYTES = 1024 * 1024
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")
JSON_TYPES = ("application/json",)
SOURCE = "<request body>"
OPENAPI_BODY = {"requestBody": {"required": False, "description": "dry_run=true only: the site file to try",
                                "content": {t: {"schema": {"type": "string"}} for t in YAML_TYPES}
                                | {"application/json": {"schema": {"type": "object"}}}}}


async def read_site(request: Request) -> SiteConfig:
    """The body as a validated site file: 415 for another media type, 413 over the cap,
    422 ``invalid_site_config`` listing every error (syntax, encoding, size, content)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in YAML_TYPES + JSON_TYPES:
        raise UnsupportedMediaType(f"send the site file as application/yaml, text/yaml, text/plain or application/json "
                                   f"(got {media or 'no Content-Type'})")
    body = await read_capped(request, MAX_SITE_BYTES, "a site file")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SiteConfigError(SOURCE, [f"the body is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset "
                                       f"{exc.start})"]) from None
    return await asyncio.to_thread(parse_site_text, text, SOURCE, as_json=media in JSON_TYPES)


def window(since: dt.datetime | None, until: dt.datetime | None, window_h: float) -> tuple[dt.datetime, dt.datetime]:
    """[since, until): ``until`` defaults to now, ``since`` to ``window_h`` hours before it."""
    until = until or utcnow()
    return since or shift_clamped(until, -dt.timedelta(hours=window_h)), until


async def dry_run(rules: Rules, request: Request, since: dt.datetime | None, until: dt.datetime | None,
                  window_h: float) -> DryRunResult:
    site = await read_site(request)
    start, end = window(since, until, window_h)
    comparison = await asyncio.to_thread(rules.replay, site, start, end)  # serving goes on meanwhile
    return DryRunResult(**comparison.to_dict())
