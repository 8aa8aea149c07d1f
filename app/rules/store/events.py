"""The event store and the webhook outbox: two tables in one SQLAlchemy database.

SQLite by default (a file path in ``events_db_url``), PostgreSQL for several replicas
(``postgresql+psycopg://...``). The schema is managed by Alembic migrations
(``app.rules.store.migrate``), applied on start. An event row is inserted
when the event starts and updated when it ends; in the *same* transaction one outbox row
per webhook URL is written, so a crash can never record an event and lose its delivery.

The outbox is claimed row by row (``SELECT ... FOR UPDATE SKIP LOCKED`` plus a lease
written with a compare-and-set), so several replicas on one PostgreSQL database deliver
each row once; receivers de-duplicate on the ``Idempotency-Key`` for the one case no
sender can rule out (killed after the receiver answered, before the row was marked).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (JSON, BigInteger, Boolean, Column, DateTime, Index, Integer, LargeBinary, MetaData, String,
                        Table, Text, TypeDecorator, UniqueConstraint, and_, create_engine, delete, event, false, func,
                        or_, select, update)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from app.core.errors import ConfigError
from app.core.timeutil import as_utc, iso, utcnow



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
    Index("ix_campusguard_events_started", "started_at"),
    Index("ix_campusguard_events_camera", "camera_id", "started_at"),
    Index("ix_campusguard_events_ended", "ended_at"),
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
    Index("ix_campusguard_frames_time", "captured_us"),
)

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MICROSECOND = dt.timedelta(microseconds=1)


def to_us(when: dt.datetime) -> int:
    """Microseconds since 1970 UTC, exactly (integer arithmetic, no float rounding)."""
    return (as_utc(when) - EPOCH) // MICROSECOND


def from_us(us: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=us)


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    kwargs: dict[str, Any] = {"future": True, "pool_pre_ping": True}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        if not database or database == ":memory:":
            from sqlalchemy.pool import StaticPool

            kwargs["poolclass"] = StaticPool
    elif parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        kwargs["connect_args"] = {"connect_timeout": 5}  # an unreachable host fails a write in seconds
    engine = create_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
    return engine


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: int
    event_id: str
    url: str
    idempotency_key: str
    payload: bytes
    attempts: int
    next_attempt_at: dt.datetime


def _row_to_event(row) -> dict[str, Any]:
    return {"id": row.id, "camera_id": row.camera_id, "zone": row.zone, "rule": row.rule,
            "rule_type": row.rule_type, "state": "started" if row.ended_at is None else "ended",
            "started_at": iso(row.started_at), "ended_at": iso(row.ended_at), "objects": row.objects or [],
            "max_count": row.max_count, "snapshot": row.snapshot, "clip": row.clip,
            "acknowledged": bool(row.acknowledged), "false_positive": bool(row.false_positive), "note": row.note,
            "reviewed_by": row.reviewed_by, "reviewed_at": iso(row.reviewed_at)}


class EventStore:
    """Events and outbox in one database; every method is thread-safe (a connection pool)."""

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        """``migrate``: apply pending migrations now (the service defers it to its writer
        thread, so a database that is down at startup does not stop detection)."""
        self.url = url
        try:
            self.engine = make_engine(url)
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise ConfigError(f"invalid CAMPUSGUARD_EVENTS_DB_URL: {exc}") from None
        if migrate:
            self.migrate()

    @property
    def safe_url(self) -> str:
        """The URL with its password masked (for logs and messages)."""
        return self.engine.url.render_as_string(hide_password=True)

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.execute(select(1))

    def migrate(self) -> tuple[str | None, str | None]:
        """Apply pending migrations (cross-replica safe); (revision before, revision after)."""
        from app.rules.store.migrate import upgrade

        return upgrade(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # --- events ---------------------------------------------------------------------------
    def record(self, event: dict[str, Any], deliveries: list[tuple[str, str, bytes]] = ()) -> None:
        """Insert or update an event and enqueue its webhook deliveries, atomically.

        ``deliveries`` are (url, idempotency_key, payload) tuples.
        """
        values = {"camera_id": event["camera_id"], "zone": event["zone"], "rule": event["rule"],
                  "rule_type": event.get("rule_type", event["rule"]),
                  "started_at": _parse(event["started_at"]), "ended_at": _parse(event.get("ended_at")),
                  "objects": event.get("objects") or [], "max_count": int(event.get("max_count") or 0),
                  "snapshot": event.get("snapshot"), "clip": event.get("clip")}
        now = utcnow()
        with self.engine.begin() as conn:
            exists = conn.execute(select(events_table.c.id).where(events_table.c.id == event["id"])).first()
            if exists:
                conn.execute(update(events_table).where(events_table.c.id == event["id"]).values(**values))
            else:
                conn.execute(events_table.insert().values(id=event["id"], **values))
            for url, key, payload in deliveries:
                dup = conn.execute(select(outbox_table.c.id).where(
                    outbox_table.c.url == url, outbox_table.c.idempotency_key == key)).first()
                if dup:
                    continue
                conn.execute(outbox_table.insert().values(
                    event_id=event["id"], url=url, idempotency_key=key, payload=payload.decode(),
                    attempts=0, next_attempt_at=now, created_at=now))

    def get(self, event_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(events_table).where(events_table.c.id == event_id)).first()
        return _row_to_event(row) if row else None

    def query(self, *, camera_id: str | None = None, zone: str | None = None, rule: str | None = None,
              since: dt.datetime | None = None, until: dt.datetime | None = None,
              acknowledged: bool | None = None, false_positive: bool | None = None,
              limit: int = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Events whose ``started_at`` is in [since, until), newest first; and the total count."""
        t = events_table.c
        conds = []
        if camera_id is not None:
            conds.append(t.camera_id == camera_id)
        if zone is not None:
            conds.append(t.zone == zone)
        if rule is not None:
            conds.append(t.rule == rule)
        if since is not None:
            conds.append(t.started_at >= since)
        if until is not None:
            conds.append(t.started_at < until)
        if acknowledged is not None:
            conds.append(t.acknowledged.is_(acknowledged))
        if false_positive is not None:
            conds.append(t.false_positive.is_(false_positive))
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(events_table).where(*conds)).scalar_one()
            rows = conn.execute(select(events_table).where(*conds)
                                .order_by(t.started_at.desc(), t.id.desc()).limit(limit).offset(offset)).all()
        return [_row_to_event(r) for r in rows], int(total)

    def review(self, event_id: str, changes: dict[str, Any], by: str, at: dt.datetime) -> dict[str, Any] | None:
        """Set ``acknowledged`` / ``false_positive`` / ``note`` and who/when; the event, or None if unknown."""
        allowed = {k: v for k, v in changes.items() if k in ("acknowledged", "false_positive", "note")}
        with self.engine.begin() as conn:
            res = conn.execute(update(events_table).where(events_table.c.id == event_id)
                               .values(**allowed, reviewed_by=by, reviewed_at=at))
        return self.get(event_id) if res.rowcount else None

    # --- retention ------------------------------------------------------------------------
    def delete_ended_before(self, cutoff: dt.datetime, batch: int = 500) -> list[tuple[str, str | None]]:
        """Delete events that ended before ``cutoff`` (reviewed or not) with their delivered outbox
        rows, and any delivered row older than it; the (id, snapshot) of the deleted events.
        Open events and undelivered rows are kept."""
        t, o = events_table.c, outbox_table.c
        deleted: list[tuple[str, str | None]] = []
        while True:
            with self.engine.begin() as conn:
                rows = conn.execute(select(t.id, t.snapshot).where(t.ended_at < cutoff).order_by(t.ended_at)
                                    .limit(batch)).all()
                if not rows:
                    break
                ids = [r.id for r in rows]
                conn.execute(delete(events_table).where(t.id.in_(ids)))
                conn.execute(delete(outbox_table).where(o.event_id.in_(ids), o.delivered_at.is_not(None)))
            deleted.extend((r.id, r.snapshot) for r in rows)
        with self.engine.begin() as conn:
            conn.execute(delete(outbox_table).where(o.delivered_at.is_not(None), o.delivered_at < cutoff))
        return deleted

    def clear_files(self, column: str, event_ids: list[str]) -> None:
        """The files (``snapshot`` or ``clip``) of these events were deleted (disk budget, a
        failed clip): stop pointing at them."""
        if column not in ("snapshot", "clip"):
            raise ValueError(f"no file column {column!r}")
        if event_ids:
            with self.engine.begin() as conn:
                conn.execute(update(events_table).where(events_table.c.id.in_(event_ids)).values({column: None}))

    # --- detection log --------------------------------------------------------------------
    def log_frames(self, rows: list[dict[str, Any]]) -> None:
        """Insert detection-log rows (``frames_table`` columns but ``id``) in one transaction."""
        if rows:
            with self.engine.begin() as conn:
                conn.execute(frames_table.insert(), rows)

    def count_frames(self, camera_ids: list[str], since: dt.datetime, until: dt.datetime) -> dict[str, int]:
        """Logged frames per camera captured in [since, until)."""
        f = frames_table.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(f.camera_id, func.count()).where(
                f.camera_id.in_(camera_ids), f.captured_us >= to_us(since), f.captured_us < to_us(until))
                .group_by(f.camera_id)).all()
        return {r[0]: int(r[1]) for r in rows}

    def iter_frames(self, camera_ids: list[str], since: dt.datetime, until: dt.datetime, chunk: int = 2000):
        """These cameras' logged rows captured in [since, until), in evaluation order (capture
        time, then insertion), read ``chunk`` rows at a time (keyset pagination: a day of
        frames never sits in memory, and stopping early reads no more)."""
        f = frames_table.c
        last: tuple[int, int] | None = None
        while True:
            conds = [f.camera_id.in_(camera_ids), f.captured_us >= to_us(since), f.captured_us < to_us(until)]
            if last is not None:
                conds.append(or_(f.captured_us > last[0], and_(f.captured_us == last[0], f.id > last[1])))
            with self.engine.connect() as conn:
                rows = conn.execute(select(frames_table).where(*conds)
                                    .order_by(f.captured_us, f.id).limit(chunk)).all()
            yield from rows
            if len(rows) < chunk:
                return
            last = (rows[-1].captured_us, rows[-1].id)

    def delete_frames_before(self, cutoff: dt.datetime, batch: int = 5000) -> int:
        """Delete logged frames captured before ``cutoff``, ``batch`` rows per transaction
        (a day of frames in one DELETE would hold the write lock for long); how many went."""
        f = frames_table.c
        deleted = 0
        while True:
            with self.engine.begin() as conn:
                ids = select(f.id).where(f.captured_us < to_us(cutoff)).limit(batch).scalar_subquery()
                n = conn.execute(delete(frames_table).where(f.id.in_(ids))).rowcount
            deleted += n
            if n < batch:
                return deleted

    def event_spans(self, camera_ids: list[str], since: dt.datetime,
                    until: dt.datetime) -> list[tuple[str, str, str, dt.datetime, dt.datetime | None]]:
        """(camera, zone, rule, started_at, ended_at) of the rule events of these cameras that
        started in [since, until); camera health events (no zone) are not rule events."""
        t = events_table.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.camera_id, t.zone, t.rule, t.started_at, t.ended_at).where(
                t.camera_id.in_(camera_ids), t.zone != "", t.started_at >= since, t.started_at < until)
                .order_by(t.started_at)).all()
        return [tuple(r) for r in rows]

    # --- outbox ---------------------------------------------------------------------------
    def outbox_depth(self, urls: list[str] | None = None) -> int:
        o = outbox_table.c
        conds = [o.delivered_at.is_(None)]
        if urls is not None:
            conds.append(o.url.in_(urls))
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(outbox_table).where(*conds)).scalar_one())

    def outbox_claim_next(self, url: str, lease_until: dt.datetime) -> tuple[OutboxItem | None, dt.datetime | None]:
        """Lease the oldest undelivered row for ``url`` if it is due: (item, None).

        Otherwise (None, when it is due) or (None, None) when there is nothing, or another
        replica is claiming that row right now. The head row is locked with ``FOR UPDATE
        SKIP LOCKED`` (PostgreSQL; SQLite serialises writers anyway) for the instant of the
        claim, and the claim itself is a compare-and-set of ``next_attempt_at`` to the
        lease's end, committed before the HTTP request: a replica killed mid-delivery
        leaves a lease that simply expires, and the next replica retries the row. Only the
        head is ever claimed, so deliveries to one URL stay in order across replicas.
        """
        o = outbox_table.c
        now = utcnow()
        head = (select(o.id).where(o.url == url, o.delivered_at.is_(None)).order_by(o.id).limit(1)
                .scalar_subquery())
        with self.engine.begin() as conn:
            row = conn.execute(select(outbox_table).where(o.id == head, o.delivered_at.is_(None))
                               .with_for_update(skip_locked=True)).first()
            if row is None:
                return None, None
            if row.next_attempt_at > now:
                return None, row.next_attempt_at
            taken = conn.execute(update(outbox_table).where(
                o.id == row.id, o.delivered_at.is_(None), o.next_attempt_at == row.next_attempt_at,
            ).values(next_attempt_at=lease_until)).rowcount
        if taken != 1:
            return None, None
        return OutboxItem(row.id, row.event_id, row.url, row.idempotency_key, row.payload.encode(),
                          row.attempts, lease_until), None

    def outbox_delivered(self, item_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(outbox_table).where(outbox_table.c.id == item_id).values(
                delivered_at=utcnow(), attempts=outbox_table.c.attempts + 1, last_error=None))

    def outbox_failed(self, item_id: int, next_attempt_at: dt.datetime, error: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(outbox_table).where(outbox_table.c.id == item_id).values(
                next_attempt_at=next_attempt_at, attempts=outbox_table.c.attempts + 1, last_error=error[:2000]))


def _parse(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def dumps(obj: Any) -> bytes:
    """Compact, stable JSON (the bytes that are signed)."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
