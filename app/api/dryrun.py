"""``POST /admin/reload?dry_run=true``: the site file in the request body, validated and replayed.

The body is read here, not by FastAPI, because it is YAML (or JSON) text, capped while it
streams at the size a site file may have (``MAX_SITE_FILE_BYTES``, below the server-wide
``max_body_bytes`` that the middleware enforces) and decoded as UTF-8. Parsing, validating
and replaying it happen in a low-priority process of its own, one dry run at a time per
replica (app/rules/service/dryrun.py): a second one gets 429 with ``Retry-After`` and the
detection path keeps its CPU.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from fastapi import Request

from app.api.bodies import read_capped
from app.api.schemas import DryRunResult
from app.core.errors import UnsupportedMediaType
from app.core.timeutil import shift_clamped, utcnow
from app.rules.port import SiteAdmin
from app.rules.site.loader import MAX_SITE_FILE_BYTES, SiteConfigError

MAX_SITE_BYTES = MAX_SITE_FILE_BYTES
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")
JSON_TYPES = ("application/json",)
SOURCE = "<request body>"
OPENAPI_BODY = {"requestBody": {"required": False, "description": "dry_run=true only: the site file to try",
                                "content": {t: {"schema": {"type": "string"}} for t in YAML_TYPES}
                                | {"application/json": {"schema": {"type": "object"}}}}}


async def read_site(request: Request) -> tuple[str, bool]:
    """(text, is JSON) of the body: 415 for another media type, 413 over the cap, 422
    ``invalid_site_config`` when it is not UTF-8."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in YAML_TYPES + JSON_TYPES:
        raise UnsupportedMediaType(f"send the site file as application/yaml, text/yaml, text/plain or application/json "
                                   f"(got {media or 'no Content-Type'})")
    body = await read_capped(request, MAX_SITE_BYTES, "a site file")
    try:
        return body.decode("utf-8"), media in JSON_TYPES
    except UnicodeDecodeError as exc:
        raise SiteConfigError(SOURCE, [f"the body is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset "
                                       f"{exc.start})"]) from None


def window(since: dt.datetime | None, until: dt.datetime | None, window_h: float) -> tuple[dt.datetime, dt.datetime]:
    """[since, until): ``until`` defaults to now, ``since`` to ``window_h`` hours before it."""
    until = until or utcnow()
    return since or shift_clamped(until, -dt.timedelta(hours=window_h)), until


async def dry_run(rules: SiteAdmin, request: Request, since: dt.datetime | None, until: dt.datetime | None,
                  window_h: float) -> DryRunResult:
    text, as_json = await read_site(request)
    start, end = window(since, until, window_h)
    comparison = await asyncio.to_thread(rules.dry_run, text, as_json, start, end, SOURCE)  # waits on the worker
    return DryRunResult(**comparison)
