"""GET /camera-summary and GET /site's ETag in-process (issue 26, item 4: a console for 300
cameras): paging by cursor, filters and facets, ETag / If-None-Match -> 304, roles, and bad
parameters refused with a clear 422."""

from __future__ import annotations

import base64
import json

import pytest

from app.api.console_schemas import CameraSummary
from app.api.routes.camera_summary import resume_at
from tests.support.console_util import AREAS, site_app, write_big_site
from tests.support.inprocess import png

pytestmark = pytest.mark.timeout(120)
KEYS = {"viewer": "viewer-key-0123", "operator": "operator-key-0123", "camera": "camera-key-0123",
        "admin": "admin-key-0123"}
N = 30
ZONE = {"name": "bikes", "kind": "restricted", "polygon": [[0.2, 0.2], [0.8, 0.2], [0.8, 0.8]],
        "rules": [{"type": "intrusion", "classes": ["person"]}]}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("summary")
    write_big_site(tmp / "site.yaml", N)
    with site_app(tmp, tmp / "site.yaml", api_keys=",".join(f"{r}:{k}" for r, k in KEYS.items())) as ip:
        ip.client.headers["X-API-Key"] = KEYS["viewer"]
        for cid in ("cam-001", "cam-002", "cam-013"):
            post_frame(ip, cid)
        yield ip


def post_frame(ip, camera_id: str) -> None:
    r = ip.client.post(f"/detect?camera_id={camera_id}", files={"image": ("f.png", png(160, 120), "image/png")},
                       headers={"X-API-Key": KEYS["camera"]})
    assert r.status_code == 200, r.text


def every_page(client, **params) -> tuple[list[dict], int]:
    """Follow next_cursor to the end; the items and the number of requests it took."""
    items, cursor, requests = [], None, 0
    while True:
        r = client.get("/camera-summary", params={**params, **({"cursor": cursor} if cursor else {})})
        requests += 1
        assert r.status_code == 200, r.text
        page = r.json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items, requests


def test_pages_by_cursor_cover_every_camera_once_in_site_order(env):
    items, requests = every_page(env.client, limit=7)
    assert [c["id"] for c in items] == [f"cam-{i:03d}" for i in range(N)]
    assert requests == 5  # 7 + 7 + 7 + 7 + 2
    first = env.client.get("/camera-summary", params={"limit": 7}).json()
    assert first["total"] == N and first["limit"] == 7 and len(first["items"]) == 7
    assert env.client.get("/camera-summary", params={"limit": 500}).json()["next_cursor"] is None


def test_a_tile_has_what_the_page_shows(env):
    items = {c["id"]: c for c in env.client.get("/camera-summary").json()["items"]}
    seen, unseen = items["cam-001"], items["cam-004"]
    assert seen["status"] == "online" and seen["last_frame_at"] and seen["last_seen_at"]
    assert seen["area"] == AREAS[1] and seen["name"] == "Camera 001" and seen["view_checks"] is True
    assert seen["open_events"] == 1  # the fake person stands in the camera's restricted zone
    assert unseen["status"] == "never_seen" and unseen["last_seen_at"] is None and unseen["open_events"] == 0
    assert items["cam-005"]["area"] is None  # every sixth camera has none
    assert "seconds_since_last_frame" not in seen  # it ages by itself: the ETag would never hold


def test_filters_and_facets(env):
    page = env.client.get("/camera-summary", params={"area": "library"}).json()
    assert [c["id"] for c in page["items"]] == ["cam-001", "cam-006", "cam-016", "cam-021", "cam-026"]  # not 011
    assert page["total"] == 5
    assert page["facets"]["area"] == {"north-gate": 5, "library": 5, "car-park": 5, "sports-hall": 5, "dorms": 5, "": 5}
    assert page["facets"]["status"] == {"online": 3, "never_seen": N - 3}
    online = env.client.get("/camera-summary", params={"status": "online"}).json()
    assert [c["id"] for c in online["items"]] == ["cam-001", "cam-002", "cam-013"] and online["total"] == 3
    by_name = env.client.get("/camera-summary", params={"q": "CAMERA 01"}).json()  # name, case-insensitive
    assert [c["id"] for c in by_name["items"]] == [f"cam-{i:03d}" for i in range(10, 20)]
    both = env.client.get("/camera-summary", params={"q": "cam-01", "area": "library", "status": "online"}).json()
    assert both["items"] == [] and both["total"] == 0 and both["next_cursor"] is None


def test_an_unchanged_page_is_a_304_and_a_changed_one_is_not(env):
    c = env.client
    r = c.get("/camera-summary", params={"limit": 10})
    tag = r.headers["etag"]
    assert r.status_code == 200 and tag.startswith('"') and r.headers["cache-control"] == "no-cache"
    again = c.get("/camera-summary", params={"limit": 10}, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
    for header in (f"W/{tag}", f'"nope", {tag}', "*"):
        assert c.get("/camera-summary", params={"limit": 10}, headers={"If-None-Match": header}).status_code == 304
    for header in ('"nope"', "garbage", tag[:-2] + '"', ","):
        assert c.get("/camera-summary", params={"limit": 10}, headers={"If-None-Match": header}).status_code == 200
    # a frame of a camera on the second page changes that page, not the first (same facets: it was online)
    second = c.get("/camera-summary", params={"limit": 10, "cursor": r.json()["next_cursor"]})
    post_frame(env, "cam-013")
    assert c.get("/camera-summary", params={"limit": 10}, headers={"If-None-Match": tag}).status_code == 304
    moved = c.get("/camera-summary", params={"limit": 10, "cursor": r.json()["next_cursor"]},
                  headers={"If-None-Match": second.headers["etag"]})
    assert moved.status_code == 200 and moved.headers["etag"] != second.headers["etag"]


def test_site_etag_304_and_site_version_follow_a_zone_edit(env):
    c = env.client
    r = c.get("/site")
    tag, version = r.headers["etag"], r.json()["version"]
    assert tag == f'"{version}"' and c.get("/camera-summary").json()["site_version"] == version
    assert c.get("/site", headers={"If-None-Match": tag}).status_code == 304
    put = c.put("/admin/site/cameras/cam-003/zones/bikes", json=ZONE, headers={"X-API-Key": KEYS["admin"]})
    assert put.status_code == 200, put.text
    changed = c.get("/site", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] == f'"{put.json()["version"]}"' != tag
    assert c.get("/camera-summary").json()["site_version"] == put.json()["version"]
    r = c.delete("/admin/site/cameras/cam-003/zones/bikes", headers={"X-API-Key": KEYS["admin"]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_reading_role_may_list(env, role):
    assert env.client.get("/camera-summary", headers={"X-API-Key": KEYS[role]}).status_code == 200


def test_camera_keys_and_strangers_may_not(env):
    c = env.client
    r = c.get("/camera-summary", headers={"X-API-Key": KEYS["camera"]})
    assert r.status_code == 403 and r.json()["error"] == "insufficient_role"
    r = c.get("/camera-summary", headers={"X-API-Key": ""})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    r = c.get("/camera-summary", headers={"X-API-Key": "not-a-key-0123"})
    assert r.status_code == 403 and r.json()["error"] == "forbidden"


def cursor_of(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize("query", [
    "limit=0", "limit=501", "limit=abc", "limit=", "limit=1e3", "limit=99999999999999999999999",
    "q=", "q=" + "x" * 101, "q=a%00b", "area=", "area=" + "a" * 65, "area=gate%00",
    "status=", "status=bogus", "status=online,offline", "status=%3Cscript%3E",
    "cursor=", "cursor=garbage!!", "cursor=" + "A" * 201, "cursor=" + cursor_of([-1, "cam-000"]),
    "cursor=" + cursor_of([10**12, "cam-000"]), "cursor=" + cursor_of(["1", "cam-000"]),
    "cursor=" + cursor_of([True, "cam-000"]), "cursor=" + cursor_of([3, "x" * 65]), "cursor=" + cursor_of({"a": 1}),
])
def test_bad_parameters_are_a_clear_422(env, query):
    r = env.client.get(f"/camera-summary?{query}")
    assert r.status_code == 422, (query, r.status_code, r.text)
    body = r.json()
    assert body["error"] == "invalid_parameter" and body["message"]
    assert "x" * 80 not in r.text and "A" * 80 not in r.text  # values are echoed shortened, never whole


def test_a_cursor_resumes_after_its_camera_when_cameras_came_or_went():
    cams = [CameraSummary(id=f"c{i}", status="never_seen", offline_after_s=60, open_events=0, view_checks=True)
            for i in range(6)]
    assert resume_at(cams, 3, "c2") == 3  # unchanged
    assert resume_at(cams[1:], 3, "c2") == 2  # c0 was removed: c3 comes next, not c4
    assert resume_at(cams, 3, "gone") == 3  # its camera was removed: the offset stands
    assert resume_at(cams[:2], 3, "c2") == 2  # fewer cameras than the offset: an empty last page


def test_a_camera_area_is_optional_bounded_and_not_rule_state():
    from pydantic import ValidationError

    from app.rules.site.schema import Camera

    assert Camera(id="a").area is None and Camera(id="a", area="library").area == "library"
    for bad in ("", "x" * 65, 3):
        with pytest.raises(ValidationError):
            Camera(id="a", area=bad)
    # a reload that only moves a camera to another area keeps its tracks and open events
    assert Camera(id="a", area="library").rules_part() == Camera(id="a", area="dorms").rules_part()
