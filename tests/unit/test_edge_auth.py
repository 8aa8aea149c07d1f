"""GET /auth/check (nginx's auth_request): the same answer as the route itself, before any body.

For every route of the production app and every caller (no key, a wrong key, each role), the
check passes (204) exactly when the route lets the caller in, and otherwise refuses with the
route's own status and JSON error body (carried in X-CampusGuard-Error). A 429 of the
failed-key throttle travels as 403 + X-CampusGuard-Status, since auth_request passes on only
401 and 403. In-process, fake detector.
"""

from __future__ import annotations

import json
import logging

import pytest

from app.config import Settings
from tests.support import roles
from tests.support.inprocess import IMGSZ, inprocess_app
from tests.support.roles import KEYS, ROUTES, call

pytestmark = pytest.mark.timeout(120)


def check(client, method: str, uri: str, key: str | None, address: str | None = None):
    headers = {"X-Original-Method": method, "X-Original-URI": uri}
    if key is not None:
        headers["X-API-Key"] = key
    return client.get("/auth/check", headers=headers)


def concrete(path: str) -> str:
    return path.replace("{event_id}", "nope").replace("{camera_id}", "nope").replace("{zone_name}", "nope")


def test_the_check_answers_as_every_route_would(keyed):
    client = keyed.client
    for (method, path), _needed in ROUTES.items():
        if path.startswith("/v1/vision/"):
            continue  # DeepStack: the key may be in the form: the route judges it (nginx exempts the route)
        for who, key in [("none", None), ("wrong", "not-a-key"), *KEYS.items()]:
            direct = call(client, method, path, key)
            edge = check(client, method, concrete(path) + "?camera_id=gate-cam", key)
            where = f"{method} {path} as {who}"
            if direct.status_code in (401, 403):
                assert edge.status_code == direct.status_code, where
                assert json.loads(edge.headers["X-CampusGuard-Error"]) == direct.json(), where
                assert edge.headers["X-CampusGuard-Status"] == str(direct.status_code)
            else:
                assert edge.status_code == 204, (where, direct.status_code, edge.text)
                assert "X-CampusGuard-Error" not in edge.headers


def test_the_deepstack_route_is_left_to_the_route(keyed):
    """DeepStack clients send the key in the multipart body, which the check cannot see."""
    for key in (None, "wrong", KEYS["viewer"]):
        for path in ("/v1/vision/detection", "/v1/vision/custom/list", "/v1/vision/custom/campus"):
            assert check(keyed.client, "POST", path, key).status_code == 204


def test_unknown_routes_and_methods_need_a_key_static_files_do_not(keyed):
    client = keyed.client
    for method, uri in (("GET", "/no/such/route"), ("POST", "/health/ready"), ("GET", "/detect"),
                        ("PUT", "/events")):
        assert check(client, method, uri, None).status_code == 401, (method, uri)
        assert check(client, method, uri, KEYS["viewer"]).status_code == 204, (method, uri)
        assert check(client, method, uri, "wrong-key").status_code == 403, (method, uri)
    for uri in ("/ui", "/ui/console.css", "/docs/static/swagger-ui.css", "/health/live", "/health/ready"):
        assert check(client, "GET", uri, None).status_code == 204, uri
    # the path is matched decoded, as the route would see it
    assert check(client, "GET", "/cameras/gate%2Dcam", None).status_code == 401
    assert check(client, "GET", "/cameras/gate%2Dcam", KEYS["viewer"]).status_code == 204


def test_a_refusal_is_logged_for_the_original_request(keyed, caplog):
    with caplog.at_level(logging.WARNING, logger="campusguard.auth"):
        answer = check(keyed.client, "PUT", "/admin/site/cameras/gate-cam/zones/gate", KEYS["viewer"])
    assert answer.status_code == 403
    assert json.loads(answer.headers["X-CampusGuard-Error"])["error"] == "insufficient_role"
    lines = [r.getMessage() for r in caplog.records]
    assert any("PUT /admin/site/cameras/gate-cam/zones/gate" in line and "insufficient_role" in line for line in lines), lines
    assert not any("/auth/check" in line for line in lines), lines


def test_a_blocked_address_gets_429_through_the_check():
    settings = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, api_keys="camera:c-key",
                        auth_fail_limit=2, auth_block_s=60)
    with inprocess_app(settings) as ip:
        for _ in range(2):
            assert check(ip.client, "POST", "/detect?camera_id=x", "guess").status_code == 403
        blocked = check(ip.client, "POST", "/detect?camera_id=x", "c-key")
        assert blocked.status_code == 403 and blocked.headers["X-CampusGuard-Status"] == "429"
        assert int(blocked.headers["Retry-After"]) >= 1
        assert json.loads(blocked.headers["X-CampusGuard-Error"])["error"] == "too_many_auth_failures"


def test_without_keys_everything_passes_and_bad_headers_are_refused():
    with inprocess_app() as ip:
        assert check(ip.client, "PUT", "/admin/site/cameras/a/zones/b", None).status_code == 204
        assert ip.client.get("/auth/check").status_code == 422  # the original method and URI are required
        assert check(ip.client, "GE T", "/x", None).status_code == 422


keyed = roles.keyed  # the fixture: the app with the four keys (and the example site)
