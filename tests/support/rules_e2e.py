"""The rules end-to-end tests' camera, site copy, frames and crowd driver, shared with the replica tests."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from app.rules.logic.geometry import Polygon
from app.rules.site.loader import load_site_config
from tests.support.rules_util import EXAMPLE_SITE

SECRET = "e2e-webhook-secret-for-tests"  # at least 16 characters, as serve demands


CAMERA = "plaza-cam"


def plaza_polygon() -> Polygon:
    site = load_site_config(EXAMPLE_SITE)
    return Polygon(next(c for c in site.cameras if c.id == CAMERA).zones[0].polygon)


def candidates(dataset: Path) -> tuple[list[Path], list[Path]]:
    """Frames ranked by labelled persons (big enough to detect at 320 px) with feet in the plaza; frames with none."""
    plaza = plaza_polygon()
    ranked, empty = [], []
    for label in sorted((dataset / "labels").glob("*.txt")):
        image = dataset / "images" / f"{label.stem}.jpg"
        if not image.is_file():
            continue
        rows = [line.split() for line in label.read_text().splitlines() if line.strip()]
        persons = [tuple(map(float, r[1:5])) for r in rows if r[0] == "0"]
        if not persons:
            empty.append(image)
            continue
        big = sum(1 for cx, cy, w, h in persons if w * h > 0.02 and plaza.contains(cx, cy + h / 2))
        ranked.append((big, image))
    ranked.sort(key=lambda x: (-x[0], x[1].name))
    return [img for n, img in ranked if n >= 3][:8], empty[:8]


def persons_in_plaza(body: dict) -> int:
    plaza = plaza_polygon()
    w, h = body["width"], body["height"]
    return sum(1 for d in body["detections"] if d["class_name"] == "person"
               and plaza.contains((d["box"]["x1"] + d["box"]["x2"]) / 2 / w, d["box"]["y2"] / h))


def pick_frames(client, dataset: Path) -> tuple[bytes, bytes]:
    """(a frame where the served model sees >= 4 persons in the plaza, a frame where it sees no person).

    Chosen with the server itself (no camera_id: the rules do not see these requests), so
    the test does not depend on which COCO image the model happens to get right at 320 px.
    """
    crowded, empty = candidates(dataset)
    crowd = next((img.read_bytes() for img in crowded
                  if persons_in_plaza(client.post("/detect", files={"image": ("f.jpg", img.read_bytes())}).json()) >= 4),
                 None)
    nobody = next((img.read_bytes() for img in empty
                   if not any(d["class_name"] == "person" for d in client.post(
                       "/detect", files={"image": ("f.jpg", img.read_bytes())}).json()["detections"])), None)
    assert crowd is not None and nobody is not None, "coco-val128 has no suitable frames"
    return crowd, nobody


def site_copy(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    return path


def detect(client, image: bytes, when: dt.datetime | None, **params):
    q = {"camera_id": CAMERA, **params}
    if when is not None:
        q["timestamp"] = when.isoformat()
    r = client.post("/detect", files={"image": ("frame.jpg", image, "image/jpeg")}, params=q)
    assert r.status_code == 200, r.text
    return r


def drive_crowd(client, crowd: bytes, empty: bytes, t0: dt.datetime) -> list[tuple[float, dict]]:
    """Crowd frames at t0+0..12 s, empty frames at +14..18 s; every (second, event) from the replies."""
    seen = []
    for sec in (0, 2, 4, 6, 8, 10, 12):
        body = detect(client, crowd, t0 + dt.timedelta(seconds=sec)).json()
        assert persons_in_plaza(body) >= 3, body["detections"]  # the frame is the same every time
        seen += [(sec, e) for e in body["events"]]
    for sec in (14, 15, 16, 18):
        body = detect(client, empty, t0 + dt.timedelta(seconds=sec)).json()
        seen += [(sec, e) for e in body["events"]]
    return seen


def metric(text: str, name: str, **labels) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None
