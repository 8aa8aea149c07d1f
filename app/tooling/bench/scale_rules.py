"""Rules at site scale: camera-frames/s of the live evaluator and of replay.

The site: ``cameras`` cameras, each with one zone holding an intrusion, a crowd and a
line-crossing rule; each frame carries ``objects`` people walking across the frame (so
tracks live, zones fill and lines are crossed), at 1 fps per camera.
"""

from __future__ import annotations

import datetime as dt
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from app.rules.site.loader import parse_site_config
from app.rules.site.schema import SiteConfig
from app.tooling.bench.scale_data import H, W, camera_ids, people

def site(cameras: int) -> SiteConfig:
    zone = {"name": "yard", "polygon": [[0.0, 0.3], [1.0, 0.3], [1.0, 1.0], [0.0, 1.0]], "rules": [
        {"type": "intrusion", "classes": ["person"]},
        {"type": "crowd", "classes": ["person"], "min_count": 3, "min_duration_s": 5},
        {"type": "line_crossing", "line": [[0.5, 0.3], [0.5, 1.0]], "classes": ["person"], "direction": "both"}]}
    return parse_site_config({"version": 1, "cameras": [{"id": c, "zones": [zone]} for c in camera_ids(cameras)]})


def live_rate(cameras: int, frames: int, objects: int, workers: int) -> dict[str, Any]:
    """The live path (``RulesService.evaluate``, events stored in SQLite): ``frames`` frames
    per camera, cameras split over ``workers`` threads."""
    from app.config import Settings
    from app.core.metrics import Metrics
    from app.wiring import build_rules

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "site.yaml"
        path.write_text(yaml.safe_dump(site(cameras).model_dump(mode="json")))
        rules = build_rules(Settings(_env_file=None, site_config=path, events_db_url=f"sqlite:///{tmp}/e.db",
                                     snapshot_dir=Path(tmp) / "snaps", clips=False, site_watch_s=0), Metrics())
        rules.start()
        try:
            t0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
            cams = camera_ids(cameras)
            shares = [cams[i::workers] for i in range(workers)]
            events = [0] * workers

            def run(index: int) -> None:
                for f in range(frames):
                    dets = people(f, objects)
                    when = t0 + dt.timedelta(seconds=f)
                    for cam in shares[index]:
                        events[index] += len(rules.evaluate(cam, when, (W, H), dets))

            threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - start
        finally:
            rules.stop()
    n = cameras * frames
    return {"path": "live (RulesService.evaluate)", "workers": workers, "cameras": cameras, "objects": objects,
            "camera_frames": n, "seconds": round(seconds, 2), "camera_frames_per_s": round(n / seconds, 1),
            "events": sum(events)}
