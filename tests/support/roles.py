"""The roles tests' keys, routes, app fixture and a call helper, shared with the audit and edge auth tests."""

from __future__ import annotations

import shutil

import pytest
from fastapi.routing import APIRoute

from app.config import Settings
from app.core.metrics import Metrics
from app.wiring import build_rules
from tests.support.inprocess import IMGSZ, inprocess_app, png
from tests.support.rules_util import EXAMPLE_SITE

KEYS = {"viewer": "v-key", "operator": "o-key", "camera": "c-key", "admin": "a:key-with-colon"}


# The permission each route needs, written out here (not read from the code) so a route
# that silently changes its permission fails this test. "public": listed in public_routes;
# "any": any valid key.
ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/detect"): "detect", ("POST", "/detect/batch"): "detect", ("POST", "/v1/vision/detection"): "detect",
    ("GET", "/health/live"): "public", ("GET", "/health/ready"): "public", ("GET", "/health"): "read",
    ("GET", "/metrics"): "read", ("GET", "/openapi.json"): "read", ("GET", "/docs"): "read", ("GET", "/redoc"): "read",
    ("GET", "/auth/me"): "any", ("GET", "/status"): "read",
    ("GET", "/events"): "read", ("GET", "/events/{event_id}"): "read", ("GET", "/events/{event_id}/snapshot"): "read",
    ("GET", "/events/{event_id}/clip.mp4"): "read", ("PATCH", "/events/{event_id}"): "review",
    ("GET", "/cameras"): "read", ("GET", "/cameras/{camera_id}"): "read", ("GET", "/cameras/{camera_id}/counts"): "read",
    ("GET", "/cameras/{camera_id}/frame.jpg"): "read", ("POST", "/cameras/{camera_id}/view/accept"): "review",
    ("PUT", "/cameras/{camera_id}/source"): "detect", ("DELETE", "/cameras/{camera_id}/source"): "detect",
    ("GET", "/site"): "read", ("GET", "/site/schema"): "read", ("GET", "/camera-summary"): "read",
    ("PUT", "/admin/site/cameras/{camera_id}/zones/{zone_name}"): "admin",
    ("DELETE", "/admin/site/cameras/{camera_id}/zones/{zone_name}"): "admin",
    ("POST", "/admin/reload"): "admin", ("POST", "/admin/cameras/{camera_id}/reset"): "admin",
    ("GET", "/audit"): "admin",
    ("GET", "/shadow/worst"): "admin",
    ("GET", "/shadow/worst/{frame_id}.jpg"): "admin",
    ("GET", "/models"): "read", ("POST", "/v1/vision/custom/list"): "detect",
    ("POST", "/v1/vision/custom/{model}"): "detect",
    ("POST", "/admin/models"): "admin", ("PUT", "/admin/models/{name}"): "admin",
    ("DELETE", "/admin/models/{name}"): "admin",
    ("POST", "/admin/models/{name}/rollout"): "admin", ("GET", "/admin/models/{name}/rollout"): "read",
    ("POST", "/admin/models/{name}/rollout/promote"): "admin", ("DELETE", "/admin/models/{name}/rollout"): "admin",
}


def call(client, method: str, path: str, key: str | None):
    url = path.replace("{event_id}", "nope").replace("{camera_id}", "nope").replace("{zone_name}", "nope").replace("{name}", "nope")
    headers = {"x-api-key": key} if key is not None else {}
    if method == "POST" and ("detect" in path or path.startswith("/v1/vision/")):
        return client.post(url, files={"image": ("f.png", png(), "image/png")}, headers=headers)
    return client.request(method, url, headers=headers, json={} if method in ("PATCH", "PUT") else None)


def api_routes(routes) -> set[tuple[str, str]]:
    """(method, path) of every API route, through included routers (FastAPI wraps them)."""
    out = set()
    for r in routes:
        if isinstance(r, APIRoute):
            out |= {(m, r.path) for m in r.methods if m != "HEAD"}
        elif hasattr(r, "original_router"):
            out |= api_routes(r.original_router.routes)
    return out


ENTRIES = "viewer:v-key, operator:o-key,CAMERA:c-key,a:key-with-colon"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("roles")
    site = tmp / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    # every route is tried with a wrong key from one address: no throttling here (test_auth_throttle.py has it)
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, api_keys=ENTRIES, site_config=site,
                 events_db_url=f"sqlite:///{tmp}/e.db", snapshot_dir=tmp / "snaps", auth_fail_limit=100_000)
    rules = build_rules(s, Metrics())
    with inprocess_app(s, rules=rules) as ip:
        yield ip
    rules.stop()
