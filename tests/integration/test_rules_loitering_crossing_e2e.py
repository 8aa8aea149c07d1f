"""Loitering and line crossing end to end with the real model on a real server, then replay.

A person cut from ultralytics' bus.jpg is pasted on a plain background and moved frame by
frame: down across a counting line, standing in a door zone, back up across the line. The
frames are posted with capture timestamps; the replies, the stored events and
GET /cameras/{id}/counts must show exactly one crossing in each direction and one
loitering event that starts and ends. The same frames go to a second camera whose rules
differ only by their filters (shape, size, inertia, exclusion masks), each of which keeps or
drops the person. 2 x 17 frames at imgsz 320, one server for the module
(started with the detection log on): `campusguard replay` then re-runs the unchanged and a
changed site file over the logged frames.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml


from tests.conftest import REPO, start_server
from tests.support.loitering_frames import frames

pytestmark = pytest.mark.server  # module-scoped real servers (markers: tests/conftest.py)

SITE = {"cameras": [{"id": "door", "zones": [
    {"name": "hall", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "rules": [
        {"type": "line_crossing", "name": "doorway", "line": [[0.0, 0.6], [1.0, 0.6]], "cooldown_s": 1,
         "max_ratio": 1.0}]},
    {"name": "mat", "polygon": [[0, 0.65], [1, 0.65], [1, 1], [0, 1]], "rules": [
        {"type": "loitering", "min_duration_s": 4, "clear_after_s": 3, "cooldown_s": 60, "min_frames": 2}]},
]}, {"id": "filtered", "zones": [  # the same frames again: each filter either keeps or drops the person
    {"name": "hall", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "rules": [
        {"type": "line_crossing", "line": [[0.0, 0.6], [1.0, 0.6]], "cooldown_s": 1, **filters}
        for filters in (
            # the person's box is ~0.39 wide per height and ~6 % of the frame
            {"name": "fits", "min_ratio": 0.2, "max_ratio": 0.6, "max_area": 0.2},
            {"name": "too-wide", "max_ratio": 0.2},
            {"name": "too-narrow", "min_ratio": 0.6},
            {"name": "too-big", "max_area": 0.03},
            # seen from 0 s, every 2 s: the 6th frame is at 10 s, after the way down (8 s)
            {"name": "late", "min_frames": 6})]},
    {"name": "mat", "polygon": [[0, 0.65], [1, 0.65], [1, 1], [0, 1]], "rules": [
        {"type": "loitering", "name": "masked", "min_duration_s": 4, "clear_after_s": 3, "cooldown_s": 60,
         "exclude": [[[0.3, 0.66], [0.7, 0.66], [0.7, 0.75], [0.3, 0.75]]]},  # where the feet stand (0.5, 0.69)
        {"type": "loitering", "name": "mask-aside", "min_duration_s": 4, "clear_after_s": 3, "cooldown_s": 60,
         "exclude": [[[0.0, 0.66], [0.2, 0.66], [0.2, 1.0], [0.0, 1.0]]]}]},
]}]}


@pytest.fixture(scope="module")
def walked(tmp_path_factory, weights):
    """The frames posted to one server with the detection log on: (server, replies' events, t0, folder)."""
    tmp = tmp_path_factory.mktemp("loitering-crossing")
    site = tmp / "site.yaml"
    site.write_text(yaml.safe_dump(SITE))
    server = start_server(tmp, weights, site_config=site, events_db_url=f"sqlite:///{tmp}/events.db",
                          snapshot_dir=tmp / "snaps", imgsz=320, detection_log="true")
    t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=5)
    seen: list[tuple[int, str, dict]] = []
    filtered: list[tuple[int, str, dict]] = []
    try:
        with server.client() as c:
            for sec, jpeg in frames():
                r = c.post("/detect", files={"image": ("f.jpg", jpeg, "image/jpeg")},
                           params={"camera_id": "door", "timestamp": (t0 + dt.timedelta(seconds=sec)).isoformat()})
                assert r.status_code == 200, r.text
                body = r.json()
                assert [d["class_name"] for d in body["detections"]].count("person") == 1, body["detections"]
                seen += [(sec, e["rule"] + ":" + e["state"], e) for e in body["events"]]
                r = c.post("/detect", files={"image": ("f.jpg", jpeg, "image/jpeg")},
                           params={"camera_id": "filtered", "timestamp": (t0 + dt.timedelta(seconds=sec)).isoformat()})
                assert r.status_code == 200, r.text
                filtered += [(sec, e["rule"] + ":" + e["state"], e) for e in r.json()["events"]]
        yield server, seen, t0, tmp, filtered
    finally:
        server.stop()


def test_person_crossing_and_loitering(walked):
    server, seen, t0, _, _ = walked
    with server.client() as c:
        got = [(sec, what) for sec, what, _ in seen]
        # down across the line between 6 s and 8 s; on the mat from 10 s, 4 s later loitering;
        # back up across the line between 22 s and 24 s; off the mat at 22 s, ended 3 s on (24 < 25 <= 26)
        assert got == [(8, "doorway:started"), (8, "doorway:ended"), (14, "loitering:started"),
                       (24, "doorway:started"), (24, "doorway:ended"), (26, "loitering:ended")], got
        ways = [e["objects"][0]["direction"] for _, what, e in seen if what == "doorway:started"]
        assert ways == ["in", "out"]
        loiter_end = next(e for _, what, e in seen if what == "loitering:ended")
        assert dt.datetime.fromisoformat(loiter_end["ended_at"]) == t0 + dt.timedelta(seconds=22)
        counts = c.get("/cameras/door/counts", params={"since": t0.isoformat()}).json()["counts"]
        assert counts == [{"line": "hall/doorway", "direction": "in", "class_name": "person", "count": 1},
                          {"line": "hall/doorway", "direction": "out", "class_name": "person", "count": 1}]
        stored = c.get("/events", params={"camera_id": "door"}).json()
        assert stored["total"] == 3 and all(e["state"] == "ended" for e in stored["items"])
        text = c.get("/metrics").text
        assert 'campusguard_line_crossings_total{camera_id="door",class_name="person",direction="in",line="hall/doorway"} 1.0' in text


def test_filters_keep_or_drop_the_person(walked):
    """The same walk on a second camera whose rules differ only by their filters: box shape and
    size, inertia and exclusion masks, decided on the real model's boxes."""
    server, _, t0, _, filtered = walked
    got = sorted((sec, what) for sec, what, _ in filtered)
    assert got == sorted([(8, "fits:started"), (8, "fits:ended"), (24, "fits:started"), (24, "fits:ended"),
                          (24, "late:started"), (24, "late:ended"),
                          (14, "mask-aside:started"), (26, "mask-aside:ended")]), got
    assert [e["objects"][0]["direction"] for _, what, e in filtered if what == "late:started"] == ["out"]
    with server.client() as c:
        counts = c.get("/cameras/filtered/counts", params={"since": t0.isoformat()}).json()["counts"]
    assert {(n["line"], n["direction"], n["count"]) for n in counts} == {
        ("hall/fits", "in", 1), ("hall/fits", "out", 1), ("hall/late", "out", 1)}


def replay(tmp: Path, site: dict, since: dt.datetime, capsys=None) -> dict:
    """`campusguard replay --json`'s summary (its last line): in a subprocess, or in-process
    through the CLI's entry point when ``capsys`` is given (no second interpreter start)."""
    path = tmp / f"try-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(site))
    argv = ["replay", "--site", str(path), "--since", since.isoformat(), "--db", f"sqlite:///{tmp}/events.db", "--camera", "door", "--json"]
    if capsys is not None:
        from app.cli import main

        assert main(argv) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    proc = subprocess.run([sys.executable, "-m", "app.cli", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_replay_of_the_logged_frames(walked, capsys):
    """The unchanged site file reproduces the recorded events exactly; a changed one gives the
    difference predicted from the walk (crossings at 8 s in, 24 s out; on the mat 10 s to 22 s)."""
    server, _, t0, tmp, _ = walked
    from app.rules.store.db import EventStore

    store = EventStore(f"sqlite:///{tmp}/events.db", migrate=False)
    try:
        deadline = time.monotonic() + 30
        while store.frames.count(["door"], t0, t0 + dt.timedelta(minutes=1)).get("door", 0) < 17:
            assert time.monotonic() < deadline, "the detection log was not written"
            time.sleep(0.2)
    finally:
        store.close()
    since = t0 - dt.timedelta(minutes=1)

    same = replay(tmp, SITE, since)
    assert same["frames"] == 17
    assert same["totals"] == {"recorded": 3, "replayed": 3, "matched": 3, "only_recorded": 0, "only_replayed": 0}

    changed = json.loads(json.dumps(SITE))
    changed["cameras"][0]["zones"][0]["rules"][0]["direction"] = "in"  # the way back up is no longer counted
    changed["cameras"][0]["zones"][1]["rules"][0]["min_duration_s"] = 8  # on the mat from 10 s: starts at 18 s
    got = {r["rule"]: r for r in replay(tmp, changed, since, capsys)["rules"]}

    def at(sec: int) -> str:
        return (t0 + dt.timedelta(seconds=sec)).isoformat().replace("+00:00", "Z")

    assert (got["doorway"]["matched"], got["doorway"]["only_replayed"]) == (1, [])
    assert got["doorway"]["only_recorded"] == [{"started_at": at(24), "ended_at": at(24)}]
    assert got["loitering"]["matched"] == 0
    assert got["loitering"]["only_recorded"] == [{"started_at": at(14), "ended_at": at(22)}]
    assert got["loitering"]["only_replayed"] == [{"started_at": at(18), "ended_at": at(22)}]
