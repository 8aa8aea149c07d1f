"""The console of a first `make run` in a real Chromium (issue 42, "the operator's path").

The app runs in-process over a fake detector on a real socket, on the starter site file that
`make run` writes (open access, as `make run` starts) plus a second camera. A newcomer's
console says what to do next: a camera that never sent a frame shows the call that posts one
(and `make demo`), the empty Events page too; that very call makes the tile show its frame. A
portrait camera's frame keeps its shape (and its zones stay on it), and frames the service
pulls itself (the embedded ingest's feed, as during `make demo`) are counted on the Status page
as pulled, apart from posted ones.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import re
import threading
import time

import cv2
import httpx
import numpy as np
import pytest
from PIL import Image

from app.api.state import state_of
from app.inference.pipeline import DetectParams
from app.ingest.asyncsink import AsyncSink
from app.ingest.embedded import EngineFeed
from app.ingest.frames import Frame
from app.ingest.mailbox import SinkResult
from app.tooling.demo.site import STARTER
from app.wiring import build_flow
from tests.browser.conftest import screenshot
from tests.support.console_util import serve, site_app
from tests.support.net import free_port

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
SECOND = """\
  - id: lobby-cam
    name: Lobby (portrait)
    zones:
      - name: whole
        polygon: [[0, 0], [1, 0], [1, 1], [0, 1]]
"""
PORTRAIT = (180, 320)  # width, height
RED = (200, 30, 30)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("first-run")
    (tmp / "site.yaml").write_text(STARTER + SECOND)
    with site_app(tmp, tmp / "site.yaml") as ip, serve(ip.app, free_port()) as url:
        yield ip, url


def goto(page, hash_: str) -> None:
    page.goto(f"/ui/#/{hash_}")
    page.wait_for_selector("body[data-ready=true]")


def jpeg(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    ok, buf = cv2.imencode(".jpg", np.full((height, width, 3), rgb[::-1], np.uint8))
    assert ok
    return buf.tobytes()


def test_a_first_run_says_how_to_send_a_frame_and_that_call_works(node, open_page):
    ip, url = node
    page = open_page(url)
    goto(page, "cameras")
    tile = page.locator("article.tile[data-camera=front-door]")
    how = tile.locator("details.how")
    how.wait_for()
    assert how.get_attribute("open") is not None  # no camera sent anything yet: unfolded
    call = how.locator("code.cmd").inner_text()
    assert call == f"curl -F image=@bus.jpg '{url}/detect?camera_id=front-door'"
    assert "make demo" in how.inner_text() and "X-API-Key" not in call  # open access: no key to send
    assert tile.locator(".no-frame").inner_text() == "No frame yet"
    screenshot(page, "first-run")
    goto(page, "events")
    empty = page.locator(".no-events")
    empty.wait_for()
    assert "No events yet" in empty.inner_text() and "make demo" in empty.inner_text()
    assert re.fullmatch(r"curl -F image=@bus\.jpg '.*/detect\?camera_id=(front-door|lobby-cam)'",
                        empty.locator("code.cmd").inner_text())
    page.get_by_label("Rule").fill("no-such-rule")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_function("() => document.querySelector('table.events tbody').textContent === 'No events match.'")
    # the call as shown, run: the camera's tile shows the frame and no longer the next step
    target = re.search(r"'(http[^']+)'", call).group(1)
    r = httpx.post(target, files={"image": ("bus.jpg", jpeg(320, 180, (90, 90, 90)), "image/jpeg")}, timeout=30)
    assert r.status_code == 200, r.text
    goto(page, "cameras")
    tile.locator(".frame img").wait_for(state="visible")
    tile.locator("details.how").wait_for(state="detached")
    lobby = page.locator("article.tile[data-camera=lobby-cam] details.how")
    assert lobby.count() == 1 and lobby.get_attribute("open") is None  # a camera sent frames: folded


def test_a_camera_whose_stream_is_pulled_waits_for_it_instead(node, open_page):
    """A camera with a stream (pulled here or by a gateway) gets its frames from it: its tile
    says so, not the call to post one."""
    ip, url = node
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    report = {"gateway": "gateway-0", "reported_at": now, "ttl_s": 300,
              "source": {"source": "rtsp://10.0.0.5:554/lobby", "state": "connecting", "since": now}}
    assert httpx.put(f"{url}/cameras/lobby-cam/source", json=report, timeout=30).status_code == 204
    page = open_page(url)
    try:
        goto(page, "cameras")
        tile = page.locator("article.tile[data-camera=lobby-cam]")
        tile.locator(".stream-connecting").wait_for()
        assert tile.locator(".first-step").inner_text() == "No frame yet: the first one comes from its stream."
        assert tile.locator("details.how").count() == 0
    finally:
        assert httpx.delete(f"{url}/cameras/lobby-cam/source", timeout=30).status_code == 204
    tile.locator("details.how").wait_for()  # no stream any more: how to post one again


def test_a_portrait_frame_keeps_its_shape_and_its_zones(node, open_page):
    ip, url = node
    r = httpx.post(f"{url}/detect?camera_id=lobby-cam", timeout=30,
                   files={"image": ("p.jpg", jpeg(*PORTRAIT, RED), "image/jpeg")})
    assert r.status_code == 200, r.text
    page = open_page(url)
    goto(page, "cameras")
    frame = page.locator("article.tile[data-camera=lobby-cam] .frame")
    img = frame.locator("img")
    img.wait_for(state="visible")
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
    page.wait_for_function("f => f.dataset.aspect !== undefined", arg=frame.element_handle())
    box = frame.bounding_box()
    assert box["width"] > box["height"]  # the tile stays 16:9 ...
    shot = np.asarray(Image.open(io.BytesIO(frame.screenshot())).convert("RGB")).astype(int)
    h, w = shot.shape[:2]
    red = (np.abs(shot - RED).sum(axis=2) < 60).any(axis=0)  # columns showing the picture
    cols = np.flatnonzero(red)
    assert cols.size, "the picture is not on screen"
    shown = (cols[-1] - cols[0] + 1) / h
    assert shown == pytest.approx(PORTRAIT[0] / PORTRAIT[1], rel=0.06)  # ... the picture keeps its own shape
    assert cols[0] > w * 0.2 and cols[-1] < w * 0.8  # centred, bars on both sides
    # the whole-frame zone covers the picture, not the bars (its box includes the stroke's margin)
    zone = frame.locator("svg.overlay polygon").bounding_box()
    margin = (zone["height"] - box["height"]) / 2
    assert 0 <= margin < 6
    assert (zone["width"] - 2 * margin) / box["height"] == pytest.approx(PORTRAIT[0] / PORTRAIT[1], rel=0.02)
    assert zone["x"] + zone["width"] / 2 - box["x"] == pytest.approx((cols[0] + cols[-1]) / 2 * box["width"] / w, abs=2)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_frames_the_service_pulls_are_counted_as_pulled_on_the_status_page(node, open_page, loop):
    """During `make demo` the page read "Last 10 s: 0 images" while demo-cam streamed."""
    ip, url = node
    metrics = state_of(ip.app).metrics
    feed = AsyncSink(loop, EngineFeed(build_flow(ip.rules, metrics, lambda: ip.engine), DetectParams()))
    time.sleep(10.05 - time.time() % 10)  # a fresh 10 s bucket: the frames of the tests above are not in it
    now = dt.datetime.now(dt.timezone.utc)
    rgb = np.full((180, 320, 3), 90, np.uint8)
    for i in range(4):  # what the embedded ingest hands over for a camera with a source
        pulled = Frame("lobby-cam", now + dt.timedelta(milliseconds=500 * i), 320, 180, rgb=rgb)
        assert feed(pulled) == SinkResult.sent()
    r = httpx.post(f"{url}/detect?camera_id=front-door", timeout=30,
                   files={"image": ("f.jpg", jpeg(320, 180, (90, 90, 90)), "image/jpeg")})
    assert r.status_code == 200, r.text
    last = httpx.get(f"{url}/status", timeout=30).json()["recent"][-1]
    assert (last["images"], last["pulled"], last["requests"]) == (5, 4, 1)
    page = open_page(url)
    goto(page, "status")
    fact = page.locator("dl.facts-list dt:text-is('Last 10 s') + dd")
    fact.wait_for()
    assert fact.inner_text() == "5 images (4 pulled from camera streams, 1 posted), 0 errors"


def starter_rule(url: str) -> dict:
    cams = httpx.get(f"{url}/site", timeout=30).json()["config"]["cameras"]
    zone = next(z for c in cams if c["id"] == "front-door" for z in c["zones"])
    return {"kind": zone["kind"], **zone["rules"][0]}


def test_zone_editor_speaks_in_words_and_edits_active_hours_with_time_inputs(node, open_page):
    """The zone's kind is a select (with its own label under "Other"), the rule type a select in
    words, the parameters labelled in words with their units, and active hours time windows
    (from, to, the days) instead of JSON; what is saved reads back the same (issue 42)."""
    ip, url = node
    page = open_page(url)
    goto(page, "zones?camera=front-door")
    page.wait_for_selector("form.zone-form[data-ready=true]")
    kind = page.get_by_label("Kind of zone")
    assert kind.evaluate("el => el.tagName") == "SELECT" and kind.input_value() == "restricted"
    rule = page.locator("fieldset.rule").first
    rule_type = rule.get_by_label("Rule type")
    assert rule_type.input_value() == "intrusion"
    assert rule_type.locator("option:checked").inner_text() == "Intrusion"
    assert "Line crossing" in rule_type.locator("option").all_inner_texts()
    labels = page.locator("fieldset.rule label").evaluate_all("ls => ls.map((l) => l.textContent.trim())")  # folded too
    for words in ("Minimum duration (seconds)", "Cooldown (seconds)", "Clear after (seconds)",
                  "Minimum confidence (0 to 1)"):
        assert any(label.startswith(words) for label in labels), "; ".join(labels)
    assert not [label for label in labels if re.search(r"\b(Min|Max) \w+|\bS$", label)], labels
    hours = rule.locator("fieldset.hours")
    assert "Active at all hours" in hours.inner_text()
    assert page.locator("textarea[data-field$=active_hours]").count() == 0  # no JSON to write
    # a night window on Friday and Saturday
    hours.get_by_role("button", name="Add time window").click()
    hours.get_by_label("From").fill("22:00")
    hours.get_by_label("To").fill("06:00")
    hours.get_by_label("Fri").check()
    hours.get_by_label("Sat").check()
    rule.get_by_label("Cooldown (seconds)").fill("45")
    kind.select_option("__other")
    page.get_by_label("Other kind").fill("bike_rack")
    page.get_by_role("button", name="Save zone").click()
    page.wait_for_selector(".zone-form .result.ok, .zone-form .result.error")
    assert "Saved" in page.locator(".zone-form .result").inner_text(), page.locator(
        ".field-error:not(:empty), ul.errors li").all_inner_texts()
    saved = starter_rule(url)
    assert saved["kind"] == "bike_rack" and saved["cooldown_s"] == 45
    windows = [(w["start"][:5], w["end"][:5], w["days"]) for w in saved["active_hours"]]
    assert windows == [("22:00", "06:00", ["fri", "sat"])]
    # read back into the same widgets
    page.reload()
    page.wait_for_selector("form.zone-form[data-ready=true]")
    assert page.get_by_label("Kind of zone").input_value() == "__other"
    assert page.get_by_label("Other kind").input_value() == "bike_rack"
    hours = page.locator("fieldset.rule").first.locator("fieldset.hours")
    assert (hours.get_by_label("From").input_value(), hours.get_by_label("To").input_value()) == ("22:00", "06:00")
    assert [hours.get_by_label(d).is_checked() for d in ("Thu", "Fri", "Sat")] == [False, True, True]
    # a window without its end is refused, the error next to the active hours; nothing changes
    hours.get_by_label("To").fill("")
    page.get_by_role("button", name="Save zone").click()
    error = page.locator("[data-for$='.active_hours'] > .field-error")
    error.wait_for(state="visible")
    assert "Not saved" in page.locator(".zone-form .result").inner_text() and starter_rule(url) == saved
    # no window: active at all hours again, and the usual kind back
    hours.get_by_role("button", name="Remove window").click()
    page.get_by_label("Kind of zone").select_option("restricted")
    page.get_by_role("button", name="Save zone").click()
    page.wait_for_selector(".zone-form .result.ok")
    after = starter_rule(url)
    assert after["kind"] == "restricted" and after.get("active_hours") is None
