"""The status page's shadow card in a real Chromium (issue 27): the app in-process over a fake
primary and a fake reference that disagree on one camera's frames, on a real socket.

The reference misses the car the primary reports on bright frames only, so the bright camera's
agreement is 2/3 and the plain camera's 1: the page must show the overall figures /status
gives, the cameras worst first, and (to an admin only) the worst frames with their images.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.support.console_util import serve
from tests.support.fakes import FakeDetector
from tests.support.inprocess import IMGSZ, SCENE, inprocess_app, png
from tests.support.net import free_port
from tests.support.shadow import fake_lane

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]
VIEWER, ADMIN, CAMERA = "viewer-key-shadow-01", "admin-key-shadow-001", "camera-key-shadow-01"
FRAMES = {"bright-cam": 250, "plain-cam": 90}  # grey level of the camera's frames
PER_CAMERA = 3


class BlindOnBrightFrames(FakeDetector):
    """Sees the car the primary reports only on frames darker than mid-grey."""

    def __init__(self) -> None:
        super().__init__(**SCENE)

    def infer(self, batch: np.ndarray) -> np.ndarray:
        out = super().infer(batch)
        for i, frame in enumerate(batch):
            level = float(frame.mean())
            if (level / 255 if level > 1 else level) > 0.6:
                out[i, 5, 1] = 0.0
        return out


def pct(v: float) -> str:
    return f"{v * 100:.1f} %"


@pytest.fixture(scope="module")
def shadowed():
    from app.config import Settings

    keys = f"viewer:{VIEWER},admin:{ADMIN},camera:{CAMERA}"
    settings = Settings(_env_file=None, imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, api_keys=keys)
    with inprocess_app(settings) as env:
        lane = fake_lane(env, reference=BlindOnBrightFrames())
        try:
            with serve(env.app, free_port()) as url, \
                    httpx.Client(base_url=url, headers={"X-API-Key": CAMERA}, timeout=30) as cams:
                for camera, grey in FRAMES.items():
                    image = png(128, 96, grey)
                    for _ in range(PER_CAMERA):
                        r = cams.post(f"/detect?camera_id={camera}", files={"image": ("f.png", image, "image/png")})
                        assert r.status_code == 200, r.text
                assert lane.drain(30)
                yield url
        finally:
            lane.stop()


def shadow_status(url: str) -> dict:
    return httpx.get(f"{url}/status", headers={"X-API-Key": VIEWER}, timeout=10).json()["shadow"]


def fact(page, name: str) -> str:
    return page.locator(f"#shadow dl.facts-list dt:text-is('{name}') + dd").inner_text()


def test_status_page_shows_the_shadow_figures_worst_camera_first(shadowed, open_page):
    want = shadow_status(shadowed)
    all_ = want["overall"]
    # bright: 2 primary boxes, 1 reference box, 1 matched per frame; plain: 2, 2, 2
    p, r, m = 2 * 2 * PER_CAMERA, 3 * PER_CAMERA, 3 * PER_CAMERA
    assert want["compared"] == 2 * PER_CAMERA and all_["agreement"] == pytest.approx(2 * m / (p + r), abs=1e-4)
    page = open_page(shadowed, VIEWER)
    page.goto("/ui/#/status")
    page.locator("#shadow-cameras tbody tr").first.wait_for()
    assert fact(page, "State") == "on" and fact(page, "Reference") == "fake"
    assert fact(page, "Sample rate").startswith("100.0 %")
    assert fact(page, "Agreement (15 min)") == pct(all_["agreement"]) == pct(18 / 21)
    assert (fact(page, "Recall"), fact(page, "Precision")) == (pct(all_["recall"]), pct(all_["precision"]))
    assert fact(page, "Confidence drift") == "+0.000"
    assert (fact(page, "Frames compared"), fact(page, "Frames dropped")) == (str(2 * PER_CAMERA), "0")
    rows = [page.locator("#shadow-cameras tbody tr").nth(i).locator("td").all_inner_texts() for i in range(2)]
    bright, plain = want["cameras"]["bright-cam"], want["cameras"]["plain-cam"]
    assert rows == [["bright-cam", pct(bright["agreement"]), pct(bright["recall"]), pct(bright["precision"]),
                     "+0.000", str(PER_CAMERA)],
                    ["plain-cam", pct(plain["agreement"]), "100.0 %", "100.0 %", "+0.000", str(PER_CAMERA)]]
    assert rows[0][1] == pct(2 / 3)
    assert fact(page, "Alert below") == pct(want["alert_below"]) == "95.0 %"  # the fp32 floor
    marked = page.locator("#shadow-cameras tbody tr td.refused").all_inner_texts()
    assert marked == [pct(2 / 3)]  # below the floor: bright-cam only
    assert page.locator("#shadow-worst-open").count() == 0  # the frames are for admins


def test_an_admin_opens_the_worst_frames_with_both_box_sets(shadowed, open_page):
    page = open_page(shadowed, ADMIN)
    page.goto("/ui/#/status")
    page.locator("#shadow-worst-open").click()
    figures = page.locator("#shadow-worst figure.shadow-frame")
    figures.first.wait_for()
    listing = httpx.get(f"{shadowed}/shadow/worst", headers={"X-API-Key": ADMIN}, params={"limit": 10}).json()
    assert listing["frames"] and all(f["camera_id"] == "bright-cam" for f in listing["frames"])
    assert figures.count() == len(listing["frames"])
    assert [figures.nth(i).get_attribute("data-id") for i in range(figures.count())] == [f["id"] for f in listing["frames"]]
    caption = figures.first.locator("figcaption").inner_text()
    assert caption.startswith(f"bright-cam · agreement {pct(2 / 3)}") and "2 primary / 1 reference boxes" in caption
    img = figures.first.locator("img")
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=img.element_handle())
    assert img.evaluate("(img) => img.src").startswith("blob:")
    page.wait_for_timeout(3500)  # a refresh of the status cards keeps the opened frames
    assert figures.count() == len(listing["frames"])
