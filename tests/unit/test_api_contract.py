"""HTTP contract of /detect, /detect/batch, DeepStack, probes, docs and auth, in-process
(the production app with a fake detector: tests/support/inprocess.py), no model and no socket."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import generate_latest

from app.api.deps import get_engine
from app.api.state import state_of
from app.config import Settings
from app.wiring import build_rules
from tests.support.inprocess import IMGSZ, inprocess_app, png

pytestmark = pytest.mark.timeout(60)
KEY = "key-1"
PNG = {"content-type": "image/png"}


def settings(**kw) -> Settings:
    return Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, **kw)


@pytest.fixture(scope="module")
def open_app():
    with inprocess_app(settings()) as ip:
        yield ip


@pytest.fixture(scope="module")
def keyed_app():
    with inprocess_app(settings(api_keys=KEY)) as ip:
        yield ip


# --- /detect -------------------------------------------------------------------------------
def test_detect_json_raw_and_multipart(open_app):
    c = open_app.client
    raw = c.post("/detect", content=png(), headers=PNG)
    form = c.post("/detect", files={"image": ("f.png", png(), "image/png")})
    for r in (raw, form):
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["width"], body["height"]) == (64, 48) and body["backend"] == "fake"
        assert [d["class_name"] for d in body["detections"]] == ["person", "car"]
    only_people = c.post("/detect", params={"classes": "person", "conf": 0.6}, content=png(), headers=PNG).json()
    assert [d["class_name"] for d in only_people["detections"]] == ["person"]


@pytest.mark.parametrize("accept,jpeg", [("image/jpeg", True), ("image/jpeg;q=0", False),
                                         ("image/jpeg;q=0.5, application/json", False),
                                         ("application/json;q=0.2, image/jpeg", True), ("*/*", False)])
def test_accept_header_negotiates_jpeg(open_app, accept, jpeg):
    r = open_app.client.post("/detect", content=png(), headers={**PNG, "accept": accept})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("image/jpeg" if jpeg else "application/json")


@pytest.mark.parametrize("shape", [(2, 5000), (5000, 2), (1, 20000), (20000, 1)])
def test_extreme_aspect_images_are_detected(open_app, shape):
    width, height = shape
    r = open_app.client.post("/detect", content=png(width, height), headers=PNG)
    assert r.status_code == 200, r.text
    assert (r.json()["width"], r.json()["height"]) == (width, height)


@pytest.mark.parametrize("params,code", [
    ({"classes": ",,,"}, "unknown_class"),
    ({"classes": "\uff10"}, "unknown_class"),  # full-width zero
    ({"classes": "\u0660"}, "unknown_class"),  # Arabic-Indic zero
    ({"camera_id": "-cam"}, "invalid_parameter"),
    ({"camera_id": "c" * 65}, "invalid_parameter"),
    ({"camera_id": "gate cam"}, "invalid_parameter"),
    ({"timestamp": "99999999999999"}, "invalid_parameter"),
    ({"timestamp": "0.5"}, "invalid_parameter"),
    ({"conf": "1.5"}, "invalid_parameter"),
])
def test_bad_parameters_are_422(open_app, params, code):
    r = open_app.client.post("/detect", params=params, content=png(), headers=PNG)
    assert r.status_code == 422 and r.json()["error"] == code, r.text


def test_good_camera_ids_and_empty_classes(open_app):
    c = open_app.client
    for camera in ("gate-cam", "c" * 64, "a.b_c:d-1"):
        assert c.post("/detect", params={"camera_id": camera}, content=png(), headers=PNG).status_code == 200
    every = c.post("/detect", params={"classes": ""}, content=png(), headers=PNG).json()
    assert len(every["detections"]) == 2


def test_two_images_on_detect_point_to_batch(open_app):
    files = [("image", ("a.png", png(), "image/png")), ("image", ("b.png", png(), "image/png"))]
    r = open_app.client.post("/detect", files=files)
    assert r.status_code == 422 and r.json()["error"] == "too_many_images"
    assert "/detect/batch" in r.json()["message"]


def test_long_values_are_not_echoed_whole(open_app):
    r = open_app.client.post("/detect", params={"classes": "x" * 1999}, content=png(), headers=PNG)
    assert r.status_code == 422 and len(r.text) < 600
    ds = open_app.client.post("/v1/vision/detection", files={"image": ("a.png", png(), "image/png")},
                              data={"min_confidence": "9" * 100_000})
    assert ds.status_code == 400 and len(ds.text) < 600


def test_detection_metrics_counted_once_per_route(open_app):
    c = open_app.client

    def count() -> float:
        text = c.get("/metrics").text
        line = next(x for x in text.splitlines() if x.startswith('campusguard_detections_total{class_name="car"}'))
        return float(line.split()[-1])

    before = count()
    c.post("/detect", content=png(), headers=PNG)
    c.post("/detect/batch", files=[("images", ("a.png", png(), "image/png"))] * 2)
    c.post("/v1/vision/detection", files={"image": ("a.png", png(), "image/png")}, data={"min_confidence": "0.1"})
    assert count() - before == 4


def test_request_metrics_are_labelled_by_route_template(tmp_path):
    with inprocess_app(settings()) as ip:
        ip.client.post("/detect", content=png(), headers=PNG)
        ip.client.get("/health/ready")
        ip.client.get("/wp-login.php")
        text = ip.client.get("/metrics").text
    routes = {line.split('route="')[1].split('"')[0] for line in text.splitlines()
              if line.startswith("campusguard_requests_total{")}
    assert routes == {"/detect", "/health/ready", "other"}


# --- /detect/batch ---------------------------------------------------------------------------
def test_batch_items_fail_alone(open_app):
    files = [("images", ("wide.png", png(20000, 1), "image/png")), ("images", ("bad.png", b"garbage", "image/png")),
             ("images", ("tall.png", png(2, 5000), "image/png"))]
    r = open_app.client.post("/detect/batch", files=files)
    assert r.status_code == 200, r.text
    items = r.json()["results"]
    assert [i["ok"] for i in items] == [True, False, True]
    assert items[1]["error"]["error"] == "invalid_image"


def test_batch_item_bug_is_internal_error_for_that_item_only(open_app):
    engine = open_app.engine
    real = engine.detect

    async def flaky(data, params, keep_image=False):
        if data == b"boom-marker":
            raise RuntimeError("a bug")
        return await real(data, params, keep_image)

    class Wrapped:  # the engine with one sabotaged image
        def __getattr__(self, name):
            return flaky if name == "detect" else getattr(engine, name)

    open_app.app.dependency_overrides[get_engine] = lambda: Wrapped()
    try:
        files = [("images", ("a.png", png(), "image/png")), ("images", ("b.png", b"boom-marker", "image/png"))]
        r = open_app.client.post("/detect/batch", files=files)
    finally:
        open_app.app.dependency_overrides[get_engine] = lambda: engine
    assert r.status_code == 200
    assert [(i["ok"], (i["error"] or {}).get("error")) for i in r.json()["results"]] == [
        (True, None), (False, "internal_error")]


# --- DeepStack ------------------------------------------------------------------------------
def test_deepstack_contract(open_app):
    c = open_app.client
    ok = c.post("/v1/vision/detection", files={"image": ("a.png", png(), "image/png")},
                data={"min_confidence": "0.6"}).json()
    assert ok["success"] is True and [p["label"] for p in ok["predictions"]] == ["person"]
    assert set(ok["predictions"][0]) == {"label", "confidence", "x_min", "y_min", "x_max", "y_max"}
    for bad in ("\uff10.5", "\u0660.\u0665", "nan", "-0.1", "1.5", "abc"):
        r = c.post("/v1/vision/detection", files={"image": ("a.png", png(), "image/png")},
                   data={"min_confidence": bad})
        assert r.status_code == 400 and r.json()["success"] is False, bad
    missing = c.post("/v1/vision/detection", data={"foo": "bar"}, files={"x": ("a.png", png(), "image/png")})
    assert missing.status_code == 400 and missing.json()["success"] is False


def test_deepstack_key_is_checked_before_the_form_is_judged(keyed_app):
    c = keyed_app.client
    two = [("image", ("a.png", png(), "image/png")), ("image", ("b.png", png(), "image/png"))]
    assert c.post("/v1/vision/detection", files=two).status_code == 401
    assert c.post("/v1/vision/detection", data={"foo": "bar"}, files={"x": ("a", b"x")}).status_code == 401
    assert c.post("/v1/vision/detection", files=two, data={"api_key": "nope"}).status_code == 403
    form_key = c.post("/v1/vision/detection", files={"image": ("a.png", png(), "image/png")}, data={"api_key": KEY})
    header_key = c.post("/v1/vision/detection", files={"image": ("a.png", png(), "image/png")},
                        headers={"x-api-key": KEY})
    assert form_key.json()["success"] is True and header_key.json()["success"] is True


def test_deepstack_body_limit_has_deepstack_shape():
    with inprocess_app(settings(max_body_bytes=2048)) as ip:
        r = ip.client.post("/v1/vision/detection", files={"image": ("a.png", b"\0" * 5000, "image/png")})
        assert r.status_code == 413 and r.json()["success"] is False and "limit" in r.json()["error"]
        plain = ip.client.post("/detect", content=b"\0" * 5000, headers=PNG)
        assert plain.status_code == 413 and plain.json()["error"] == "payload_too_large"


def asgi_post(app, path: str, headers: dict[str, str]) -> tuple[int, int]:
    """POST straight through ASGI; (status, how many times the app asked for the body)."""
    reads = 0
    status = 0

    async def receive():
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": png(), "more_body": False}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    raw = [(k.lower().encode(), v.encode()) for k, v in {"content-type": "image/png", **headers}.items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "headers": raw, "root_path": "",
             "server": ("test", 80), "client": ("test", 1)}
    asyncio.run(app(scope, receive, send))
    return status, reads


@pytest.mark.parametrize("path", ["/detect", "/detect/batch", "/v1/vision/detection"])
def test_key_and_capacity_are_checked_before_the_body_is_read(path):
    with inprocess_app(settings(api_keys=KEY)) as ip:
        assert asgi_post(ip.app, path, {"x-api-key": "wrong"}) == (403, 0)
        if path != "/v1/vision/detection":  # DeepStack may carry the key in the form
            assert asgi_post(ip.app, path, {}) == (401, 0)
    with inprocess_app(settings(), ready=False) as ip:
        assert asgi_post(ip.app, path, {}) == (503, 0)


# --- probes, docs, auth ---------------------------------------------------------------------
def test_probes_answer_head_and_readiness_503_is_a_service_error():
    with inprocess_app(settings(), ready=False) as ip:
        r = ip.client.get("/health/ready")
        assert r.status_code == 503 and r.json()["error"] == "not_ready" and r.headers["retry-after"] == "1"
        assert ip.client.head("/health/live").status_code == 200
        assert ip.client.head("/health").status_code == 200
        assert ip.client.get("/health").json()["ready"] is False


def test_what_a_key_protects(keyed_app):
    c = keyed_app.client
    for path in ("/health/live", "/health/ready", "/docs/static/swagger-ui-bundle.js"):
        assert c.get(path).status_code == 200, path
    for path in ("/health", "/metrics", "/docs", "/redoc", "/openapi.json"):
        r = c.get(path)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized", path
        assert c.get(path, headers={"x-api-key": "wrong"}).status_code == 403, path
        assert c.get(path, headers={"x-api-key": KEY}).status_code == 200, path
    assert c.post("/detect", content=png(), headers=PNG).status_code == 401
    assert c.post("/detect", content=png(), headers={**PNG, "x-api-key": KEY}).status_code == 200


def test_public_routes_setting_opens_listed_routes():
    with inprocess_app(settings(api_keys=KEY, public_routes="/health/live,/metrics")) as ip:
        assert ip.client.get("/metrics").status_code == 200
        assert ip.client.get("/health/ready").status_code == 401


def test_docs_are_served_offline(open_app):
    c = open_app.client
    for page, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        html = c.get(page).text
        assert f"/docs/static/{asset}" in html and "cdn." not in html and "googleapis" not in html
        js = c.get(f"/docs/static/{asset}")
        assert js.status_code == 200 and len(js.content) > 100_000


def test_openapi_declares_key_scheme_and_error_statuses(open_app):
    doc = open_app.client.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["ApiKey"] == {
        "type": "apiKey", "in": "header", "name": "X-API-Key",
        "description": doc["components"]["securitySchemes"]["ApiKey"]["description"]}
    for path, method in (("/detect", "post"), ("/detect/batch", "post"), ("/metrics", "get"), ("/health", "get"),
                         ("/v1/vision/detection", "post")):
        op = doc["paths"][path][method]
        assert {"ApiKey": []} in op["security"], path
        assert {"401", "403"} <= set(op["responses"]), path
    batch = {p["name"] for p in doc["paths"]["/detect/batch"]["post"]["parameters"]}
    assert "annotate" not in batch and {"camera_id", "timestamp"} <= batch
    assert "HEAD" not in json.dumps(doc)  # HEAD routes stay out of the schema


def test_blank_api_keys_are_a_settings_error():
    for blank in (" ", ",", " , "):
        with pytest.raises(ValueError, match="api_keys"):
            Settings(api_keys=blank)
    assert Settings(api_keys="").api_keys == []


# --- batch + rules, log injection, slow bodies ---------------------------------------------
def test_batch_feeds_the_camera_rules_in_order(tmp_path):
    from app.core.metrics import Metrics
    from app.rules.service.facade import RulesService
    from tests.support.rules_util import EXAMPLE_SITE

    rules = build_rules(settings(site_config=EXAMPLE_SITE, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                                snapshot_dir=tmp_path / "snaps"), Metrics())
    try:
        with inprocess_app(settings(site_config=EXAMPLE_SITE), rules=rules) as ip:
            import datetime as dt

            now = dt.datetime.now(dt.timezone.utc)
            last_night = now.replace(hour=23, minute=0, second=0, microsecond=0)
            if last_night > now:
                last_night -= dt.timedelta(days=1)  # within the capture-time window (a day back at most)
            night = last_night.isoformat()  # gate-cam's intrusion rule is active 22:00-06:00 Berlin
            files = [("images", (f"{i}.png", png(), "image/png")) for i in range(3)]
            files.insert(1, ("images", ("bad.png", b"garbage", "image/png")))
            r = ip.client.post("/detect/batch", params={"camera_id": "gate-cam", "timestamp": night}, files=files)
            assert r.status_code == 200, r.text
            items = r.json()["results"]
            assert [i["ok"] for i in items] == [True, False, True, True]
            started = [[e["rule_type"] for e in i["result"]["events"] if e["state"] == "started"]
                       for i in items if i["ok"]]
            assert sum(len(s) for s in started) == 1 and "intrusion" in sum(started, [])  # once, not per frame
            listed = ip.client.get("/events", params={"camera_id": "gate-cam"}).json()
            assert listed["total"] == 1 and listed["items"][0]["rule_type"] == "intrusion"
    finally:
        rules.stop()


def test_control_characters_in_request_data_are_escaped_in_text_logs():
    import logging

    from app.core.logs import TextFormatter

    forged = "/events/x\n2026-12-02 19:00:00,000 INFO campusguard.access: POST /admin/reload 200 1.0ms"
    record = logging.LogRecord("campusguard.access", logging.INFO, __file__, 1, "%s %s %s %.1fms",
                               ("GET", forged, 404, 1.0), None)
    record.camera_id = "cam\r\nforged"
    line = TextFormatter().format(record)
    assert "\n" not in line and "\r" not in line
    assert "/events/x\\x0a2026-12-02" in line and "cam\\x0d\\x0aforged" in line


def test_slow_body_gets_408_and_is_not_read_further():
    from app.api.middleware import RequestGuard
    from app.core.metrics import Metrics

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def slow_receive():
        await asyncio.sleep(0.05)
        return {"type": "http.request", "body": b"x", "more_body": True}  # a byte now and then, forever

    sent = []

    async def send(message):
        sent.append(message)

    guard = RequestGuard(app, 10_000, Metrics(), body_read_timeout_s=0.3)
    scope = {"type": "http", "method": "POST", "path": "/detect", "headers": []}
    asyncio.run(asyncio.wait_for(guard(scope, slow_receive, send), 5))
    assert sent[0]["status"] == 408 and json.loads(sent[1]["body"])["error"] == "request_timeout"


def test_startup_log_says_whether_auth_is_on(caplog):
    from app.core.metrics import Metrics
    from app.main import log_auth
    from app.wiring import build_gate

    with caplog.at_level("INFO", logger="campusguard"):
        for s in (settings(api_keys=f"{KEY},key-2"), settings(), settings(auth="off", host="0.0.0.0")):
            log_auth(s, build_gate(s, Metrics()))
    on, loopback, off = caplog.records[-3:]
    assert "auth on: 2 API key(s)" in on.getMessage() and "/health/live, /health/ready" in on.getMessage()
    assert loopback.levelname == "WARNING" and "listening on 127.0.0.1 (loopback) only" in loopback.getMessage()
    assert off.levelname == "WARNING" and "AUTH IS OFF (CAMPUSGUARD_AUTH=off)" in off.getMessage()
    assert KEY not in caplog.text


def test_no_router_reads_app_state():
    """Routes take their services as typed dependencies (app/api/deps.py is the one reader, of the
    typed state that app/api/state.py installs)."""
    from pathlib import Path

    api = Path(__file__).resolve().parents[2] / "app" / "api"
    readers = [p.name for p in api.rglob("*.py")
               if p.name not in ("deps.py", "state.py") and "app.state" in p.read_text()]
    assert readers == []


def test_an_unhandled_500_is_counted_logged_and_in_the_recent_window(caplog):
    """A bug-type 500 (issue 23 finding 4): Starlette's ServerErrorMiddleware answers it outside
    the request guard and re-raises, so the guard must count and log it on the way out."""
    class Broken:  # every use of the engine is an AttributeError: a bug, not a ServiceError
        pass

    with inprocess_app(settings()) as ip:
        ip.app.dependency_overrides[get_engine] = Broken
        with caplog.at_level("INFO", logger="campusguard.access"):
            r = ip.client.post("/detect", params={"camera_id": "gate-1"}, content=png(), headers=PNG)
        assert r.status_code == 500 and r.json() == {"error": "internal_error", "message": "internal server error"}
        metrics = generate_latest(state_of(ip.app).metrics.registry).decode()
        assert 'campusguard_requests_total{route="/detect",status="500"} 1.0' in metrics
        assert 'campusguard_request_duration_seconds_count{route="/detect"} 1.0' in metrics
        lines = [rec for rec in caplog.records if rec.name == "campusguard.access"]
        assert [(rec.getMessage().split()[:3], rec.status, rec.route) for rec in lines] == [
            (["POST", "/detect", "500"], 500, "/detect")]
        assert sum(b["errors"] for b in state_of(ip.app).metrics.recent.snapshot()) == 1
        assert 'campusguard_in_flight_requests 0.0' in metrics
