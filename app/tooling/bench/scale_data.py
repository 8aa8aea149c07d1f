"""Synthetic site-scale data for ``campusguard bench scale``: events, delivered outbox rows
and detection-log frames in bulk (PostgreSQL: COPY; SQLite: batched inserts).

The shapes follow a real site: events spread over ``cameras`` cameras, four zones and three
rules each, uniformly over ``days``; most ended, a third acknowledged, a few false
positives; two delivered outbox rows per event (a webhook and MQTT); frames at 1 fps per
camera with ``detections`` objects each.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from app.core.types import Detection
from app.rules.store.db import EventStore
from app.rules.store.framelog import LoggedFrame, encode
from app.rules.store.schema import events_table, frames_table, outbox_table

W, H = 1920, 1080
ZONES = ("gate", "plaza", "lot", "door")
RULES = ("intrusion", "crowd", "line_crossing")
CHUNK = 20_000


def camera_ids(cameras: int) -> list[str]:
    return [f"cam-{k:04d}" for k in range(cameras)]


def event_rows(n: int, cameras: int, days: float, end: dt.datetime, seed: int = 1) -> Iterator[dict]:
    rng = random.Random(seed)
    cams = camera_ids(cameras)
    span = days * 86_400.0
    for _ in range(n):
        start = end - dt.timedelta(seconds=rng.random() * span)
        ended = rng.random() < 0.98
        rule = rng.choice(RULES)
        yield {"id": uuid.UUID(int=rng.getrandbits(128)).hex, "camera_id": rng.choice(cams), "zone": rng.choice(ZONES),
               "rule": rule, "rule_type": rule, "started_at": start,
               "ended_at": start + dt.timedelta(seconds=rng.uniform(1, 120)) if ended else None,
               "objects": [{"track_id": 1, "class_id": 0, "class_name": "person", "confidence": 0.9,
                            "box": [10.0, 20.0, 110.0, 320.0]}], "max_count": rng.randint(1, 9),
               "snapshot": None, "clip": None, "acknowledged": rng.random() < 0.3,
               "false_positive": rng.random() < 0.03, "note": None, "reviewed_by": None, "reviewed_at": None}


def people(frame: int, objects: int) -> list[Detection]:
    """``objects`` people walking right at 1% of the width per frame, each in its own lane.

    A person is 100x240 px of the 1920x1080 frame and moves 19 px between frames (1 fps): box
    IoU between frames ~0.68, so ByteTrack keeps its tracks as it does on a real camera (at 2%
    and 60 px wide the IoU, ~0.2, fell under its match threshold and every frame re-created
    every track, which measured the tracker's start-up, not a camera's steady state)."""
    out = []
    for k in range(objects):
        x = ((frame * 0.01 + k * 0.17) % 1.0) * W
        y = H * (0.45 + 0.5 * k / max(1, objects))
        out.append(Detection(0, "person", 0.85, x - 50, y - 240, x + 50, y))
    return out


def frame_rows(n: int, cameras: int, start: dt.datetime, detections: int = 3) -> Iterator[dict]:
    """``n`` frames at 1 fps per camera from ``start``, cameras interleaved in time, each with
    ``detections`` people walking across (their tracks as the live log would record them)."""
    tracks = tuple(range(1, detections + 1))
    cams = camera_ids(cameras)
    for i in range(n):
        second, cam = divmod(i, cameras)
        yield encode(LoggedFrame(cams[cam], start + dt.timedelta(seconds=second, microseconds=cam), W, H,
                                 tuple(people(second, detections)), tracks, fresh=second == 0))


def _value(v) -> str:
    if v is None:
        return "\\N"
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, (dict, list)):
        v = json.dumps(v)
    if isinstance(v, bytes):
        return "\\\\x" + v.hex()
    if isinstance(v, dt.datetime):
        v = v.isoformat()
    return str(v).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def bulk_insert(store: EventStore, table, rows: Iterator[dict],
                progress: Callable[[int], None] = lambda n: None) -> int:
    """Insert ``rows`` (dicts of the table's columns); how many. COPY on PostgreSQL."""
    total = 0
    batch: list[dict] = []

    def flush() -> None:
        nonlocal total
        if not batch:
            return
        if store.dialect == "postgresql":
            columns = list(batch[0])
            text = "".join("\t".join(_value(r[c]) for c in columns) + "\n" for r in batch)
            raw = store.engine.raw_connection()
            # psycopg's cursor: a context manager with copy(), more than the PEP 249 cursor SQLAlchemy types
            cursor: Any = raw.cursor()
            try:
                with cursor as cur, cur.copy(f"COPY {table.name} ({', '.join(columns)}) FROM STDIN") as copy:
                    copy.write(text)
                raw.commit()
            finally:
                raw.close()
        else:
            with store.engine.begin() as conn:
                conn.execute(table.insert(), batch)
        total += len(batch)
        progress(len(batch))
        batch.clear()

    for row in rows:
        batch.append(row)
        if len(batch) >= CHUNK:
            flush()
    flush()
    return total


def fill_events(store: EventStore, n: int, cameras: int, days: float, end: dt.datetime,
                progress: Callable[[int], None] = lambda n: None) -> list[str]:
    """``n`` events and two delivered outbox rows each; the ids of the events."""
    ids: list[str] = []

    def events() -> Iterator[dict]:
        for row in event_rows(n, cameras, days, end):
            ids.append(row["id"])
            yield row

    bulk_insert(store, events_table, events(), progress)

    def outbox() -> Iterator[dict]:
        for event_id in ids:
            for target in ("http://hooks.lan/a", "mqtt://broker.lan:1883"):
                yield {"event_id": event_id, "url": target, "idempotency_key": f"{event_id}:ended", "payload": "{}",
                       "attempts": 1, "next_attempt_at": end, "created_at": end, "delivered_at": end,
                       "last_error": None}

    bulk_insert(store, outbox_table, outbox(), progress)
    analyze(store)
    return ids


def fill_frames(store: EventStore, n: int, cameras: int, start: dt.datetime, detections: int = 3,
                progress: Callable[[int], None] = lambda n: None) -> int:
    count = bulk_insert(store, frames_table, frame_rows(n, cameras, start, detections), progress)
    analyze(store)
    return count


def analyze(store: EventStore) -> None:
    """Fresh planner statistics after a bulk load (autovacuum would catch up later)."""
    from sqlalchemy import text

    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE"))

