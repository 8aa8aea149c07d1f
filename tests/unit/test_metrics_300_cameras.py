"""Per-camera metrics at 300 cameras (issue 26, item 4): with the default
``METRICS_MAX_CAMERAS`` (500) every camera of a 300-camera site keeps its own series (none is
folded into ``_other``), and the scrape's size is what README's settings table says it costs.

Every camera posts a frame (a person in its restricted zone: an intrusion event) and has a
gateway's stream report, so the detection, rule, view-check and ingest families all carry
their per-camera series, as on a live site.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter

import pytest

from app.inference.shadow.book import OVERALL
from app.core.metrics import OTHER_CAMERA
from tests.support.console_util import site_app, write_big_site
from tests.support.inprocess import png

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
N = 300
# What one camera costs in /metrics (measured with this test; README, CAMPUSGUARD_METRICS_MAX_CAMERAS):
# per camera and class detected, per zone, per rule, per view-check kind, per stream state...
SERIES_PER_CAMERA_BOUND = 60
LABEL = re.compile(r'camera_id="([^"]*)"')


def series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_a_300_camera_site_keeps_every_camera_in_its_own_series(tmp_path, capsys):
    ids = write_big_site(tmp_path / "site.yaml", N)
    with site_app(tmp_path, tmp_path / "site.yaml") as ip:
        idle = len(series(ip.client.get("/metrics").text))
        now = dt.datetime.now(dt.UTC).isoformat()
        image = png(160, 120)
        for cid in ids:
            r = ip.client.post(f"/detect?camera_id={cid}", files={"image": ("f.png", image, "image/png")})
            assert r.status_code == 200, r.text
            report = {"gateway": "gw-0", "reported_at": now, "ttl_s": 300,
                      "source": {"source": f"rtsp://10.0.0.1/{cid}", "state": "streaming", "since": now}}
            assert ip.client.put(f"/cameras/{cid}/source", json=report).status_code == 204
        lines = series(ip.client.get("/metrics").text)
    # camera_id="_all" is the shadow lane's overall series (app/inference/shadow/book.py), not a camera
    per_camera = [line for line in lines if LABEL.search(line) and LABEL.search(line).group(1) != OVERALL]
    labels = Counter(LABEL.search(line).group(1) for line in per_camera)
    assert OTHER_CAMERA not in labels
    assert set(labels) == set(ids)
    families = {name for line in per_camera if LABEL.search(line).group(1) == ids[0]
                for name in [line.split("{")[0]]}
    for family in ("campusguard_camera_detections_total", "campusguard_events_total",
                   "campusguard_camera_last_frame_age_seconds", "campusguard_camera_view_problem",
                   "campusguard_source_state"):
        assert family in families, family
    most = max(labels.values())
    assert most <= SERIES_PER_CAMERA_BOUND, labels.most_common(3)
    with capsys.disabled():
        print(f"\n/metrics at {N} cameras: {len(lines)} series ({idle} before any frame), {len(per_camera)} with "
              f"a camera_id ({len(per_camera) / N:.1f} per camera, at most {most})")
