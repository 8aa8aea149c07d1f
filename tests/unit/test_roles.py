"""Roles and permissions: every route of the production app for every role, no key and a bad key,
DeepStack's form key, public routes, /auth/me and the static mounts (in-process, fake detector)."""

from __future__ import annotations


import pytest

from app.config import Settings
from app.core.roles import Keyring, parse_key
from tests.support.inprocess import IMGSZ, inprocess_app, png
from tests.support import roles
from tests.support.roles import KEYS, ROUTES, call, api_routes

pytestmark = pytest.mark.timeout(120)

HOLDS = {"viewer": {"read"}, "operator": {"read", "review"}, "camera": {"detect"},
         "admin": {"read", "review", "detect", "admin"}}


keyed = roles.keyed  # the fixture: the app with the four keys (and the example site)


def test_every_route_is_classified(keyed):
    # GET /auth/check answers for other routes (nginx's auth_request): tests/unit/test_edge_auth.py
    routes = api_routes(keyed.app.routes) - {("GET", "/auth/check")}
    assert routes == set(ROUTES), routes ^ set(ROUTES)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_role_matrix(keyed, route):
    method, path = route
    need = ROUTES[route]
    c = keyed.client
    for role, key in KEYS.items():
        r = call(c, method, path, key)
        if need in ("public", "any") or need in HOLDS[role]:
            assert r.status_code not in (401, 403), (role, route, r.status_code, r.text)
        else:
            assert r.status_code == 403, (role, route, r.text)
            body = r.json()
            if path.startswith("/v1/"):  # DeepStack's error shape
                assert body["success"] is False and "role" in body["error"]
            else:
                assert body["error"] == "insufficient_role" and f"role {role} may not" in body["message"]
    no_key, bad_key = call(c, method, path, None), call(c, method, path, "wrong")
    if need == "public":
        assert no_key.status_code == 200 and bad_key.status_code == 200
    else:
        assert (no_key.status_code, bad_key.status_code) == (401, 403), route


def test_insufficient_role_message_names_the_needed_role(keyed):
    r = keyed.client.post("/admin/reload", headers={"x-api-key": KEYS["operator"]})
    assert r.json() == {"error": "insufficient_role",
                        "message": "role operator may not change the configuration (needs admin)"}


def test_deepstack_form_key_is_checked_for_its_role(keyed):
    c = keyed.client
    files = {"image": ("f.png", png(), "image/png")}
    assert c.post("/v1/vision/detection", files=files, data={"api_key": KEYS["camera"]}).json()["success"] is True
    denied = c.post("/v1/vision/detection", files=files, data={"api_key": KEYS["viewer"]})
    assert denied.status_code == 403 and denied.json()["success"] is False
    assert c.post("/v1/vision/detection", files=files).status_code == 401


def test_auth_me(keyed):
    c = keyed.client
    for role, key in KEYS.items():
        body = c.get("/auth/me", headers={"x-api-key": key}).json()
        assert body["auth_enabled"] is True and body["role"] == role
        assert set(body["permissions"]) == HOLDS[role] and body["key_id"].startswith("key:") and key not in str(body)
        assert body["name"] == body["key_id"] and body["auth"] == "on"
    assert c.get("/auth/me").json()["error"] == "unauthorized"
    assert c.get("/auth/me", headers={"x-api-key": "wrong"}).json()["error"] == "forbidden"
    with inprocess_app() as ip:
        assert ip.client.get("/auth/me").json() == {"auth_enabled": False, "auth": "loopback", "role": "admin",
                                                    "name": None, "key_id": None,
                                                    "permissions": ["read", "review", "detect", "admin"]}


def test_public_routes_setting_still_opens_a_route():
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, api_keys="viewer:v", public_routes="/metrics")
    with inprocess_app(s) as ip:
        assert ip.client.get("/metrics").status_code == 200
        assert ip.client.get("/health/live").status_code == 401


def test_static_mounts_need_no_key(keyed):
    page = keyed.client.get("/ui/")  # the console (app/console), mounted by create_app
    assert page.status_code == 200 and "<title>CampusGuard console</title>" in page.text
    assert keyed.client.get("/ui/js/app.js").headers["content-type"].startswith("text/javascript")
    assert keyed.client.get("/", follow_redirects=False).headers["location"] == "/ui/"
    assert keyed.client.get("/docs/static/swagger-ui-bundle.js").status_code == 200


def test_key_syntax():
    assert parse_key("viewer:abc") == ("viewer", "abc")
    assert parse_key(" Operator : abc") == ("operator", "abc")
    assert parse_key("abc") == ("admin", "abc") and parse_key("x:abc") == ("admin", "x:abc")
    assert parse_key("viewer:a:b") == ("viewer", "a:b")
    with pytest.raises(ValueError, match="api_keys"):
        Settings(api_keys="viewer:")
    ring = Keyring.parse(["viewer:same", "same"])  # the first entry of a key wins, in the listed order
    assert ring.role_of("same") == "viewer" and Keyring().role_of(None) == "admin"


def test_cors_lets_a_console_on_another_origin_edit_zones():
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, cors_origins="https://console.example")
    with inprocess_app(s) as ip:
        r = ip.client.options("/admin/site/cameras/a/zones/b", headers={
            "origin": "https://console.example", "access-control-request-method": "PUT",
            "access-control-request-headers": "x-api-key, if-match, content-type"})
    assert r.status_code == 200 and "PUT" in r.headers["access-control-allow-methods"]
    assert "if-match" in r.headers["access-control-allow-headers"].lower()
