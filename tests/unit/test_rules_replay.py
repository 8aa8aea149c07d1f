"""Detection log and replay on synthetic frames driven through the real RulesService.

The log must give back exactly what the evaluator saw; replaying the unchanged site file
must reproduce the recorded events one-to-one; a changed threshold must change exactly
what the scenario predicts; bad input must exit 2 with a clear message; retention must
delete old frames.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from app.core.metrics import Metrics
from app.cli import main
from app.config import Settings
from app.core.types import Detection
from app.rules.site.loader import parse_site_config
from app.rules.store.framelog import LoggedFrame, decode, encode
from app.rules.service.replay import compare
from app.rules.evidence.files import EvidenceFiles
from app.rules.store.retention import RetentionOptions, RetentionSweeper
from app.rules.store.db import EventStore
from app.core.timeutil import iso
from app.wiring import build_rules
from tests.conftest import REPO
from tests.support.rules_util import H, T0, W, at, people
from tests.support.replay import SITE, record, PLAZA, GATE, write_site

DOOR = [[0.3, 0.5], [0.7, 0.5], [0.7, 0.9], [0.3, 0.9]]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(db url, site path) of the recorded scenario."""
    svc, settings = record(tmp_path_factory.mktemp("replay"))
    svc.stop()
    return settings.events_db_url, settings.site_config


def spans(result, what: str) -> dict[str, list[tuple[float, float | None]]]:
    """{rule: [(start s, end s)]} of a comparison's only_recorded / only_replayed events."""
    def sec(v):
        return None if v is None else (v - T0).total_seconds()
    return {f"{r.camera_id}/{r.rule}": [(sec(s.started_at), sec(s.ended_at)) for s in getattr(r, what)]
            for r in result.rules if getattr(r, what)}


def test_log_round_trip_is_exact_for_float32_detections():
    rng = np.random.default_rng(1)
    boxes = (rng.random((7, 4)) * 1000).astype(np.float32)  # what postprocess hands over: float32
    conf = rng.random(7).astype(np.float32)
    dets = tuple(Detection(int(c), f"class{c}", float(s), *map(float, b))
                 for b, s, c in zip(boxes, conf, [0, 2, 0, 16, 79, 5, 0]))
    frame = LoggedFrame("cam", at(1.234567), 1920, 1080, dets, (3, None, 7, None, None, 12, None), fresh=True)
    row = encode(frame)
    assert decode(row) == frame  # every float identical, names, tracks, time to the microsecond
    assert len(row["detections"]) == 3 + 26 * 7  # float32: 16 B box + 4 B conf + 2 B class + 4 B track
    odd = LoggedFrame("cam", at(2), 10, 10, (Detection(0, "person", 0.1, 0.1, 0.2, 0.3, 0.4),), (None,))
    assert decode(encode(odd)) == odd  # not float32-exact: stored as float64, still exact
    empty = LoggedFrame("cam", at(3), 10, 10, (), ())
    assert decode(encode(empty)) == empty and len(encode(empty)["detections"]) == 3


def test_the_log_holds_every_frame_and_class_as_evaluated(recorded):
    url, _ = recorded
    store = EventStore(url)
    try:
        plaza = [decode(r) for r in store.frames.iter(["plaza"], T0, at(3600), chunk=7)]  # several chunks
        gate = [decode(r) for r in store.frames.iter(["gate"], T0, at(3600))]
    finally:
        store.close()
    assert [f.captured_at for f in plaza] == [at(t) for t in range(len(PLAZA))]
    assert [len(f.detections) for f in plaza] == PLAZA and plaza[0].fresh and not plaza[1].fresh
    assert [list(f.detections) for f in gate] == GATE  # the dog too, though no rule watches dogs
    assert all(f.track_ids[0] is None for f in gate[:30])  # dogs are not tracked: no rule uses them
    assert gate[10].width == W and gate[10].height == H


def test_unchanged_site_reproduces_the_recorded_events(recorded):
    url, site = recorded
    store = EventStore(url)
    try:
        result = compare(store, parse_site_config(yaml.safe_load(site.read_text())), T0, at(3600))
    finally:
        store.close()
    totals = result.totals()
    assert totals == {"recorded": 3, "replayed": 3, "matched": 3, "only_recorded": 0, "only_replayed": 0}
    assert result.frames == len(PLAZA) + len(GATE)
    assert [(r.camera_id, r.zone, r.rule, r.matched) for r in result.rules] == [
        ("gate", "gate", "intrusion", 1), ("plaza", "plaza", "crowd", 2)]


@pytest.mark.parametrize("change, only_recorded, only_replayed", [
    # 4 people only in the first 20 s: the second gathering (3 people) no longer counts
    ({"min_count": 4}, [(35, 50)], []),
    # 2 people are enough: one crowd from 5 s to the plaza emptying at 50 s
    ({"min_count": 2}, [(5, 20), (35, 50)], [(5, 50)]),
    # 16 s of a standing crowd needed: the first (20 s) still starts, at 16; the second (20 s) at 46
    ({"min_duration_s": 16}, [(5, 20), (35, 50)], [(16, 20), (46, 50)]),
])
def test_changed_crowd_threshold_gives_the_predicted_difference(recorded, change, only_recorded, only_replayed):
    url, _ = recorded
    site = json.loads(json.dumps(SITE))
    site["cameras"][0]["zones"][0]["rules"][0].update(change)
    store = EventStore(url)
    try:
        result = compare(store, parse_site_config(site), T0, at(3600), ["plaza"])
    finally:
        store.close()
    assert spans(result, "only_recorded") == ({"plaza/crowd": only_recorded} if only_recorded else {})
    assert spans(result, "only_replayed") == ({"plaza/crowd": only_replayed} if only_replayed else {})
    assert result.cameras == ["plaza"]


def test_a_new_class_is_replayed_from_the_logged_detections(recorded):
    url, _ = recorded
    site = json.loads(json.dumps(SITE))
    site["cameras"][1]["zones"][0]["rules"][0]["classes"] = ["person", "dog"]
    store = EventStore(url)
    try:
        result = compare(store, parse_site_config(site), T0, at(3600), ["gate"])
    finally:
        store.close()
    # the dog is in view from 0 to 30 s: one intrusion from 0 to 30 replaces the person's 10 to 15
    assert spans(result, "only_recorded") == {"gate/intrusion": [(10, 15)]}
    assert spans(result, "only_replayed") == {"gate/intrusion": [(0, 30)]}


def test_a_window_edge_needs_warm_up_and_run_out(recorded):
    """A window starting inside the first crowd and ending inside the second: the warm-up
    and run-out frames keep both events exactly as recorded."""
    url, site = recorded
    store = EventStore(url)
    try:
        result = compare(store, parse_site_config(SITE), at(3), at(40), ["plaza"])
    finally:
        store.close()
    assert result.totals() == {"recorded": 2, "replayed": 2, "matched": 2, "only_recorded": 0, "only_replayed": 0}
    assert result.frames == 37


def test_a_camera_reset_is_replayed_as_a_fresh_state(tmp_path):
    site = tmp_path / "site.yaml"
    write_site(site, SITE)
    url = f"sqlite:///{tmp_path}/events.db"
    svc = build_rules(Settings(site_config=site, events_db_url=url, snapshot_dir=tmp_path / "s",
                                              detection_log=True, clips=False))
    for t in range(20):
        if t == 12:
            assert svc.reset_camera("plaza") == 1  # the crowd that started at 5 ends at 11
        svc.evaluate("plaza", at(t), (W, H), people(4))
    svc.frame_log.flush()
    svc.writer.settle()  # events are written off the frame path
    try:
        stored = svc.store.events.event_spans(["plaza"], T0, at(60))
        assert [(s - T0).total_seconds() for _, _, _, s, _ in stored] == [5, 17]
        result = compare(svc.store, parse_site_config(SITE), T0, at(60), ["plaza"])
        assert result.totals()["matched"] == 2 and result.totals()["recorded"] == 2
    finally:
        svc.stop()


def test_log_rows_and_retention_on_both_databases(db_url, tmp_path):
    """The blob, the microsecond times and the batched deletes on SQLite and PostgreSQL."""
    store = EventStore(db_url)
    try:
        now = dt.datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=dt.timezone.utc)
        dets = (Detection(0, "person", float(np.float32(0.87)), *map(float, np.float32([1.5, 2.25, 300.1, 400.7]))),)
        frames = [LoggedFrame("cam", now - dt.timedelta(days=d), 640, 480, dets, (4,), fresh=d == 30)
                  for d in (30, 8, 7.1, 6.9, 3, 0.5)]
        store.frames.log([encode(f) for f in frames])
        assert [decode(r) for r in store.frames.iter(["cam"], now - dt.timedelta(days=60), now + dt.timedelta(days=1),
                                                     chunk=4)] == frames
        sweeper = RetentionSweeper(store, EvidenceFiles(tmp_path / "none"), RetentionOptions(frames_retain_days=7),
                                   Metrics())
        assert sweeper.sweep(now)["frames"] == 3
        assert store.frames.count(["cam"], now - dt.timedelta(days=400), now + dt.timedelta(days=1)) == {"cam": 3}
        assert store.frames.delete_before(now, batch=1) == 3  # several batches
        assert sweeper.sweep(now)["frames"] == 0
    finally:
        store.close()


def test_logging_never_waits_for_the_database(tmp_path):
    """A database that holds its write lock stalls the log's writer thread, never a frame."""
    import sqlite3
    import time

    site = tmp_path / "site.yaml"
    write_site(site, SITE)
    svc = build_rules(Settings(site_config=site, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                              snapshot_dir=tmp_path / "s", detection_log=True, clips=False))
    svc.frame_log.batch, svc.frame_log.flush_s = 5, 0.02
    svc.start()
    locker = sqlite3.connect(tmp_path / "e.db", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # every other writer waits (busy_timeout: 30 s)
    try:
        started = time.perf_counter()
        for t in range(40):
            svc.evaluate("plaza", at(t), (W, H), people(2))  # below the crowd threshold: no event write
        took = time.perf_counter() - started
        deadline = time.monotonic() + 10
        while svc.frame_log.buffered == 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert svc.frame_log.buffered < 40  # the writer took a batch and is stuck in the database...
        assert took < 5.0, took  # ...while the frames went on (a synchronous write would wait 30 s)
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    svc.stop()
    assert svc.store.frames.count(["plaza"], T0, at(60)) == {"plaza": 40}


# --- the command ------------------------------------------------------------------------

def cli(args, capsys) -> tuple[int, str, str]:
    code = main(["replay", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_replay_command_prints_the_table_and_json_last(recorded, capsys, tmp_path):
    url, site = recorded
    changed = tmp_path / "new.yaml"
    new = json.loads(json.dumps(SITE))
    new["cameras"][0]["zones"][0]["rules"][0]["min_count"] = 4
    write_site(changed, new)
    code, out, err = cli(["--site", str(changed), "--since", "2026-03-02", "--db", url, "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["totals"] == {"recorded": 3, "replayed": 2, "matched": 2, "only_recorded": 1, "only_replayed": 0}
    assert summary["rules"][1]["only_recorded"] == [{"started_at": iso(at(35)), "ended_at": iso(at(50))}]
    assert "would disappear" in out and f"- plaza/plaza/crowd {iso(at(35))} .. {iso(at(50))}" in out


@pytest.mark.parametrize("args, message", [
    (["--camera", "nope"], "camera(s) 'nope' not in the site file"),
    (["--until", "2026-03-01"], "must be before until"),
    (["--since", "2026-04-01", "--until", "2026-05-01"], "no logged frames of camera(s) plaza, gate between"),
    (["--since", "yesterday"], "argument --since: 'yesterday': must be an ISO 8601 date-time"),
    (["--until", "2026-13-45"], "argument --until: '2026-13-45'"),
])
def test_bad_input_exits_2_with_a_clear_message(recorded, capsys, args, message):
    url, site = recorded
    argv = ["--site", str(site), "--since", "2026-03-02", "--db", url, *args]
    if "--since" in args:
        argv = ["--site", str(site), "--db", url, *args]
    try:
        code = main(["replay", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err


def test_invalid_site_file_lists_every_error_and_exits_2(recorded, tmp_path):
    url, _ = recorded
    bad = tmp_path / "bad.yaml"
    write_site(bad, {"cameras": [{"id": "plaza", "zones": [{"name": "plaza", "polygon": [[0, 0], [1, 0]], "rules": [
        {"type": "crowd", "min_count": 0}]}]}, {"id": "plaza"}]})
    proc = subprocess.run([sys.executable, "-m", "app.cli", "replay", "--site", str(bad), "--since", "2026-03-02",
                           "--db", url], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "is invalid (3 error(s))" in proc.stderr and "polygon" in proc.stderr and "min_count" in proc.stderr
    assert "duplicate camera id 'plaza'" in proc.stderr and "Traceback" not in proc.stderr


def test_the_log_is_compact(tmp_path):
    """Bytes on disk per frame (SQLite, checkpointed): measured 61 B empty, 155 B with three
    objects in view (docs/rules.md); a regression past 200 B fails here."""
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    rng = np.random.default_rng(0)

    def size() -> int:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(p.stat().st_size for p in tmp_path.iterdir() if p.name.startswith("e.db"))

    try:
        before, n = size(), 3000
        boxes, conf = (rng.random((n, 3, 4)) * 1000).astype(np.float32), rng.random((n, 3)).astype(np.float32)
        rows = [encode(LoggedFrame("gate-cam-01", at(i), 1920, 1080,
                                   tuple(Detection(0, "person", float(s), *map(float, b)) for b, s in zip(bb, ss)),
                                   (1, 2, 3))) for i, (bb, ss) in enumerate(zip(boxes, conf))]
        for k in range(0, n, 500):
            store.frames.log(rows[k:k + 500])
        per_frame = (size() - before) / n
        assert 26 * 3 < per_frame < 200, per_frame
    finally:
        store.close()


@pytest.mark.parametrize("change", [{}, {"min_count": 2}])
def test_replay_in_worker_processes_gives_the_same_comparison(recorded, change):
    """`compare(..., workers=N)`: the cameras split over processes as the live shards split them
    (each process reads its own cameras' frames), the same comparison as in one process."""
    from app.rules.service.replay import groups

    url, _ = recorded
    site = copy.deepcopy(SITE)
    site["cameras"][0]["zones"][0]["rules"][0].update(change)
    cfg = parse_site_config(site)
    workers = next(n for n in range(2, 16) if len(groups(["plaza", "gate"], n)) == 2)  # one camera per process
    store = EventStore(url)
    try:
        one = compare(store, cfg, T0, at(3600))
        done: list[int] = []
        many = compare(store, cfg, T0, at(3600), workers=workers, progress=done.append)
    finally:
        store.close()
    assert many.to_dict() == one.to_dict() and one.totals()["replayed"] > 0
    assert sum(done) == len(PLAZA) + len(GATE)  # every frame of the window evaluated, in the workers


def test_replay_workers_must_be_a_positive_count(recorded, capsys, tmp_path):
    url, site = recorded
    with pytest.raises(SystemExit) as exc:  # argparse's own error
        cli(["--site", str(site), "--since", iso(T0), "--db", url, "--workers", "0"], capsys)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--workers" in err and "from 1 to 64, not '0'" in err
