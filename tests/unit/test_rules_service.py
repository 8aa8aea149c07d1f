"""RulesService: the facade the app calls per frame; persistence, metrics, snapshots, reload, isolation."""

from __future__ import annotations

import shutil
import threading
import time

import cv2
import numpy as np
import pytest
import yaml

from app.config import Settings
from app.core.metrics import Metrics
from app.rules.site.loader import SiteConfigError
from app.rules.service.facade import RulesService
from app.core.errors import NotFound
from app.rules.port import NoRules
from app.wiring import build_rules
from tests.support.rules_util import EXAMPLE_SITE, H, W, at, people, outbox_rows

TWIN_SITE = {
    "cameras": [
        {"id": cam, "zones": [{"name": "plaza", "polygon": [[0, 0.5], [1, 0.5], [1, 1], [0, 1]],
                               "rules": [{"type": "crowd", "min_count": 3, "min_duration_s": 5,
                                          "clear_after_s": 1, "cooldown_s": 30}]}]}
        for cam in ("cam-a", "cam-b")
    ]
}


def write(path, data) -> None:
    path.write_text(yaml.safe_dump(data))


@pytest.fixture
def make(tmp_path):
    made = []

    def factory(site=None, **settings) -> RulesService:
        path = tmp_path / "site.yaml"
        if site is None:
            shutil.copy(EXAMPLE_SITE, path)
        else:
            write(path, site)
        s = Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/events.db",
                     snapshot_dir=tmp_path / "snaps", **settings)
        metrics = Metrics()
        svc = build_rules(s, metrics)
        svc.test_metrics = metrics
        made.append(svc)
        return svc

    yield factory
    for svc in made:
        svc.stop()


def frame() -> np.ndarray:
    return np.full((H, W, 3), 90, np.uint8)


def test_disabled_without_site_config():
    rules = build_rules(Settings(site_config=None), Metrics())
    assert isinstance(rules, NoRules) and not rules.enabled
    assert rules.evaluate("plaza-cam", None, (W, H), people(3)) == [] and rules.zones_for("plaza-cam") == []
    with pytest.raises(NotFound, match="rules are disabled"):
        rules.cameras()


def test_bad_site_file_refused_at_start(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text("cameras:\n  - id: a\n    zones:\n      - {name: z, polygon: [[0, 0]], rules: [{type: crowd}]}\n")
    with pytest.raises(SiteConfigError) as info:
        build_rules(Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db"), Metrics())
    assert len(info.value.errors) == 2  # polygon and min_count


def test_evaluate_returns_stores_counts_and_snapshots(make):
    svc = make(webhook_urls=["http://127.0.0.1:9/hook"], webhook_secret="service-webhook-secret")
    assert svc.evaluate("unknown-cam", at(0), (W, H), people(5)) == []
    got = []
    for t in range(0, 12):
        got += svc.evaluate("plaza-cam", at(t), (W, H), people(4), frame())
    assert [e["state"] for e in got] == ["started"]
    ev = got[0]
    assert ev["camera_id"] == "plaza-cam" and ev["zone"] == "plaza" and ev["rule"] == "crowd"
    assert ev["started_at"] == "2026-03-02T12:00:10Z" and ev["max_count"] == 4
    assert ev["snapshot"] == f"/events/{ev['id']}/snapshot"
    jpeg = svc.snapshot_path(ev["id"]).read_bytes()
    assert cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR).shape == (H, W, 3)
    assert svc.get_event(ev["id"])["state"] == "started"

    ended = []
    for t in range(12, 15):
        ended += svc.evaluate("plaza-cam", at(t), (W, H), [], frame())
    assert [e["state"] for e in ended] == ["ended"] and ended[0]["id"] == ev["id"]
    assert svc.get_event(ev["id"])["ended_at"] == "2026-03-02T12:00:12Z"
    assert [r["idempotency_key"] for r in outbox_rows(svc.store)] == [f"{ev['id']}:started", f"{ev['id']}:ended"]

    reg = svc.test_metrics.registry
    labels = {"camera_id": "plaza-cam", "zone": "plaza", "rule": "crowd"}
    assert reg.get_sample_value("campusguard_events_total", labels) == 1
    assert reg.get_sample_value("campusguard_zone_objects", {"camera_id": "plaza-cam", "zone": "plaza"}) == 0
    assert reg.get_sample_value("campusguard_rule_evaluation_seconds_count") == 15


def test_zone_objects_gauge_counts_objects_in_the_zone(make):
    svc = make()
    svc.evaluate("plaza-cam", at(0), (W, H), people(4) + people(2, y=0.1))
    reg = svc.test_metrics.registry
    assert reg.get_sample_value("campusguard_zone_objects", {"camera_id": "plaza-cam", "zone": "plaza"}) == 4


def test_snapshot_can_be_turned_off(make):
    site = yaml.safe_load(EXAMPLE_SITE.read_text())
    site["snapshots"] = False
    svc = make(site)
    got = [e for t in range(12) for e in svc.evaluate("plaza-cam", at(t), (W, H), people(4), frame())]
    assert got[0]["snapshot"] is None


def test_zones_for_drawing(make):
    svc = make()
    zones = svc.zones_for("lot-cam")
    assert [z.name for z in zones] == ["fire-lane"]
    assert zones[0].polygon[0] == (0.1, 0.6)
    assert svc.zones_for("nope") == []
    door = svc.zones_for("door-cam")  # its loitering rule ignores the poster on the glass door
    assert door[0].excludes == (((0.45, 0.55), (0.55, 0.55), (0.55, 0.70), (0.45, 0.70)),)
    assert zones[0].excludes == ()


def test_state_does_not_leak_between_cameras(make):
    svc = make(TWIN_SITE)
    a_events, b_events = [], []
    for t in range(0, 20):
        a_events += svc.evaluate("cam-a", at(t), (W, H), people(3))
        # cam-b sees the crowd only on every other frame, and never for 5 s in a row with gaps > 1 s
        b_events += svc.evaluate("cam-b", at(t), (W, H), people(3) if t % 4 == 0 else [])
    assert [e["state"] for e in a_events] == ["started"] and b_events == []
    assert svc.query_events(camera_id="cam-b").total == 0


def test_cameras_evaluated_from_many_threads(make):
    svc = make(TWIN_SITE)
    out: dict[str, list] = {"cam-a": [], "cam-b": []}

    def feed(cam):
        for t in range(0, 30):
            out[cam] += svc.evaluate(cam, at(t), (W, H), people(3) if t < 20 else [])

    threads = [threading.Thread(target=feed, args=(c,)) for c in out]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for cam, events in out.items():
        assert [e["state"] for e in events] == ["started", "ended"], cam
    assert svc.query_events().total == 2


def test_reload_bad_file_keeps_old_config_and_state(make, tmp_path):
    svc = make(TWIN_SITE)
    for t in range(0, 6):
        svc.evaluate("cam-a", at(t), (W, H), people(3))
    assert len(svc.open_events("cam-a")) == 1
    (tmp_path / "site.yaml").write_text("cameras: [{id: x, zones: [{name: q, polygon: [[0, 0], [2, 2]]}]}]\n")
    with pytest.raises(SiteConfigError) as info:
        svc.reload()
    assert "at least 3 points" in info.value.message and "outside 0..1" in info.value.message
    assert svc.camera_ids == ["cam-a", "cam-b"]
    assert svc.evaluate("cam-a", at(6), (W, H), people(3)) == []  # same event still open
    assert len(svc.open_events("cam-a")) == 1


def reloads(svc: RulesService, trigger: str, outcome: str) -> float:
    return svc.test_metrics.registry.get_sample_value(
        "campusguard_site_reloads_total", {"trigger": trigger, "outcome": outcome}) or 0.0


def test_site_file_watch_reloads_a_changed_file_and_remembers_a_refused_one(make, tmp_path, caplog):
    """What another replica's zone edit (or a ConfigMap update) looks like to this one: the
    file changes under it. A valid change is loaded; an invalid one is refused once (logged
    once, shown in GET /site) and the running config stays; fixing the file loads it."""
    svc = make(TWIN_SITE)
    path = tmp_path / "site.yaml"
    assert svc.check_site_file() is False  # unchanged
    doc = svc.site_document()
    assert doc["file_version"] == doc["version"] and doc["reload_error"] is None

    site = yaml.safe_load(yaml.safe_dump(TWIN_SITE))
    site["cameras"].append({"id": "cam-c"})
    path.write_text("")  # an editor caught half-way: seen once, never read
    assert svc.check_site_file() is False
    write(path, site)
    assert svc.check_site_file() is False  # changed since the last check: it must hold still once
    assert svc.check_site_file() is True
    assert reloads(svc, "file_changed", "refused") == 0  # the empty moment was never refused
    assert svc.camera_ids == ["cam-a", "cam-b", "cam-c"]
    assert reloads(svc, "file_changed", "ok") == 1
    assert svc.check_site_file() is False  # loaded: nothing to do

    running = svc.version
    path.write_text("cameras: [{id: x, zones: [{name: q, polygon: [[0, 0], [1, 1]]}]}]\n")
    caplog.set_level("ERROR", logger="campusguard.rules")
    assert svc.check_site_file() is False  # first seen
    assert svc.check_site_file() is False  # held still: read and refused
    assert svc.check_site_file() is False  # the same refused version: not retried, not logged again
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and "at least 3 points" in refused[0].getMessage()
    assert reloads(svc, "file_changed", "refused") == 1
    assert svc.camera_ids == ["cam-a", "cam-b", "cam-c"] and svc.version == running
    doc = svc.site_document()
    assert doc["file_version"] != running and "at least 3 points" in doc["reload_error"]
    assert svc.test_metrics.registry.get_sample_value("campusguard_site_file_changed") == 1

    write(path, TWIN_SITE)  # fixed
    assert svc.check_site_file() is False
    assert svc.check_site_file() is True
    assert svc.camera_ids == ["cam-a", "cam-b"]
    doc = svc.site_document()
    assert doc["file_version"] == doc["version"] and doc["reload_error"] is None
    assert reloads(svc, "file_changed", "ok") == 2
    assert svc.test_metrics.registry.get_sample_value("campusguard_site_file_changed") == 0


def test_site_file_watch_runs_in_the_background_and_can_be_off(make, tmp_path):
    svc = make(TWIN_SITE, site_watch_s=0.05)
    off = make(TWIN_SITE, site_watch_s=0)
    assert off.site.watcher is None
    svc.start()
    site = yaml.safe_load(yaml.safe_dump(TWIN_SITE))
    site["cameras"].append({"id": "cam-c"})
    write(tmp_path / "site.yaml", site)
    deadline = time.monotonic() + 5
    while "cam-c" not in svc.camera_ids:
        assert time.monotonic() < deadline, "the watcher did not reload the changed file"
        time.sleep(0.02)
    assert reloads(svc, "file_changed", "ok") == 1
    assert "cam-c" not in off.camera_ids  # off: only a request, a signal or a restart reloads


def test_reload_triggers_are_counted(make, tmp_path):
    svc = make(TWIN_SITE)
    svc.reload("request")
    assert svc.reload_or_log() is True
    (tmp_path / "site.yaml").write_text("cameras: 7\n")
    assert svc.reload_or_log() is False
    with pytest.raises(SiteConfigError):
        svc.reload("request")
    assert [reloads(svc, t, o) for t in ("request", "signal") for o in ("ok", "refused")] == [1, 1, 1, 1]
    assert svc.site_document()["reload_error"]


def test_reload_keeps_unchanged_cameras_and_ends_changed_ones(make, tmp_path):
    svc = make(TWIN_SITE)
    for t in range(0, 6):
        svc.evaluate("cam-a", at(t), (W, H), people(3))
        svc.evaluate("cam-b", at(t), (W, H), people(3))
    a_open, b_open = svc.open_events("cam-a")[0], svc.open_events("cam-b")[0]
    site = yaml.safe_load(yaml.safe_dump(TWIN_SITE))
    site["cameras"][1]["zones"][0]["rules"][0]["min_count"] = 10  # cam-b changes
    site["cameras"].append({"id": "cam-c"})
    write(tmp_path / "site.yaml", site)
    svc.reload()
    assert svc.camera_ids == ["cam-a", "cam-b", "cam-c"]
    assert svc.open_events("cam-a")[0]["id"] == a_open["id"]  # untouched camera: state kept
    assert svc.open_events("cam-b") == []
    assert svc.get_event(b_open["id"])["state"] == "ended"      # changed camera: its open event ended
    assert svc.evaluate("cam-b", at(7), (W, H), people(3)) == []  # new rule: 3 < 10
