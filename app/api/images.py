"""Getting image bytes out of a request: multipart field(s) or a raw ``image/*`` body.

The client's Content-Type only routes the parsing; the decoder sniffs the bytes. URLs are
never accepted: the server fetches nothing on a client's behalf. Reading (``read_upload``)
and checking what was sent (``require_images``) are separate steps so the DeepStack route
can check a key sent inside the form before it judges the form.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException

from app.core.errors import InvalidImage, InvalidParameter, PayloadTooLarge, ServiceError, UnsupportedMediaType, shorten
from app.core.framequery import RAW_TYPES

MAX_FORM_FIELDS = 32


@dataclass
class Upload:
    filename: str | None
    data: bytes


@dataclass
class Parsed:
    images: list[Upload]
    fields: dict[str, str]
    text_images: list[str] = field(default_factory=list)  # image fields sent as text, not files


def too_many_images(max_images: int) -> ServiceError:
    if max_images == 1:
        return InvalidParameter("this route takes one image (multipart field 'image'); send several images "
                                "to POST /detect/batch", code="too_many_images")
    return PayloadTooLarge(f"too many images: the limit is {max_images} per request", code="too_many_images")


async def read_upload(request: Request, fields: tuple[str, ...], max_files: int, max_part_bytes: int) -> Parsed:
    """Images from the multipart ``fields`` or from a raw body, and the other text fields."""
    content_type = request.headers.get("content-type", "").lower()
    if content_type.startswith("multipart/form-data"):
        return await _read_multipart(request, fields, max_files, max_part_bytes)
    if content_type.startswith(RAW_TYPES):
        data = await request.body()
        if not data:
            raise InvalidImage("empty request body")
        return Parsed([Upload(None, data)], {})
    if not content_type:
        raise UnsupportedMediaType("missing Content-Type: send multipart/form-data with an 'image' field, or image/*")
    raise UnsupportedMediaType(
        f"unsupported Content-Type {shorten(content_type.split(';')[0])}: send multipart/form-data with an "
        "'image' field, or the image bytes with Content-Type image/*"
    )


def require_images(parsed: Parsed, fields: tuple[str, ...], max_images: int) -> Parsed:
    """At least one image, at most ``max_images``, and no image field sent as text."""
    if parsed.text_images:
        raise InvalidParameter(f"multipart field {shorten(parsed.text_images[0])} must be a file upload, "
                               "not a text value")
    if not parsed.images:
        raise InvalidParameter(f"multipart field {fields[0]!r} (an image file) is required", code="missing_image")
    if len(parsed.images) > max_images:
        raise too_many_images(max_images)
    return parsed


async def parse_upload(request: Request, fields: tuple[str, ...], max_images: int, max_part_bytes: int) -> Parsed:
    """Read and check in one step (routes whose key never travels in the body)."""
    return require_images(await read_upload(request, fields, max_images, max_part_bytes), fields, max_images)


async def _read_multipart(request: Request, fields: tuple[str, ...], max_files: int, max_part_bytes: int) -> Parsed:
    try:
        form = await request.form(max_files=max_files, max_fields=MAX_FORM_FIELDS, max_part_size=max_part_bytes)
    except (MultiPartException, StarletteHTTPException) as exc:
        message = getattr(exc, "message", None) or getattr(exc, "detail", None) or str(exc)
        if "too many files" in str(message).lower():
            raise too_many_images(max_files) from exc
        raise InvalidParameter(f"malformed multipart body: {message}", code="invalid_multipart") from exc
    parsed = Parsed([], {})
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            if key in fields:
                parsed.images.append(Upload(value.filename, await value.read()))
            await value.close()
        elif key in fields:
            parsed.text_images.append(key)
        else:
            parsed.fields[key] = str(value)
    return parsed
