"""The event store's tables (one SQLAlchemy ``MetaData``; Alembic migrations build them).

One table per repository: events (``events.py``), the delivery outbox (``outbox.py``), the
detection log (``frames.py``), the audit trail (``audit.py``); and the fleet's shared camera
state (``fleet.py``: replicas, camera state, line crossings). Timestamps are aware UTC on every
backend (SQLite stores them naive); the detection log keeps integer microseconds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)

from app.core.timeutil import as_utc


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        value = as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        return as_utc(value)


metadata = MetaData()

events_table = Table(
    "campusguard_events", metadata,
    Column("id", String(64), primary_key=True),
    Column("camera_id", String(128), nullable=False),
    Column("zone", String(128), nullable=False),
    Column("rule", String(128), nullable=False),
    Column("rule_type", String(32), nullable=False),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("ended_at", UTCDateTime(), nullable=True),
    Column("objects", JSON, nullable=False),
    Column("max_count", Integer, nullable=False, default=0),
    Column("snapshot", String(512), nullable=True),
    # operator review (migration 0002)
    Column("acknowledged", Boolean, nullable=False, server_default=false()),
    Column("false_positive", Boolean, nullable=False, server_default=false()),
    Column("note", Text, nullable=True),
    Column("reviewed_by", String(256), nullable=True),
    Column("reviewed_at", UTCDateTime(), nullable=True),
    Column("clip", String(512), nullable=True),  # evidence clip (migration 0003)
    Column("replica", String(64), nullable=True),  # the replica that opened it (migration 0008)
    Index("ix_campusguard_events_ended", "ended_at"),
    # migration 0006: every filter of GET /events walks an index in the list's order
    # (started_at, id), so a page and its capped count never scan the table (they replace
    # the single-column started_at and (camera_id, started_at) indexes of 0001)
    Index("ix_campusguard_events_order", "started_at", "id"),
    Index("ix_campusguard_events_camera_order", "camera_id", "started_at", "id"),
    Index("ix_campusguard_events_zone", "zone", "started_at", "id"),
    Index("ix_campusguard_events_rule", "rule", "started_at", "id"),
    Index("ix_campusguard_events_acknowledged", "acknowledged", "started_at", "id"),
    Index("ix_campusguard_events_false_positive", "false_positive", "started_at", "id"),
    Index("ix_campusguard_events_open_replica", "replica", "ended_at"),  # 0008: a gone replica's open events
)

outbox_table = Table(
    "campusguard_outbox", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False),
    Column("url", String(2048), nullable=False),
    Column("idempotency_key", String(128), nullable=False),
    Column("payload", Text, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt_at", UTCDateTime(), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("delivered_at", UTCDateTime(), nullable=True),
    Column("last_error", Text, nullable=True),
    UniqueConstraint("url", "idempotency_key", name="uq_campusguard_outbox_key"),
    Index("ix_campusguard_outbox_pending", "delivered_at", "url", "id"),
    Index("ix_campusguard_outbox_event", "event_id"),  # migration 0006: retention deletes by event
)


# The detection log (migration 0004): one row per frame the rules evaluated, for replay
# (app/rules/service/replay.py). Kept small: the time as integer microseconds (8 bytes, not a
# 26-character timestamp), the detections as one binary blob (app/rules/store/framelog.py), the
# id a SQLite rowid (BIGINT elsewhere: billions of frames), and one index, on time: replay
# reads every camera of a window in one pass in time order and retention deletes by time.
frames_table = Table(
    "campusguard_frames", metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("camera_id", String(128), nullable=False),
    Column("captured_us", BigInteger(), nullable=False),  # the rule time used, microseconds since 1970 UTC
    Column("width", Integer, nullable=False),
    Column("height", Integer, nullable=False),
    Column("fresh", Boolean, nullable=False),  # the first frame of a new rule state (start, reset, offline, reload)
    Column("names", Text, nullable=False),  # {"class id": "class name"} of this frame's detections (JSON)
    Column("detections", LargeBinary, nullable=False),
    # migration 0006 (was captured_us alone): replay's keyset chunks
    Index("ix_campusguard_frames_order", "captured_us", "id"),
)

# The audit trail (migration 0005): one row per change a person made, append-only (no code
# path updates a row, and a trigger refuses UPDATE; only retention deletes). The id is the
# paging cursor of GET /audit: it grows with every insert, so "before id N" pages stably.
audit_table = Table(
    "campusguard_audit", metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("actor", String(128), nullable=False),  # the key's name, never the key
    Column("client", String(64), nullable=True),  # the client address
    Column("action", String(32), nullable=False),
    Column("target", String(512), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("before", Text, nullable=True),
    Column("after", Text, nullable=True),
    Index("ix_campusguard_audit_at", "at"),
)

# The fleet's shared state (migration 0007, app/rules/store/fleet.py): what every replica
# answers about a camera whose frames reach another one. Written in batches (every
# ``fleet_interval_s``), never per frame. One row per replica (its heartbeat says whether its
# camera rows are current), one row per camera (owned by the replica that got its newest
# frame), and one row per line crossing (the counts, exact for any ``since``, kept across restarts).
replicas_table = Table(
    "campusguard_replicas", metadata,
    Column("id", String(64), primary_key=True),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("heartbeat_at", UTCDateTime(), nullable=False),
)

camera_state_table = Table(
    "campusguard_camera_state", metadata,
    Column("camera_id", String(128), primary_key=True),
    Column("owner", String(64), nullable=False),  # the replica id that wrote it
    Column("status", String(16), nullable=False),  # online / offline
    Column("last_frame_at", UTCDateTime(), nullable=True),  # capture time of its newest frame
    Column("last_seen_at", UTCDateTime(), nullable=False),  # arrival (owner's wall clock): the newest wins the row
    Column("open_events", JSON, nullable=False),  # the open events as GET /cameras shows them
    Column("view", JSON, nullable=True),  # its view checks' state
    Column("source", JSON, nullable=True),  # its stream's state (a gateway's report or a pulled stream)
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("frame_at", UTCDateTime(), nullable=True),  # capture time of the shared frame
    Column("frame_jpeg", LargeBinary, nullable=True),  # a small JPEG of its newest frame
)

crossings_table = Table(
    "campusguard_crossings", metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("camera_id", String(128), nullable=False),
    Column("at_us", BigInteger(), nullable=False),  # the crossing's rule time, microseconds since 1970 UTC
    Column("line", String(257), nullable=False),  # zone/rule
    Column("direction", String(8), nullable=False),
    Column("class_name", String(128), nullable=False),
    Index("ix_campusguard_crossings_camera", "camera_id", "at_us"),
)

# Runtime model changes (migration 0009, app/rules/store/modelchanges.py): the load / swap / unload
# of a replica, read by every replica of the site (app/wiring/model_sync.py). Append-only; ``seq`` orders them.
model_changes_table = Table(
    "campusguard_model_changes", metadata,
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("at", UTCDateTime(), nullable=False),
    Column("name", String(64), nullable=False),
    Column("action", String(16), nullable=False),  # load / swap / unload
    Column("weights", String(512), nullable=True),  # relative to the models folder; null for an unload
    Column("weights_sha256", String(64), nullable=True),
    Column("models_file_sha256", String(64), nullable=True),  # the models file the replica served (null: none)
    Column("by", String(64), nullable=False),  # the replica that made it
)

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MICROSECOND = dt.timedelta(microseconds=1)


def to_us(when: dt.datetime) -> int:
    """Microseconds since 1970 UTC, exactly (integer arithmetic, no float rounding)."""
    return (as_utc(when) - EPOCH) // MICROSECOND


def from_us(us: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=us)


def parse_time(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
