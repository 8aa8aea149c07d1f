"""Camera shards (app/rules/service/shards.py): rule states in worker processes give the same
events as in the service's process, a camera keeps its worker, and a killed worker is noticed,
restarted, and its cameras' open events end cleanly."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from app.rules.logic.evaluator import CameraRules
from app.rules.service.shards import Shard, ShardPool, WorkerCrashed
from app.rules.site.loader import parse_site_config
from tests.support.rules_util import H, W, at, det

ZONE = [[0.0, 0.3], [1.0, 0.3], [1.0, 1.0], [0.0, 1.0]]


def site(cameras: int):
    rules = [{"type": "intrusion", "classes": ["person"], "clear_after_s": 2, "cooldown_s": 5},
             {"type": "crowd", "classes": ["person"], "min_count": 3, "min_duration_s": 3, "clear_after_s": 2},
             {"type": "line_crossing", "line": [[0.5, 0.3], [0.5, 1.0]], "classes": ["person"], "direction": "both"},
             {"type": "loitering", "classes": ["person"], "min_duration_s": 6, "clear_after_s": 2}]
    return parse_site_config({"cameras": [{"id": f"cam-{k}", "zones": [{"name": "yard", "polygon": ZONE,
                                                                         "rules": rules}]} for k in range(cameras)]})


def walkers(t: int, n: int) -> list:
    """``n`` people walking right (crossing the line), gone every 15th second (events end)."""
    if t % 15 >= 12:
        return []
    return [det("person", (0.01 * t + 0.2 * k) % 1.0, 0.5 + 0.1 * k) for k in range(n)]


def signature(transitions) -> list[tuple]:
    """What a rule decided: event ids and track ids are the process's own, the rest must match."""
    out = []
    for tr in transitions:
        ev = tr.apply()
        out.append((tr.kind, ev.camera_id, ev.zone, ev.rule, ev.started_at, ev.ended_at, ev.max_count,
                    [(o["class_name"], o["box"], o.get("direction")) for o in ev.objects],
                    None if tr.rule is None else tr.rule.name))
    return out


@pytest.fixture(scope="module")
def pool():  # one pool for the module: spawning workers costs seconds on a loaded machine
    p = ShardPool(2)
    yield p
    p.stop()


def test_sharded_cameras_raise_the_same_events_as_in_process(pool):
    cfg = site(4)
    local = {c.id: CameraRules(c, cfg) for c in cfg.cameras}
    remote = {c.id: pool.camera(c, cfg) for c in cfg.cameras}
    got_local, got_remote, kinds = [], [], set()
    for t in range(60):
        for cam in cfg.cameras:
            dets = walkers(t, 2 + cfg.cameras.index(cam))
            a, b = local[cam.id].evaluate(at(t), (W, H), dets), remote[cam.id].evaluate(at(t), (W, H), dets)
            got_local += signature(a)
            got_remote += signature(b)
            assert remote[cam.id].zone_counts == local[cam.id].zone_counts
            assert remote[cam.id].frame_time == local[cam.id].frame_time
            assert [e.max_count for e in remote[cam.id].open_events()] == \
                   [e.max_count for e in local[cam.id].open_events()]
    kinds = {(s[3], s[0]) for s in got_local}
    assert {("intrusion", "ended"), ("crowd", "ended"), ("line_crossing", "started"), ("loitering", "ended")} <= kinds
    assert got_remote == got_local
    ends_local = signature([tr for c in local.values() for tr in c.close_all()])
    ends_remote = signature([tr for c in remote.values() for tr in c.close_all()])
    assert ends_remote == ends_local


def test_a_camera_always_goes_to_the_same_worker(pool):
    other = ShardPool.__new__(ShardPool)
    other.shards = pool.shards  # a second pool object over the same workers: the hash is not per object
    ids = [f"cam-{k}" for k in range(50)]
    assert [pool.shard_of(c).index for c in ids] == [other.shard_of(c).index for c in ids]
    assert {pool.shard_of(c).index for c in ids} == {0, 1}  # both workers get cameras


def test_a_killed_worker_is_restarted_and_its_open_events_end(pool):
    cfg = site(1)
    cam = pool.camera(cfg.cameras[0], cfg)
    shard = pool.shard_of(cam.id)
    opened = [tr for t in range(3) for tr in cam.evaluate(at(t), (W, H), walkers(t, 1))]
    intrusion = next(tr.event for tr in opened if tr.event.rule == "intrusion")
    intrusion.snapshot = "/events/x/snapshot.jpg"  # set on this side on its start: the end keeps it
    assert [e.rule for e in cam.open_events()] == ["intrusion"]
    pid, generation, restarts = shard.pid, shard.generation, shard.restarts
    os.kill(pid, signal.SIGKILL)
    shard.process.join(10)
    after = cam.evaluate(at(3), (W, H), walkers(3, 1))
    assert shard.pid != pid and shard.generation == generation + 1 and shard.restarts == restarts + 1
    assert shard.process.is_alive()
    ended = [tr for tr in after if tr.kind == "ended" and tr.event.id == intrusion.id]
    assert len(ended) == 1
    assert ended[0].event.ended_at == at(2) and ended[0].event.snapshot == "/events/x/snapshot.jpg"
    # the frame that met the crash was evaluated on the new worker: a fresh intrusion starts on it
    fresh = [tr.event for tr in after if tr.kind == "started" and tr.event.rule == "intrusion"]
    assert len(fresh) == 1 and fresh[0].started_at == at(3) and fresh[0].id != intrusion.id
    assert [e.id for e in cam.open_events()] == [fresh[0].id]


def test_a_hung_worker_is_killed_restarted_and_its_frame_evaluated_on_the_new_one(pool):
    """A stopped worker ends no pipe: the request's deadline notices it, the worker is killed
    and restarted, its camera's open events end and the frame is not lost."""
    restarts: list[tuple[int, str]] = []
    cfg = site(1)
    cam = pool.camera(cfg.cameras[0], cfg)
    shard = pool.shard_of(cam.id)
    shard.answer_within_s, shard.on_restart = 3.0, lambda index, reason: restarts.append((index, reason))
    try:
        restarts_before = shard.restarts
        opened = [tr for t in range(3) for tr in cam.evaluate(at(t), (W, H), walkers(t, 1))]  # first frames: imports
        intrusion = next(tr.event for tr in opened if tr.event.rule == "intrusion")
        pid, generation = shard.pid, shard.generation
        os.kill(pid, signal.SIGSTOP)  # alive, silent: what a deadlock looks like from the pipe
        after = cam.evaluate(at(3), (W, H), walkers(3, 1))
        assert restarts == [(shard.index, "hung")]
        assert shard.pid != pid and shard.generation == generation + 1 and shard.restarts == restarts_before + 1
        assert shard.process.is_alive()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the stopped worker is gone, not left behind
        ended = [tr for tr in after if tr.kind == "ended" and tr.event.id == intrusion.id]
        assert len(ended) == 1 and ended[0].event.ended_at == at(2)
        fresh = [tr.event for tr in after if tr.kind == "started" and tr.event.rule == "intrusion"]
        assert len(fresh) == 1 and fresh[0].started_at == at(3)
        assert [tr.kind for tr in cam.evaluate(at(4), (W, H), walkers(4, 1))] == []  # the new worker carries on
    finally:
        shard.answer_within_s, shard.on_restart = 30.0, lambda index, reason: None


def test_stopping_a_shard_fails_the_frame_in_flight_at_once():
    """A frame waiting on a silent worker when the service stops is answered with WorkerCrashed,
    not left to wait out its deadline."""
    shard = Shard(0, answer_within_s=120.0)
    try:
        assert shard.call("ping", "") == 0
        os.kill(shard.pid, signal.SIGSTOP)
        outcome: list[BaseException] = []
        waiting = threading.Thread(target=lambda: outcome.append(pytest.raises(WorkerCrashed, shard.call, "ping", "")
                                                                 .value))
        waiting.start()
        time.sleep(0.5)  # the call is waiting on the stopped worker
        started = time.monotonic()
        shard.stop()  # SIGKILL after 5 s: a stopped worker never reads "stop"
        waiting.join(10)
        assert not waiting.is_alive() and "stopped" in str(outcome[0])
        assert time.monotonic() - started < 15
    finally:
        if shard.process.is_alive():
            shard.process.kill()


def test_a_retired_camera_state_is_dropped_from_its_worker(pool):
    cfg = site(1)
    cam = pool.camera(cfg.cameras[0], cfg)
    shard = pool.shard_of(cam.id)
    held = shard.call("ping", "")  # states of the module's other tests' cameras
    cam.evaluate(at(0), (W, H), walkers(0, 1))
    assert shard.call("ping", "") == held + 1
    assert [tr.event.rule for tr in cam.close_all()] == ["intrusion"]
    assert shard.call("ping", "") == held


def test_the_service_with_two_workers_stores_events_snapshots_and_metrics(tmp_path):
    """The same frames as test_rules_service's first test, through CAMPUSGUARD_RULES_WORKERS=2: the
    bookkeeping (store, snapshot, metrics) stays in the service's process and sees every event."""
    import shutil

    import numpy as np

    from app.config import Settings
    from app.core.metrics import Metrics
    from app.wiring import build_rules
    from tests.support.rules_util import EXAMPLE_SITE, people

    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    metrics = Metrics()
    svc = build_rules(Settings(_env_file=None, site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db",
                               snapshot_dir=tmp_path / "snaps", clips=False, rules_workers=2), metrics)
    svc.start()
    try:
        assert len(svc.shards.shards) == 2
        image = np.full((H, W, 3), 90, np.uint8)
        got = [e for t in range(12) for e in svc.evaluate("plaza-cam", at(t), (W, H), people(4), image)]
        assert [e["state"] for e in got] == ["started"] and got[0]["started_at"] == "2026-03-02T12:00:10Z"
        ev = got[0]
        assert svc.snapshot_path(ev["id"]) is not None and [e["id"] for e in svc.open_events()] == [ev["id"]]
        reg = metrics.registry
        assert reg.get_sample_value("campusguard_zone_objects", {"camera_id": "plaza-cam", "zone": "plaza"}) == 4
        assert svc.reset_camera("plaza-cam") == 1  # ends it from this side's mirror, at its rule time
        stored = svc.get_event(ev["id"])
        assert stored["ended_at"] == "2026-03-02T12:00:11Z" and stored["snapshot"] == ev["snapshot"]
        assert svc.open_events() == []
        again = [e for t in range(12, 24) for e in svc.evaluate("plaza-cam", at(t), (W, H), people(4), image)]
        assert [e["state"] for e in again] == ["started"]  # a fresh state in the worker after the reset
    finally:
        svc.stop()
    assert all(not s.process.is_alive() for s in svc.shards.shards)
