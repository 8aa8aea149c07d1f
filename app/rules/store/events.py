"""Events and their operator reviews: one row per event, inserted when it starts and
updated when it ends; in the *same* transaction one outbox row per delivery target is
written (``outbox.py`` drains them), so a crash can never record an event and lose its delivery.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, literal_column, select, tuple_, update
from sqlalchemy.engine import Engine

from app.core.timeutil import iso, utcnow
from app.rules.store.schema import events_table, outbox_table, parse_time

COUNT_CAP = 10_000  # GET /events counts exactly up to here, then says "at least"
IN_CHUNK = 500  # ids per IN (...) lookup: well under every driver's bound-parameter limit


def _chunks(items: list[str]) -> list[list[str]]:
    return [items[i:i + IN_CHUNK] for i in range(0, len(items), IN_CHUNK)]


@dataclass(frozen=True, slots=True)
class EventPage:
    items: list[dict[str, Any]]
    total: int  # matching events, exact or (total_exact false) at least this many
    total_exact: bool
    next: tuple[dt.datetime, str] | None  # (started_at, id) of the last item when more follow


def row_to_event(row) -> dict[str, Any]:
    return {"id": row.id, "camera_id": row.camera_id, "zone": row.zone, "rule": row.rule,
            "rule_type": row.rule_type, "state": "started" if row.ended_at is None else "ended",
            "started_at": iso(row.started_at), "ended_at": iso(row.ended_at), "objects": row.objects or [],
            "max_count": row.max_count, "snapshot": row.snapshot, "clip": row.clip,
            "acknowledged": bool(row.acknowledged), "false_positive": bool(row.false_positive), "note": row.note,
            "reviewed_by": row.reviewed_by, "reviewed_at": iso(row.reviewed_at)}


class EventsRepo:
    """The events table (thread-safe: the engine's connection pool)."""

    def __init__(self, engine: Engine, replica: str | None = None) -> None:
        self.engine = engine
        self.replica = replica  # stored with each event this process opens (the fleet's replica id)

    def record(self, event: Mapping[str, Any], deliveries: Sequence[tuple[str, str, bytes]] = ()) -> None:
        """Insert or update an event and enqueue its deliveries, atomically.

        ``deliveries`` are (url, idempotency_key, payload) tuples.
        """
        self.record_many([(event, list(deliveries))])

    def record_many(self, writes: list[tuple[Mapping[str, Any], list[tuple[str, str, bytes]]]]) -> None:
        """Several ``record`` calls in one transaction, with the effect of running them in order
        (the event writer's batches).

        In a few statements per batch, not several per write: an event that starts and ends in
        one batch (every line crossing) would otherwise cost a SELECT and an INSERT, then a
        SELECT and an UPDATE, each built and compiled on its own. The batch's events are looked
        up at once, each event's writes folded in order into its final row, then inserted and
        updated with one executemany each; deliveries are checked for duplicates at once too."""
        now = utcnow()
        t = events_table.c
        with self.engine.begin() as conn:
            ids = list(dict.fromkeys(event["id"] for event, _ in writes))
            stored: dict[str, dt.datetime | None] = {}
            for part in _chunks(ids):
                stored.update(conn.execute(select(t.id, t.ended_at).where(t.id.in_(part))).tuples().all())
            rows: dict[str, dict[str, Any]] = {}
            ended = dict(stored)  # each event's end as the writes so far leave it
            deliveries: list[tuple[str, str, str, bytes]] = []
            for event, targets in writes:
                eid = event["id"]
                values = {"camera_id": event["camera_id"], "zone": event["zone"], "rule": event["rule"],
                          "rule_type": event.get("rule_type", event["rule"]),
                          "started_at": parse_time(event["started_at"]), "ended_at": parse_time(event.get("ended_at")),
                          "objects": event.get("objects") or [], "max_count": int(event.get("max_count") or 0),
                          "snapshot": event.get("snapshot"), "clip": event.get("clip")}
                if eid in ended and ended[eid] is not None and values["ended_at"] is None:
                    del values["ended_at"]  # ended already (here, or by another replica: orphans.py): never reopened
                rows.setdefault(eid, {}).update(values)
                ended[eid] = values.get("ended_at", ended.get(eid))
                deliveries.extend((eid, url, key, payload) for url, key, payload in targets)
            inserts = [{"id": eid, "replica": self.replica, **row} for eid, row in rows.items() if eid not in stored]
            if inserts:
                conn.execute(events_table.insert(), inserts)
            by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for eid, row in rows.items():
                if eid in stored:
                    by_columns.setdefault(tuple(sorted(row)), []).append({"event_id_": eid, **row})
            for group in by_columns.values():
                conn.execute(update(events_table).where(t.id == bindparam("event_id_")), group)
            if deliveries:
                self._enqueue(conn, deliveries, now)

    @staticmethod
    def _enqueue(conn, deliveries: list[tuple[str, str, str, bytes]], now: dt.datetime) -> None:
        """Outbox rows for the deliveries, skipping any (url, idempotency key) already queued."""
        o = outbox_table.c
        seen: set[tuple[str, str]] = set()
        keys: dict[str, set[str]] = {}
        for _, url, key, _ in deliveries:
            keys.setdefault(url, set()).add(key)
        for url, of_url in keys.items():  # by url, then key: the unique index's order, never a scan
            for part in _chunks(list(of_url)):
                seen.update(conn.execute(select(o.url, o.idempotency_key)
                                         .where(o.url == url, o.idempotency_key.in_(part))).tuples())
        rows = []
        for eid, url, key, payload in deliveries:
            if (url, key) in seen:
                continue
            seen.add((url, key))
            rows.append({"event_id": eid, "url": url, "idempotency_key": key, "payload": payload.decode(),
                         "attempts": 0, "next_attempt_at": now, "created_at": now})
        if rows:
            conn.execute(outbox_table.insert(), rows)

    def get(self, event_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(events_table).where(events_table.c.id == event_id)).first()
        return row_to_event(row) if row else None

    def query(self, *, camera_id: str | None = None, zone: str | None = None, rule: str | None = None,
              since: dt.datetime | None = None, until: dt.datetime | None = None,
              acknowledged: bool | None = None, false_positive: bool | None = None,
              limit: int = 50, offset: int = 0, after: tuple[dt.datetime, str] | None = None) -> EventPage:
        """Events whose ``started_at`` is in [since, until), newest first (then by id).

        ``after`` is a keyset cursor: the (started_at, id) of the last event of the previous
        page, so paging to the end reads one page of index entries each time, never the
        rows before it (``offset`` does, and is for the first pages only). The count is exact
        up to ``COUNT_CAP`` matches and capped beyond (``total_exact`` false): a poll of a
        store with millions of events never counts them all."""
        t = events_table.c
        conds = []
        for column, value in ((t.camera_id, camera_id), (t.zone, zone), (t.rule, rule),
                              (t.acknowledged, acknowledged), (t.false_positive, false_positive)):
            if value is not None:
                conds.append(column == value)
        if since is not None:
            conds.append(t.started_at >= since)
        if until is not None:
            conds.append(t.started_at < until)
        page = [*conds]
        if after is not None:
            page.append(tuple_(t.started_at, t.id) < tuple_(parse_time(after[0]), after[1]))
        with self.engine.connect() as conn:
            matching = (select(literal_column("1")).select_from(events_table).where(*conds)
                        .limit(COUNT_CAP + 1).subquery())
            total = int(conn.execute(select(func.count()).select_from(matching)).scalar_one())
            rows = conn.execute(select(events_table).where(*page)
                                .order_by(t.started_at.desc(), t.id.desc()).limit(limit + 1).offset(offset)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        last = (rows[-1].started_at, rows[-1].id) if more and rows else None
        return EventPage([row_to_event(r) for r in rows], min(total, COUNT_CAP), total <= COUNT_CAP, last)

    def review(self, event_id: str, changes: dict[str, Any], by: str, at: dt.datetime) -> dict[str, Any] | None:
        """Set ``acknowledged`` / ``false_positive`` / ``note`` and who/when; the event, or None if unknown."""
        allowed = {k: v for k, v in changes.items() if k in ("acknowledged", "false_positive", "note")}
        with self.engine.begin() as conn:
            res = conn.execute(update(events_table).where(events_table.c.id == event_id)
                               .values(**allowed, reviewed_by=by, reviewed_at=at))
        return self.get(event_id) if res.rowcount else None

    # --- retention ------------------------------------------------------------------------
    def delete_ended_before(self, cutoff: dt.datetime, batch: int = 2000) -> list[tuple[str, str | None]]:
        """Delete events that ended before ``cutoff`` (reviewed or not) with their delivered outbox
        rows, and any delivered row older than it; the (id, snapshot) of the deleted events.
        Open events and undelivered rows are kept. Every transaction deletes at most ``batch``
        events (the outbox rows by their event, through its index) or ``batch`` rows, so
        writers wait at most one short batch, however much is due."""
        t, o = events_table.c, outbox_table.c
        deleted: list[tuple[str, str | None]] = []
        while True:
            with self.engine.begin() as conn:
                rows = conn.execute(select(t.id, t.snapshot).where(t.ended_at < cutoff).order_by(t.ended_at)
                                    .limit(batch)).all()
                if not rows:
                    break
                ids = [r.id for r in rows]
                conn.execute(delete(outbox_table).where(o.event_id.in_(ids), o.delivered_at.is_not(None)))
                conn.execute(delete(events_table).where(t.id.in_(ids)))
            deleted.extend((r.id, r.snapshot) for r in rows)
        while True:
            with self.engine.begin() as conn:
                old = select(o.id).where(o.delivered_at.is_not(None), o.delivered_at < cutoff).limit(batch)
                if conn.execute(delete(outbox_table).where(o.id.in_(old.scalar_subquery()))).rowcount < batch:
                    break
        return deleted

    def clear_files(self, column: str, event_ids: list[str]) -> None:
        """The files (``snapshot`` or ``clip``) of these events were deleted (disk budget, a
        failed clip): stop pointing at them."""
        if column not in ("snapshot", "clip"):
            raise ValueError(f"no file column {column!r}")
        if event_ids:
            with self.engine.begin() as conn:
                conn.execute(update(events_table).where(events_table.c.id.in_(event_ids)).values({column: None}))

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
