"""Getting image bytes out of a request: multipart field(s) or a raw ``image/*`` body.

The client's Content-Type only routes the parsing; the decoder sniffs the bytes. URLs are
never accepted: the server fetches nothing on a client's behalf.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException

from app.errors import InvalidImage, InvalidParameter, PayloadTooLarge, UnsupportedMediaType

RAW_TYPES = ("image/", "application/octet-stream")


@dataclass
class Upload:
    filename: str | None
    data: bytes


@dataclass
class Parsed:
    images: list[Upload]
    fields: dict[str, str]


async def parse_upload(request: Request, fields: tuple[str, ...], max_images: int) -> Parsed:
    """Images from the multipart ``fields`` (first name wins) or from a raw body."""
    content_type = request.headers.get("content-type", "").lower()
    if content_type.startswith("multipart/form-data"):
        return await _parse_multipart(request, fields, max_images)
    if content_type.startswith(RAW_TYPES):
        data = await request.body()
        if not data:
            raise InvalidImage("empty request body")
        return Parsed([Upload(None, data)], {})
    if not content_type:
        raise UnsupportedMediaType("missing Content-Type: send multipart/form-data with an 'image' field, or image/*")
    raise UnsupportedMediaType(
        f"unsupported Content-Type {content_type.split(';')[0]!r}: send multipart/form-data with an "
        "'image' field, or the image bytes with Content-Type image/*"
    )


async def _parse_multipart(request: Request, fields: tuple[str, ...], max_images: int) -> Parsed:
    settings = request.app.state.settings
    try:
        form = await request.form(max_files=max_images, max_fields=32, max_part_size=settings.max_body_bytes)
    except (MultiPartException, StarletteHTTPException) as exc:
        message = getattr(exc, "message", None) or getattr(exc, "detail", None) or str(exc)
        if "too many files" in str(message).lower():
            raise PayloadTooLarge(f"too many images: the limit is {max_images} per request",
                                  code="too_many_images") from exc
        raise InvalidParameter(f"malformed multipart body: {message}", code="invalid_multipart") from exc
    images: list[Upload] = []
    values: dict[str, str] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key in fields:
                images.append(Upload(value.filename, await value.read()))
            await value.close()
        elif key in fields:
            raise InvalidParameter(f"multipart field {key!r} must be a file upload, not a text value")
        else:
            values[key] = str(value)
    if not images:
        raise InvalidParameter(f"multipart field {fields[0]!r} (an image file) is required", code="missing_image")
    if len(images) > max_images:
        raise PayloadTooLarge(f"too many images: the limit is {max_images} per request", code="too_many_images")
    return Parsed(images, values)
