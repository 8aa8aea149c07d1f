"""The audit trail in the event store: a repository that only appends, and the trail that feeds it.

``AuditRepo`` has no update and no delete of a single record: records are appended, read
newest first by cursor, and removed only by retention (``delete_before``), after
``audit_retain_days``. The table refuses UPDATE itself (a trigger, migration 0005).

``StoreAudit`` is what the HTTP layer records through (app/core/audit.py ``AuditTrail``):
``record`` logs the line and appends to a bounded in-memory buffer (app/rules/store/buffer.py)
that its thread writes in order, so a change never waits for, or fails on, the database; a
read (``page``) writes what this replica has buffered first, so its own changes show at once.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine

from app.core.audit import AuditEntry, AuditTrail
from app.core.metrics import Metrics
from app.core.timeutil import iso
from app.rules.store.buffer import BufferedSink
from app.rules.store.errors import StoreUnavailable, describe, is_outage
from app.rules.store.schema import audit_table as t
from app.rules.store.series import StoreSeries

log = logging.getLogger("campusguard.audit")


def row_to_record(row) -> dict[str, Any]:
    return {"id": row.id, "at": iso(row.at), "actor": row.actor, "client": row.client, "action": row.action,
            "target": row.target, "outcome": row.outcome, "before": row.before, "after": row.after}


class AuditRepo:
    """The audit table (thread-safe: the engine's connection pool)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def append(self, entries: list[AuditEntry]) -> None:
        with self.engine.begin() as conn:
            conn.execute(t.insert(), [{"at": e.at, "actor": e.actor[:128],
                                       "client": (e.client or None) and e.client[:64],
                                       "action": e.action[:32], "target": e.target[:512], "outcome": e.outcome[:16],
                                       "before": e.before, "after": e.after} for e in entries])

    def page(self, *, cursor: int | None, limit: int, action: str | None = None, actor: str | None = None,
             exclude_action: str | None = None) -> tuple[list[dict[str, Any]], int | None]:
        """Records newest first, ``limit`` of them, older than the record ``cursor`` (its id);
        and the cursor of the next page (None: this was the last)."""
        conds = []
        if cursor is not None:
            conds.append(t.c.id < cursor)
        if action is not None:
            conds.append(t.c.action == action)
        if actor is not None:
            conds.append(t.c.actor == actor)
        if exclude_action is not None:
            conds.append(t.c.action != exclude_action)
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(*conds).order_by(t.c.id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        return [row_to_record(r) for r in rows], (rows[-1].id if more and rows else None)

    def delete_before(self, cutoff: dt.datetime) -> int:
        """Retention: records older than ``cutoff``; how many."""
        with self.engine.begin() as conn:
            return int(conn.execute(delete(t).where(t.c.at < cutoff)).rowcount or 0)


class StoreAudit(AuditTrail):
    """The audit trail of a server with an event store."""

    enabled = True

    def __init__(self, repo: AuditRepo, *, store_up: Callable[[], bool] = lambda: True, capacity: int = 10_000,
                 flush_s: float = 0.5, metrics: Metrics) -> None:
        self.repo = repo
        self.metrics = StoreSeries.of(metrics)
        self.store_up = store_up  # the event writer's view: the table exists once migrations ran
        self.buffer: BufferedSink[AuditEntry] = BufferedSink(
            "audit-trail", repo.append, capacity=capacity, batch=100, interval_s=flush_s,
            ready=lambda: self.store_up(), on_drop=self._dropped)

    def start(self) -> None:
        self.buffer.start()

    def stop(self) -> None:
        if lost := self.buffer.stop():
            log.error("%d audit record(s) still buffered at shutdown are lost (they are in the log)", lost)

    def record(self, entry: AuditEntry) -> None:
        """One line in the log, one record on its way to the store (never blocks on the database)."""
        entry.log_line()
        self.buffer.add(entry)
        self.buffer.wake()

    def flush(self) -> int:
        return self.buffer.flush() if self.store_up() else 0

    def page(self, *, cursor: int | None, limit: int, action: str | None = None, actor: str | None = None,
             exclude_action: str | None = None) -> tuple[list[dict[str, Any]], int | None]:
        try:
            self.flush()
            return self.repo.page(cursor=cursor, limit=limit, action=action, actor=actor,
                                  exclude_action=exclude_action)
        except Exception as exc:
            if is_outage(exc):
                raise StoreUnavailable(f"event store unreachable: {describe(exc)}") from None
            raise

    def _dropped(self, n: int) -> None:
        log.error("audit buffer full: dropped the %d oldest record(s) (they are in the log)", n)
        if n:
            self.metrics.audit_dropped.inc(n)
