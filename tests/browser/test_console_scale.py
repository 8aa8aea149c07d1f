"""The Cameras page of a 300-camera site in a real Chromium (issue 26, item 4).

The app runs in-process over a fake detector (the model is not the point) on a real socket;
Playwright records every request the page makes. Acceptance (the issue's "Done when"): with 300
cameras a refresh costs at most 5 requests besides the frames of tiles on screen, and the first
tiles appear within 1 s of navigation (the browser's own performance clock).
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from tests.browser.conftest import screenshot
from tests.support.console_util import serve, site_app, write_big_site
from tests.support.inprocess import png
from tests.support.net import free_port

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
N = 300
VIEWER = "viewer-key-scale-0123"
CAMERA = "camera-key-scale-0123"
FIRST_TILES_MS = 1000
MAX_REQUESTS_PER_REFRESH = 5  # besides frames of visible tiles
# the first tile's arrival on the page's performance clock (ms since navigation started)
FIRST_TILE_PROBE = """
window.__firstTile = null;
new MutationObserver((_, obs) => {
  if (document.querySelector('.tile')) { window.__firstTile = performance.now(); obs.disconnect(); }
}).observe(document, { childList: true, subtree: true });
"""
FRAME = re.compile(r"/cameras/([^/]+)/frame\.jpg$")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scale")
    write_big_site(tmp / "site.yaml", N)
    with site_app(tmp, tmp / "site.yaml", api_keys=f"viewer:{VIEWER},camera:{CAMERA}") as ip, \
            serve(ip.app, free_port()) as url:
        with httpx.Client(base_url=url, headers={"X-API-Key": CAMERA}, timeout=30) as cams:
            yield url, cams


def post_frame(cams: httpx.Client, camera_id: str) -> None:
    r = cams.post(f"/detect?camera_id={camera_id}", files={"image": ("f.png", png(320, 180), "image/png")})
    assert r.status_code == 200, r.text


class Recorder:
    """Every request the page sends to the server (not the blob: URLs of frames it shows) and
    every response's status, in order."""

    def __init__(self, page) -> None:
        self.requests: list[str] = []
        self.statuses: dict[str, list[int]] = {}
        page.on("request", self.on_request)
        page.on("response", lambda res: self.statuses.setdefault(urlparse(res.url).path, []).append(res.status))

    def on_request(self, req) -> None:
        u = urlparse(req.url)
        if u.scheme in ("http", "https"):
            self.requests.append(f"{u.path}?{u.query}")

    def clear(self) -> None:
        self.requests.clear()
        self.statuses.clear()


def refreshes(requests: list[str]) -> list[list[str]]:
    """The requests split at each refresh's first summary page (limit below the maximum and no cursor)."""
    out: list[list[str]] = []
    for req in requests:
        query = parse_qs(req.split("?", 1)[1])
        if req.startswith("/camera-summary?") and "cursor" not in query:
            out.append([])
        if out:
            out[-1].append(req)
    return out


def visible_ids(page) -> set[str]:
    """Tiles within the viewport (plus the observer's 200 px margin)."""
    return set(page.evaluate("""() => [...document.querySelectorAll('.tile')].filter((t) => {
        const r = t.querySelector('.frame').getBoundingClientRect();
        return r.bottom >= -200 && r.top <= innerHeight + 200; }).map((t) => t.dataset.camera)"""))


def frames_of(requests: list[str]) -> list[str]:
    return [m.group(1) for req in requests if (m := FRAME.search(req.split("?")[0]))]


def test_300_cameras_few_requests_per_refresh_first_tiles_within_1s_lazy_frames(site, open_page):
    url, cams = site
    for i in [*range(0, 30), *range(290, 300)]:
        post_frame(cams, f"cam-{i:03d}")
    time.sleep(3)  # the frames' events and snapshots are written in the background: let them settle
    page = open_page(url, VIEWER)
    page.context.add_init_script(FIRST_TILE_PROBE)
    # a cold browser first (its renderer to start, every file of the page to fetch): reported, and
    # what a guard's browser that opened the console before has (the acceptance figure) asserted
    page.goto("/ui/?cold=1#/cameras")
    page.wait_for_function(f"() => document.querySelectorAll('.tile').length === {N}")
    cold_ms = page.evaluate("window.__firstTile")
    rec = Recorder(page)
    page.goto("/ui/#/cameras")
    page.wait_for_function(f"() => document.querySelectorAll('.tile').length === {N}")
    first_tile_ms = page.evaluate("window.__firstTile")
    summary = page.evaluate("performance.getEntriesByType('resource').filter((r) => r.name.includes('/camera-summary'))"
                            ".map((r) => [Math.round(r.startTime), Math.round(r.responseEnd)])")
    print(f"\nfirst tile {first_tile_ms:.0f} ms after navigation start (cold browser: {cold_ms:.0f} ms); summary pages "
          f"(start, end ms): {summary}; first load: {len(rec.requests)} requests")
    assert first_tile_ms is not None and first_tile_ms <= FIRST_TILES_MS, first_tile_ms

    # the first load: no per-camera status request; frames only for tiles on screen
    assert not [r for r in rec.requests if re.match(r"/cameras/[^/]+\?", r)], "a per-camera request"
    page.wait_for_function("() => document.querySelectorAll('.tile img:not([hidden])').length > 0")
    page.wait_for_function("() => document.querySelectorAll('.tile svg.overlay polygon').length === %d" % N)
    shown = visible_ids(page)
    fetched = set(frames_of(rec.requests))
    assert fetched and fetched <= shown, (fetched - shown)
    assert not fetched & {f"cam-{i:03d}" for i in range(290, 300)}  # far below: not asked for
    screenshot(page, "cameras-300")

    # quiet refreshes: every summary page is an unchanged 304, GET /site is not asked again, no frame
    rec.clear()
    page.wait_for_timeout(6800)  # two refreshes (every 3 s)
    cycles = refreshes(rec.requests)
    assert len(cycles) >= 2, rec.requests
    for cycle in cycles:
        assert len([r for r in cycle if not FRAME.search(r.split("?")[0])]) <= MAX_REQUESTS_PER_REFRESH, cycle
    assert "/site" not in rec.statuses and not frames_of(rec.requests), rec.requests
    assert set(rec.statuses["/camera-summary"]) == {304}, rec.statuses

    # a new frame of a camera on screen: that frame is fetched, and nothing per camera besides
    rec.clear()
    post_frame(cams, "cam-001")
    page.wait_for_timeout(3500)
    cycles = refreshes(rec.requests)
    assert cycles and all(len([r for r in c if not FRAME.search(r.split("?")[0])]) <= MAX_REQUESTS_PER_REFRESH
                          for c in cycles), cycles
    assert frames_of(rec.requests) == ["cam-001"], rec.requests
    print("a refresh after a new frame:", cycles)
    assert all(len(c) <= MAX_REQUESTS_PER_REFRESH + 1 for c in cycles)  # + the one visible frame

    # scrolled to the bottom: those tiles' frames load now
    rec.clear()
    page.locator('.tile[data-camera="cam-299"]').scroll_into_view_if_needed()
    page.wait_for_function("""() => !document.querySelector('.tile[data-camera="cam-299"] img').hidden""")
    assert "cam-299" in frames_of(rec.requests) and "cam-000" not in frames_of(rec.requests)


SHOWN = "() => [...document.querySelectorAll('.tile')].map(t => t.dataset.camera)"


def settles(page, js: str, expected) -> None:
    """Wait for the page to settle on ``expected`` (what the function ``js`` returns, compared as
    JSON). A filter change clears the tiles and refills them page by page, and the name field
    applies 300 ms after the last keystroke (so clearing it and then picking an area restarts
    twice), so a check of one moment can see a state that is not the answer; on a timeout the
    last state is in the error."""
    try:
        page.wait_for_function(f"want => JSON.stringify(({js})()) === JSON.stringify(want)", arg=expected,
                               timeout=15_000)
    except Exception:
        raise AssertionError(f"the page settled on {page.evaluate(js)}, not {expected}") from None


def shows(page, expected: list[str]) -> None:
    settles(page, SHOWN, expected)


def test_filter_by_name_area_and_status_and_group_by_area(site, open_page):
    url, cams = site
    post_frame(cams, "cam-002")
    page = open_page(url, VIEWER)
    page.goto("/ui/#/cameras")
    page.wait_for_function(f"() => document.querySelectorAll('.tile').length === {N}")

    page.get_by_label("Name").fill("Camera 01")
    shows(page, [f"cam-{i:03d}" for i in range(10, 20)])
    page.get_by_label("Name").fill("")

    page.get_by_label("Area", exact=True).select_option("library")  # i % 5 == 1 and i % 6 != 5
    expected = [f"cam-{i:03d}" for i in range(N) if i % 5 == 1 and i % 6 != 5]
    shows(page, expected)
    assert "Showing 50." in page.locator(".summary").inner_text()

    page.get_by_label("Area", exact=True).select_option("")
    page.get_by_label("Status").select_option("online")
    # every tile shown is online, cam-002 (which just sent a frame) among them, and not the whole site
    settles(page, """() => {
      const n = document.querySelectorAll('.tile').length;
      return n > 0 && n < 60 && n === document.querySelectorAll('.tile .badge.status-online').length
        && !!document.querySelector('.tile[data-camera="cam-002"]');
    }""", True)

    page.get_by_label("Status").select_option("")
    page.get_by_label("Group by area").check()
    settles(page, """() => [document.querySelectorAll('.area-group .tile').length,
      [...document.querySelectorAll('.area-group > h2')].map(h => h.textContent),
      [...document.querySelectorAll('.area-group[data-area="dorms"] .tile')].map(t => t.dataset.camera)]""",
            [N, ["north-gate", "library", "car-park", "sports-hall", "dorms", "No area"],
             [f"cam-{i:03d}" for i in range(N) if i % 5 == 4 and i % 6 != 5]])
