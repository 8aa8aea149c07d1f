"""The site file for the console: read it, its schema, and edit one zone at a time.

Edits are validated by the same validator as the site file, written atomically with a backup
and reloaded (app/rules/site/writer.py, RulesService.put_zone); the running config stays in
force when anything is wrong.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import Response

from app.api.bodies import read_capped
from app.api.conditional import conditional_json
from app.api.console_schemas import SiteDocument, ZoneSaved
from app.api.deps import Admin, Read, RecorderDep, SiteAdminDep
from app.api.schemas import ErrorBody, error_responses
from app.core.audit import summarize
from app.core.errors import InvalidParameter
from app.rules.port import SiteAdmin
from app.rules.site.schema import Zone

router = APIRouter(tags=["console"], responses=error_responses(401, 403, 429))
MAX_ZONE_BYTES = 256 * 1024  # a zone of 1,000-point polygons fits; counted while the body streams
EDIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "`unknown_camera`, `unknown_zone` (delete), `rules_disabled`"},
    409: {"model": ErrorBody, "description": "`site_read_only`: the file or its directory is not writable"},
    412: {"model": ErrorBody, "description": "`site_changed`: If-Match names an older version"},
    413: {"model": ErrorBody, "description": "`payload_too_large`"},
    422: {"model": ErrorBody, "description": "`invalid_site_config`: `detail` is `[{field, message}]`, `field` a "
                                             "dotted path relative to the zone (`\"\"`: not inside it); nothing is "
                                             "written, the running config stays. `invalid_parameter`: not JSON"},
}
IfMatch = Annotated[str | None, Header(description="The version from GET /site: 412 if the file changed since",
                                       max_length=200)]
ZONE_BODY = {"requestBody": {"required": True, "description": (
    f"One zone as in the site file (at most {MAX_ZONE_BYTES} bytes): name, kind, polygon ([[x, y], ...] "
    "normalized 0..1, at most 1,000 points), rules. JSON Schema: GET /site/schema"),
    "content": {"application/json": {"schema": {"type": "object"}, "example": {
        "name": "gate", "kind": "restricted", "polygon": [[0.1, 0.5], [0.6, 0.5], [0.6, 0.9]],
        "rules": [{"type": "intrusion", "classes": ["person"]}]}}}}}


class _BigInt(ValueError):
    pass


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 4300:  # int() would refuse it with a ValueError about sys settings
        raise _BigInt(text)
    return int(text)


def zone_json(body: bytes) -> dict[str, Any]:
    """The body as one JSON object. Parsed here rather than by FastAPI so that every failure is a
    clear 422: not JSON, nested too deeply, an integer of more than 4,300 digits. NaN and
    Infinity parse, and the writer refuses them with the field they are in."""
    try:
        value = json.loads(body, parse_int=_int)
    except _BigInt:
        raise InvalidParameter("the body holds an integer of more than 4300 digits") from None
    except RecursionError:
        raise InvalidParameter("the body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise InvalidParameter(f"the body is not JSON: {exc}"[:300]) from None
    if not isinstance(value, dict):
        raise InvalidParameter(f"send one zone as a JSON object, not a {type(value).__name__}")
    return value


@router.get("/site", response_model=SiteDocument, summary="The running site config and its version",
            dependencies=[Read], responses={304: {"description": "`If-None-Match` names the current ETag"},
                                            **error_responses(404)})
def get_site(rules: SiteAdminDep, request: Request) -> Response:
    """Cameras, zones and rules as loaded, the file's ``version`` (also the ``ETag``) and whether
    zone edits can be written. Send the ETag back as ``If-None-Match``: 304 while nothing changed."""
    doc = SiteDocument(**rules.site_document())
    return conditional_json(request, doc.model_dump(mode="json"), site_tag(doc))


def site_tag(doc: SiteDocument) -> str:
    """The site file's version while the file on disk is the running config and can be written
    (the usual case, and what If-Match takes); a version on disk that was not loaded (refused, or
    not yet) or a read-only file add to it, so that change is never hidden behind a 304."""
    tag = doc.version
    if doc.file_version != doc.version:
        tag += f".{doc.file_version or 'unreadable'}"
    if not doc.writable:
        tag += ".ro"
    return f'"{tag}"'


@router.get("/site/schema", summary="JSON Schema of a zone (every rule type, defaults, bounds)",
            dependencies=[Read], responses=error_responses(404))
def site_schema(rules: SiteAdminDep) -> dict[str, Any]:
    """pydantic's JSON Schema of a Zone: rules are a union discriminated by ``type``, each field
    with its default, bounds and description. The console builds its rule form from it."""
    return Zone.model_json_schema()


@router.put("/admin/site/cameras/{camera_id}/zones/{zone_name}", response_model=ZoneSaved,
            summary="Create, replace or rename a zone", dependencies=[Admin], responses=EDIT_RESPONSES,
            openapi_extra=ZONE_BODY)
async def put_zone(camera_id: str, zone_name: str, rules: SiteAdminDep, request: Request, record: RecorderDep,
                   if_match: IfMatch = None) -> ZoneSaved:
    """Replace the zone ``zone_name`` of the camera (the body's ``name`` may differ: a rename),
    or add it when the camera has none by that name. The whole site is validated, written
    atomically (previous version kept as ``<file>.bak``) and reloaded; the next frame uses it.
    The body is limited to ``MAX_ZONE_BYTES`` as it streams (with or without Content-Length).
    The edit goes into the audit trail with the zone before and after."""
    zone = zone_json(await read_capped(request, MAX_ZONE_BYTES, "a zone body"))
    before = await asyncio.to_thread(zone_in_force, rules, camera_id, zone_name)
    saved = await asyncio.to_thread(rules.put_zone, camera_id, zone_name, zone, if_match)
    record("zone.put", f"{camera_id}/{zone_name}", before=summarize(before), after=summarize(saved.get("zone")))
    return ZoneSaved(**saved)


@router.delete("/admin/site/cameras/{camera_id}/zones/{zone_name}", response_model=ZoneSaved,
               summary="Delete a zone", dependencies=[Admin], responses=EDIT_RESPONSES)
async def delete_zone(camera_id: str, zone_name: str, rules: SiteAdminDep, record: RecorderDep,
                      if_match: IfMatch = None) -> ZoneSaved:
    """Remove the zone from the site file (written and reloaded as for PUT); its open events end."""
    before = await asyncio.to_thread(zone_in_force, rules, camera_id, zone_name)
    saved = await asyncio.to_thread(rules.put_zone, camera_id, zone_name, None, if_match)
    record("zone.delete", f"{camera_id}/{zone_name}", before=summarize(before))
    return ZoneSaved(**saved)


def zone_in_force(rules: SiteAdmin, camera_id: str, zone_name: str) -> dict[str, Any] | None:
    """The running config's zone (the audit record's "before"); None when there is none yet."""
    for camera in rules.site_document()["config"].get("cameras", []):
        if camera.get("id") == camera_id:
            return next((z for z in camera.get("zones", []) if z.get("name") == zone_name), None)
    return None
