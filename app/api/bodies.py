"""Request bodies the API reads itself (a zone, a site file), capped while they stream.

The server-wide ``max_body_bytes`` (the request guard) is sized for images; these routes take
far less, so they refuse a declared ``Content-Length`` over their own cap at once and stop a
chunked body the moment it crosses it, before it is buffered or parsed.
"""

from __future__ import annotations

from fastapi import Request

from app.core.errors import PayloadTooLarge


async def read_capped(request: Request, limit: int, what: str) -> bytes:
    """The whole body, or PayloadTooLarge (413) as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"{what} is at most {limit} bytes (Content-Length: {declared})")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"{what} is at most {limit} bytes")
    return bytes(body)
