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


def site(cameras: int, line: bool = True) -> SiteConfig:
    """The issue's site (``line``: with the line-crossing rule, which needs tracking); without
    it, the counting rules only, with ``tracker.skip_when_unneeded`` (the cheap frame)."""
    rules = [{"type": "intrusion", "classes": ["person"]},
             {"type": "crowd", "classes": ["person"], "min_count": 3, "min_duration_s": 5}]
    if line:
        rules.append({"type": "line_crossing", "line": [[0.5, 0.3], [0.5, 1.0]], "classes": ["person"],
                      "direction": "both"})
    zone = {"name": "yard", "polygon": [[0.0, 0.3], [1.0, 0.3], [1.0, 1.0], [0.0, 1.0]], "rules": rules}
    return parse_site_config({"version": 1, "tracker": {"skip_when_unneeded": not line},
                              "cameras": [{"id": c, "zones": [zone]} for c in camera_ids(cameras)]})


def live_rate(cameras: int, frames: int, objects: int, workers: int, warmup: int = 3,
              line: bool = True) -> dict[str, Any]:
    """The live path (``RulesService.evaluate``, events stored in SQLite) with
    CAMPUSGUARD_RULES_WORKERS=``workers``: ``frames`` timed frames per camera after ``warmup``
    untimed ones (worker start-up, tracker imports). One calling thread in-process (threads
    do not help: the GIL), two per worker with shards (one frame in flight while the next is sent)."""
    from app.config import Settings
    from app.core.metrics import Metrics
    from app.wiring import build_rules

    threads = 1 if workers == 1 else 2 * workers
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "site.yaml"
        path.write_text(yaml.safe_dump(site(cameras, line).model_dump(mode="json")))
        rules = build_rules(Settings(_env_file=None, site_config=path, events_db_url=f"sqlite:///{tmp}/e.db",
                                     snapshot_dir=Path(tmp) / "snaps", clips=False, site_watch_s=0,
                                     rules_workers=workers), Metrics())
        rules.start()
        try:
            t0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
            cams = camera_ids(cameras)
            shares = [cams[i::threads] for i in range(threads)]
            events = [0] * threads

            def run(index: int, first: int, last: int) -> None:
                for f in range(first, last):
                    dets = people(f, objects)
                    when = t0 + dt.timedelta(seconds=f)
                    for cam in shares[index]:
                        events[index] += len(rules.evaluate(cam, when, (W, H), dets))

            def in_threads(first: int, last: int) -> float:
                pool = [threading.Thread(target=run, args=(i, first, last)) for i in range(threads)]
                start = time.perf_counter()
                for t in pool:
                    t.start()
                for t in pool:
                    t.join()
                return time.perf_counter() - start

            in_threads(0, warmup)
            events = [0] * threads
            seconds = in_threads(warmup, warmup + frames)
        finally:
            rules.stop()
    n = cameras * frames
    return {"path": "live (RulesService.evaluate)", "site": "intrusion+crowd+line" if line else
            "intrusion+crowd, no tracking", "workers": workers, "threads": threads, "cameras": cameras,
            "objects": objects, "camera_frames": n, "seconds": round(seconds, 2),
            "camera_frames_per_s": round(n / seconds, 1), "events": sum(events)}


VARIANTS = ((1, True), (2, True), (1, False), (2, False))  # (workers, with the line-crossing rule)


def interleaved(cameras: int, frames: int, objects: int, rounds: int,
                variants: tuple[tuple[int, bool], ...] = VARIANTS, progress: Any = None) -> dict[str, Any]:
    """``rounds`` rounds of every variant in turn (so machine load hits each alike); per
    variant the median rate and its ratio to the first (1 worker, the issue's site), with the
    load average."""
    import os
    import statistics

    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        for w, line in variants:
            runs.append({"round": r + 1, **live_rate(cameras, frames, objects, w, line=line)})
            if progress is not None:
                progress()
    keyed = {v: [x for x in runs if (x["workers"], x["site"] == "intrusion+crowd+line") == v] for v in variants}
    rates = {v: statistics.median(x["camera_frames_per_s"] for x in keyed[v]) for v in variants}
    summary = [{"workers": v[0], "site": keyed[v][0]["site"], "median_camera_frames_per_s": round(rates[v], 1),
                "ratio_to_first": round(rates[v] / rates[variants[0]], 2),
                "rounds": [x["camera_frames_per_s"] for x in keyed[v]]} for v in variants]
    return {"runs": runs, "summary": summary, "load_average_end": [round(x, 2) for x in os.getloadavg()]}
