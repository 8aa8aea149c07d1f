"""The fleet's shared state in the event store: replica heartbeats, camera rows, line crossings.

Written by each replica's fleet writer (app/rules/service/fleetwriter.py) in one transaction
per tick, read by every replica's camera routes (app/rules/service/fleet.py). A camera's row
belongs to the replica that received its newest frame: an upsert whose ``last_seen_at`` is
older than the stored one changes nothing, so a replica the camera has left (a rebalance, a
restart elsewhere) cannot overwrite the new owner's state with its own silence. This relies
on the replicas' wall clocks agreeing to well under a second (NTP), as the rest of the fleet does.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection, Engine

from app.rules.store.batched import delete_in_batches
from app.rules.store.schema import camera_state_table, crossings_table, events_table, replicas_table, to_us

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

# camera health and view events say what a camera did, not what a rule saw: a gone replica's
# camera_offline is not ended for it (the camera's next owner ends it when frames come back)
NOT_ORPHANED = ("camera_offline", "camera_online", "camera_view")
STATE_COLUMNS = ("owner", "status", "last_frame_at", "last_seen_at", "open_events", "view", "source", "updated_at")


@dataclass(frozen=True, slots=True)
class Crossing:
    camera_id: str
    at: dt.datetime  # the crossing's rule time
    line: str
    direction: str
    class_name: str


@dataclass(frozen=True, slots=True)
class SharedFrame:
    camera_id: str
    captured_at: dt.datetime
    jpeg: bytes


def _upsert(conn: Connection, table, key: str, rows: list[dict[str, Any]], columns: tuple[str, ...],
            newer_only: str | None = None) -> None:
    """INSERT ... ON CONFLICT DO UPDATE on both databases (``newer_only``: update only when
    the new row's column is not older than the stored one)."""
    if not rows:
        return
    stmt: postgresql.Insert | sqlite.Insert
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        stmt = postgresql_insert(table)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(table)
    where = None if newer_only is None else table.c[newer_only] <= stmt.excluded[newer_only]
    conn.execute(stmt.on_conflict_do_update(index_elements=[key], set_={c: stmt.excluded[c] for c in columns},
                                            where=where), rows)


class FleetRepo:
    """Thread-safe (the engine's connection pool)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- writes (one transaction per tick of a replica's fleet writer) ----------------------
    def publish(self, replica_id: str, started_at: dt.datetime, now: dt.datetime, states: list[dict[str, Any]],
                frames: list[SharedFrame], crossings: list[Crossing]) -> None:
        """The replica's heartbeat, its changed camera rows (``camera_state_table`` columns;
        the newest ``last_seen_at`` wins), the frames it shares (only into rows it still owns)
        and its new line crossings, in one transaction."""
        with self.engine.begin() as conn:
            _upsert(conn, replicas_table, "id", [{"id": replica_id, "started_at": started_at, "heartbeat_at": now}],
                    ("started_at", "heartbeat_at"))
            _upsert(conn, camera_state_table, "camera_id", states, STATE_COLUMNS, newer_only="last_seen_at")
            c = camera_state_table.c
            for f in frames:
                conn.execute(update(camera_state_table).where(c.camera_id == f.camera_id, c.owner == replica_id)
                             .values(frame_at=f.captured_at, frame_jpeg=f.jpeg))
            if crossings:
                conn.execute(crossings_table.insert(), [
                    {"camera_id": x.camera_id, "at_us": to_us(x.at), "line": x.line, "direction": x.direction,
                     "class_name": x.class_name} for x in crossings])

    # --- reads ------------------------------------------------------------------------------
    def states(self) -> dict[str, dict[str, Any]]:
        """Every camera row (without its frame) by camera id."""
        cols = [camera_state_table.c.camera_id, *(camera_state_table.c[n] for n in STATE_COLUMNS),
                camera_state_table.c.frame_at]
        with self.engine.connect() as conn:
            rows = conn.execute(select(*cols)).mappings().all()
        return {r["camera_id"]: dict(r) for r in rows}

    def replicas(self) -> dict[str, dict[str, Any]]:
        """Every replica that ever wrote, by id: ``started_at``, ``heartbeat_at``."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(replicas_table)).mappings().all()
        return {r["id"]: dict(r) for r in rows}

    def frame(self, camera_id: str) -> SharedFrame | None:
        c = camera_state_table.c
        with self.engine.connect() as conn:
            row = conn.execute(select(c.frame_at, c.frame_jpeg).where(c.camera_id == camera_id)).first()
        if row is None or row.frame_jpeg is None or row.frame_at is None:
            return None
        return SharedFrame(camera_id, row.frame_at, bytes(row.frame_jpeg))

    def counts(self, camera_id: str, since: dt.datetime | None) -> dict[tuple[str, str, str], int]:
        """Stored crossings of a camera by (line, direction, class) at or after ``since`` (the
        (camera_id, at_us) index: one range scan)."""
        c = crossings_table.c
        query = select(c.line, c.direction, c.class_name, func.count()).where(c.camera_id == camera_id)
        if since is not None:
            query = query.where(c.at_us >= to_us(since))
        with self.engine.connect() as conn:
            rows = conn.execute(query.group_by(c.line, c.direction, c.class_name)).all()
        return {(r[0], r[1], r[2]): int(r[3]) for r in rows}

    # --- a gone replica's open events (app/rules/service/orphans.py) ---------------------------
    def orphaned(self, silent_before: dt.datetime, me: str,
                 limit: int = 500) -> list[tuple[dict[str, Any], dt.datetime]]:
        """Open rule events opened by a replica (not ``me``) whose last heartbeat is before
        ``silent_before``, each with the time it ends at: its camera's last frame if that replica
        still owns the camera's row, else the replica's last heartbeat (never before its start)."""
        e, r, s = events_table.c, replicas_table.c, camera_state_table.c
        query = (select(events_table, r.heartbeat_at.label("heartbeat"), s.owner.label("row_owner"),
                        s.last_frame_at.label("row_frame_at"))
                 .join(replicas_table, r.id == e.replica)
                 .outerjoin(camera_state_table, s.camera_id == e.camera_id)
                 .where(e.ended_at.is_(None), r.heartbeat_at < silent_before, r.id != me,
                        e.rule_type.not_in(NOT_ORPHANED))
                 .order_by(e.started_at).limit(limit))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        out = []
        for row in rows:
            end = row.row_frame_at if row.row_owner == row.replica and row.row_frame_at is not None else row.heartbeat
            out.append((dict(row._mapping), max(end, row.started_at)))
        return out

    def end_orphan(self, event_id: str, ended_at: dt.datetime) -> bool:
        """End one open event unless someone did first: the atomic UPDATE ... WHERE ended_at IS
        NULL is the lock (on PostgreSQL a racing replica waits for the row, then matches nothing)."""
        e = events_table.c
        with self.engine.begin() as conn:
            done = conn.execute(update(events_table).where(e.id == event_id, e.ended_at.is_(None))
                                .values(ended_at=ended_at)).rowcount
        return done == 1

    def clear_open(self, replica_id: str) -> None:
        """The camera rows a gone replica still owns show no open events (they were ended)."""
        with self.engine.begin() as conn:
            conn.execute(update(camera_state_table).where(camera_state_table.c.owner == replica_id)
                         .values(open_events=[]))

    # --- retention --------------------------------------------------------------------------
    def delete_before(self, cutoff: dt.datetime, batch: int = 5000) -> int:
        """Crossings older than ``cutoff`` (``batch`` rows per transaction) and replicas silent
        since before it that own no camera row; how many crossings went."""
        deleted = delete_in_batches(self.engine, crossings_table, crossings_table.c.at_us < to_us(cutoff), batch)
        owners = select(camera_state_table.c.owner).distinct().scalar_subquery()
        with self.engine.begin() as conn:
            conn.execute(delete(replicas_table).where(replicas_table.c.heartbeat_at < cutoff,
                                                      replicas_table.c.id.not_in(owners)))
        return deleted
