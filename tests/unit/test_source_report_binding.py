"""Gateway reports bound to their keys (issue 42, finding 5): a key's ``cameras:`` (keys file)
limit the cameras it reports for (and, when switched on, posts frames for); a report over
another gateway's fresh one is 409; ``reported_at`` far from the server's clock and a long
``ttl_s`` are 422; ``password=`` in ``last_error`` is masked."""

from __future__ import annotations

import datetime as dt
import shutil

import pytest

from app.api.options import ApiOptions
from app.config import Settings
from app.core.errors import ReportConflict
from app.core.keys import KeysFileError, parse_keys_file
from app.core.metrics import Metrics
from app.core.sources import SourceBook
from app.wiring import build_rules
from tests.support.inprocess import IMGSZ, inprocess_app, png
from tests.support.rules_util import EXAMPLE_SITE
from tests.support.sources import Clock, state

KEYS = {"gate": "gate-gateway-key-0123456789", "any": "any-gateway-key-0123456789",
        "plaza": "plaza-gateway-key-0123456789", "viewer": "viewer-key-0123456789"}
KEYS_FILE = f"""
- {{name: gate-gw, role: camera, key: {KEYS['gate']}, cameras: ["gate-*"]}}
- {{name: any-gw, role: camera, key: {KEYS['any']}}}
- {{name: plaza-gw, role: camera, key: {KEYS['plaza']}, cameras: [plaza-cam]}}
- {{name: viewer, role: viewer, key: {KEYS['viewer']}}}
"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("binding")
    site = tmp / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    (tmp / "keys.yaml").write_text(KEYS_FILE)
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, site_config=site,
                 api_keys_file=tmp / "keys.yaml", bind_frames_to_key_cameras=True,
                 events_db_url=f"sqlite:///{tmp}/e.db", snapshot_dir=tmp / "snaps")
    rules = build_rules(s, Metrics())
    with inprocess_app(s, rules=rules) as ip:
        yield ip
    rules.stop()


def now_iso(offset_s: float = 0.0) -> str:
    return (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=offset_s)).isoformat()


def body(gateway: str = "gateway-0", **source) -> dict:
    return {"gateway": gateway, "reported_at": now_iso(), "ttl_s": 30, "source": {**state(), **source}}


def put(app, camera: str, key: str, payload: dict):
    return app.client.put(f"/cameras/{camera}/source", json=payload, headers={"x-api-key": KEYS[key]})


def delete(app, camera: str, key: str, gateway: str | None = None):
    params = {"gateway": gateway} if gateway else None
    return app.client.delete(f"/cameras/{camera}/source", params=params, headers={"x-api-key": KEYS[key]})


def shown(app, camera: str) -> dict:
    return app.client.get(f"/cameras/{camera}", headers={"x-api-key": KEYS["viewer"]}).json()["source"]


def test_a_key_reports_only_for_its_cameras(app):
    for reply in (put(app, "gate-cam", "plaza", body()), delete(app, "gate-cam", "plaza")):
        assert reply.status_code == 403 and reply.json()["error"] == "camera_not_allowed", reply.text
    assert put(app, "plaza-cam", "plaza", body("gateway-p")).status_code == 204
    assert delete(app, "plaza-cam", "plaza", "gateway-p").status_code == 204


def test_another_gateways_fresh_report_is_not_replaced_nor_withdrawn(app):
    assert put(app, "gate-cam", "gate", body(state="unreachable", last_error="connection refused")).status_code == 204
    for reply in (put(app, "gate-cam", "any", body("gateway-1")),  # another key, another gateway
                  put(app, "gate-cam", "any", body("gateway-0")),  # another key claiming the same name
                  put(app, "gate-cam", "gate", body("gateway-1")),  # the same key, another gateway
                  delete(app, "gate-cam", "any"), delete(app, "gate-cam", "gate", "gateway-1")):
        assert reply.status_code == 409 and reply.json()["error"] == "reported_by_another_gateway", reply.text
    seen = shown(app, "gate-cam")
    assert (seen["state"], seen["reported_by"]) == ("unreachable", "gateway-0")
    assert put(app, "gate-cam", "gate", body(state="streaming")).status_code == 204  # its own gateway: fine
    assert delete(app, "gate-cam", "gate", "gateway-0").status_code == 204


@pytest.mark.parametrize("change", [
    {"reported_at": "1970-01-01T00:00:00+00:00"},
    {"reported_at": now_iso(3600)},
    {"reported_at": now_iso(-3600)},
    {"reported_at": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None).isoformat()},  # no time zone
    {"ttl_s": 3600},
    {"ttl_s": 0.001},
])
def test_reported_at_far_from_the_clock_and_long_ttls_are_refused(app, change):
    reply = put(app, "gate-cam", "gate", {**body(), **change})
    assert reply.status_code == 422 and reply.json()["error"] == "invalid_parameter", reply.text


def test_passwords_in_last_error_are_masked(app):
    leaky = body(last_error="GET /cgi?user=admin&password=hunter2-pw failed; pwd: hunter2-pw")
    assert put(app, "gate-cam", "gate", leaky).status_code == 204
    assert "hunter2-pw" not in str(shown(app, "gate-cam"))
    assert delete(app, "gate-cam", "gate", "gateway-0").status_code == 204


def test_frames_are_bound_to_the_keys_cameras_when_switched_on(app):
    image = {"image": ("f.png", png(160, 120), "image/png")}
    refused = app.client.post("/detect?camera_id=gate-cam", files=image, headers={"x-api-key": KEYS["plaza"]})
    assert refused.status_code == 403 and refused.json()["error"] == "camera_not_allowed"
    ok = app.client.post("/detect?camera_id=plaza-cam", files=image, headers={"x-api-key": KEYS["plaza"]})
    assert ok.status_code == 200, ok.text
    assert app.client.post("/detect?camera_id=gate-cam", files=image,
                           headers={"x-api-key": KEYS["any"]}).status_code == 200  # no cameras: every camera
    assert ApiOptions().bind_frames_to_key_cameras is False  # off unless the operator switches it on


def test_a_stale_report_may_be_taken_over():
    clock = Clock()
    book = SourceBook(clock)
    book.report("gate-cam", "gw-0", 30, state(), key="gate-gw")
    with pytest.raises(ReportConflict):
        book.report("gate-cam", "gw-1", 30, state(), key="other-gw")
    clock.now += 31  # gw-0 went silent: another gateway may take the camera over
    book.report("gate-cam", "gw-1", 30, state(), key="other-gw")
    assert book.get("gate-cam")["reported_by"] == "gw-1"


@pytest.mark.parametrize("cameras, words", [
    ("[]", "cameras must be a list"), ("gate-cam", "cameras must be a list"),
    ("[gate/../x]", "cameras must be a list"), ("[1]", "cameras must be a list"),
])
def test_bad_cameras_in_the_keys_file_are_refused(cameras, words):
    with pytest.raises(KeysFileError, match=words):
        parse_keys_file(f"- {{name: gw, role: camera, key: {KEYS['gate']}, cameras: {cameras}}}".encode())
    line = f"- {{name: gw, role: camera, key: {KEYS['gate']}, cameras: [gate-*, 'lot-[12]']}}"
    entry = parse_keys_file(line.encode())
    assert entry[0].cameras == ("gate-*", "lot-[12]")
