"""The site file for the console: read it, its schema, and edit one zone at a time.

Edits are validated by the same validator as the site file, written atomically with a backup
and reloaded (app/rules/site/writer.py, RulesService.put_zone); the running config stays in
force when anything is wrong.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Request
from fastapi.responses import JSONResponse

from app.api.console_schemas import SiteDocument, ZoneSaved
from app.api.deps import Admin, Read, RecorderDep, RulesDep
from app.api.schemas import ErrorBody, error_responses
from app.core.audit import summarize
from app.core.errors import PayloadTooLarge
from app.rules.port import Rules
from app.rules.site.schema import Zone

router = APIRouter(tags=["console"], responses=error_responses(401, 403, 429))
MAX_ZONE_BYTES = 256 * 1024  # a zone with thousands of points fits; the site file stays readable
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
ZONE_BODY = Body(description="One zone as in the site file: name, kind, polygon ([[x, y], ...] normalized 0..1), "
                             "rules. JSON Schema: GET /site/schema", examples=[{
                                 "name": "gate", "kind": "restricted", "polygon": [[0.1, 0.5], [0.6, 0.5], [0.6, 0.9]],
                                 "rules": [{"type": "intrusion", "classes": ["person"]}]}])


def zone_body_size(request: Request) -> None:
    """Refuse an oversized zone before its body is read (the app-wide limit is for images)."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_ZONE_BYTES:
        raise PayloadTooLarge(f"a zone body is limited to {MAX_ZONE_BYTES} bytes")


@router.get("/site", response_model=SiteDocument, summary="The running site config and its version",
            dependencies=[Read], responses=error_responses(404))
def get_site(rules: RulesDep) -> JSONResponse:
    """Cameras, zones and rules as loaded, the file's ``version`` (also the ``ETag``) and whether
    zone edits can be written."""
    doc = SiteDocument(**rules.site_document())
    return JSONResponse(doc.model_dump(mode="json"), headers={"ETag": f'"{doc.version}"', "Cache-Control": "no-store"})


@router.get("/site/schema", summary="JSON Schema of a zone (every rule type, defaults, bounds)",
            dependencies=[Read], responses=error_responses(404))
def site_schema(rules: RulesDep) -> dict[str, Any]:
    """pydantic's JSON Schema of a Zone: rules are a union discriminated by ``type``, each field
    with its default, bounds and description. The console builds its rule form from it."""
    return Zone.model_json_schema()


@router.put("/admin/site/cameras/{camera_id}/zones/{zone_name}", response_model=ZoneSaved,
            summary="Create, replace or rename a zone", dependencies=[Admin, Depends(zone_body_size)],
            responses=EDIT_RESPONSES)
async def put_zone(camera_id: str, zone_name: str, rules: RulesDep, record: RecorderDep,
                   zone: Annotated[dict[str, Any], ZONE_BODY], if_match: IfMatch = None) -> ZoneSaved:
    """Replace the zone ``zone_name`` of the camera (the body's ``name`` may differ: a rename),
    or add it when the camera has none by that name. The whole site is validated, written
    atomically (previous version kept as ``<file>.bak``) and reloaded; the next frame uses it.
    The edit goes into the audit trail with the zone before and after."""
    before = await asyncio.to_thread(zone_in_force, rules, camera_id, zone_name)
    saved = await asyncio.to_thread(rules.put_zone, camera_id, zone_name, zone, if_match)
    record("zone.put", f"{camera_id}/{zone_name}", before=summarize(before), after=summarize(saved.get("zone")))
    return ZoneSaved(**saved)


@router.delete("/admin/site/cameras/{camera_id}/zones/{zone_name}", response_model=ZoneSaved,
               summary="Delete a zone", dependencies=[Admin], responses=EDIT_RESPONSES)
async def delete_zone(camera_id: str, zone_name: str, rules: RulesDep, record: RecorderDep,
                      if_match: IfMatch = None) -> ZoneSaved:
    """Remove the zone from the site file (written and reloaded as for PUT); its open events end."""
    before = await asyncio.to_thread(zone_in_force, rules, camera_id, zone_name)
    saved = await asyncio.to_thread(rules.put_zone, camera_id, zone_name, None, if_match)
    record("zone.delete", f"{camera_id}/{zone_name}", before=summarize(before))
    return ZoneSaved(**saved)


def zone_in_force(rules: Rules, camera_id: str, zone_name: str) -> dict[str, Any] | None:
    """The running config's zone (the audit record's "before"); None when there is none yet."""
    for camera in rules.site_document()["config"].get("cameras", []):
        if camera.get("id") == camera_id:
            return next((z for z in camera.get("zones", []) if z.get("name") == zone_name), None)
    return None
