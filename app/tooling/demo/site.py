"""The first run's site file, and the demo camera added to it.

``make run`` (``campusguard serve --starter-site``) starts with rules on: when the site
file is missing it is created from ``STARTER`` (one camera that POSTs its frames, with a
zone and an intrusion rule, and the lines to give it a stream commented in), so
the console's cameras, events and zone editor work at once. ``make demo`` adds ``demo-cam``,
whose source is the generated walk clip (clip.py): a counting line across the middle of the
view and a zone on its right, so a newcomer sees frames, a crossing and an event.

Both write like the zone editor does: the new text is validated by the service's own loader
first, then written atomically, and an existing file keeps its comments and permissions.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from app.core.files import atomic_write
from app.rules.site.emit import round_trip_yaml, to_node
from app.rules.site.loader import parse_site_bytes, read_site_bytes

DEMO_CAMERA = "demo-cam"
STARTER = """\
# CampusGuard site file: your cameras, their zones and rules (docs/rules.md).
# `make run` created it on the first run. Draw zones in the console (http://127.0.0.1:8000/ui,
# "Zones") or edit this file: the service reloads it within seconds when it changes.
version: 1
site: My campus
timezone: UTC
cameras:
  # A camera that sends its own frames: POST /detect?camera_id=front-door (README).
  # To let the service pull its stream instead, give it a source (docs/cameras.md), e.g.
  #   source:
  #     url: rtsp://${FRONT_DOOR_USER}:${FRONT_DOOR_PASSWORD}@192.168.1.20:554/stream2
  #     fps: 2
  - id: front-door
    name: Front door
    zones:
      - name: entrance
        kind: restricted
        polygon: [[0.05, 0.45], [0.95, 0.45], [0.95, 0.98], [0.05, 0.98]]
        rules:
          # a person's feet in the zone raise an event at any hour; to watch only at night add
          #   active_hours: [{start: "22:00", end: "06:00"}]
          - type: intrusion
"""


def ensure_starter(path: Path) -> bool:
    """Create the starter site file at ``path`` when there is none; whether it was created."""
    path = Path(path)
    if path.exists():
        return False
    parse_site_bytes(STARTER.encode(), path)  # the starter is a valid site file (tested too)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, STARTER.encode(), mode=0o644)
    return True


def demo_camera(clip: Path) -> dict:
    """``demo-cam``: the walk clip as its stream; a line the walker crosses left to right
    (``in``: drawn from the bottom up) and a zone on the right he walks into."""
    return {
        "id": DEMO_CAMERA, "name": "Demo camera (generated clip)",
        "source": {"url": Path(clip).resolve().as_uri(), "fps": 2},
        "zones": [
            {"name": "walkway", "kind": "counting", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]],
             "rules": [{"type": "line_crossing", "name": "crossing", "line": [[0.5, 0.98], [0.5, 0.35]],
                        "direction": "in", "cooldown_s": 5}]},
            {"name": "lawn", "kind": "restricted", "polygon": [[0.62, 0.55], [0.98, 0.55], [0.98, 0.98], [0.62, 0.98]],
             "rules": [{"type": "intrusion", "clear_after_s": 2, "cooldown_s": 10}]},
        ],
    }


def add_demo_camera(path: Path, clip: Path) -> bool:
    """Add (or point at ``clip`` again) ``demo-cam`` in the site file; whether the file changed."""
    path = Path(path)
    old = read_site_bytes(path)
    yaml = round_trip_yaml()
    doc = yaml.load(old.decode("utf-8"))
    camera = demo_camera(clip)
    cameras = doc["cameras"]
    index = next((i for i, c in enumerate(cameras) if c.get("id") == DEMO_CAMERA), None)
    if index is not None and cameras[index].get("source", {}).get("url") == camera["source"]["url"]:
        return False
    if index is None:
        cameras.append(to_node(camera))
    else:
        cameras[index] = to_node(camera)
    out = io.StringIO()
    yaml.dump(doc, out)
    new = out.getvalue().encode()
    parse_site_bytes(new, path)  # SiteConfigError: nothing is written
    atomic_write(path, new, mode=os.stat(path).st_mode & 0o777)
    return True


def removal(path: Path) -> str:
    """How to take ``demo-cam`` out again: it stays in the site file, so later ``make run``s
    keep pulling the clip (printed by ``make demo`` when it adds the camera; docs/cameras.md)."""
    return (f"demo-cam stays in {path} for later `make run`s too; to remove it, delete its "
            f"`- id: {DEMO_CAMERA}` block under `cameras:` (the service reloads the file within "
            "seconds), or delete the file to get the starter site back on the next `make run`")


def next_steps(host: str, port: int) -> str:
    """What a newcomer does after ``make run``: where the console is, and the one call that makes
    the starter camera raise an event (bus.jpg's people stand in the starter zone)."""
    import importlib.util

    spec = importlib.util.find_spec("ultralytics")
    bus = (Path(spec.origin).parent / "assets" / "bus.jpg") if spec and spec.origin else Path("bus.jpg")
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{shown}:{port}"
    return (f"console: {base}/ui (ready when {base}/health/ready answers 200)\n"
            f"next: post a frame as the starter camera, which raises an intrusion event:\n"
            f"  curl -s -F image=@{bus} '{base}/detect?camera_id=front-door'\n"
            f"  or run `make demo` for a camera the service streams itself (docs/cameras.md)")
