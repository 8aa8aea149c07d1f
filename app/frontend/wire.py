"""The front end <-> owner framing: an 8-byte prefix (header length, body length, big-endian),
a JSON header, then raw bytes.

msgpack is not a dependency, and a frame's JPEG must not be base64'd into JSON: the bytes
travel as they are, only the small metadata is JSON.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

PREFIX = struct.Struct(">II")
MAX_HEADER = 1 << 20  # a request head (headers, path) is far smaller: anything larger is a broken peer


async def write_message(writer: asyncio.StreamWriter, header: dict[str, Any], body: bytes = b"") -> None:
    """One message; waits for the socket's buffer to drain (back-pressure on a slow peer)."""
    head = json.dumps(header, separators=(",", ":")).encode()
    writer.write(PREFIX.pack(len(head), len(body)) + head)
    if body:
        writer.write(body)
    await writer.drain()


async def read_message(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes]:
    """The next message; ``asyncio.IncompleteReadError`` at the end of the stream."""
    head_len, body_len = PREFIX.unpack(await reader.readexactly(PREFIX.size))
    if head_len > MAX_HEADER:
        raise ValueError(f"front-end message header of {head_len} bytes")
    header = json.loads(await reader.readexactly(head_len))
    body = await reader.readexactly(body_len) if body_len else b""
    return header, body
