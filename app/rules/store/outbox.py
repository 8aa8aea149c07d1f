"""The delivery outbox: rows claimed one at a time per target, across replicas.

The outbox is claimed row by row (``SELECT ... FOR UPDATE SKIP LOCKED`` plus a lease
written with a compare-and-set), so several replicas on one PostgreSQL database deliver
each row once; receivers de-duplicate on the ``Idempotency-Key`` for the one case no
sender can rule out (killed after the receiver answered, before the row was marked).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.engine import Engine

from app.core.timeutil import utcnow
from app.rules.store.schema import outbox_table


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: int
    event_id: str
    url: str
    idempotency_key: str
    payload: bytes
    attempts: int
    next_attempt_at: dt.datetime


class OutboxRepo:
    """The outbox table (thread-safe: the engine's connection pool)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def depth(self, urls: list[str] | None = None) -> int:
        o = outbox_table.c
        conds = [o.delivered_at.is_(None)]
        if urls is not None:
            conds.append(o.url.in_(urls))
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(outbox_table).where(*conds)).scalar_one())

    def claim_next(self, url: str, lease_until: dt.datetime) -> tuple[OutboxItem | None, dt.datetime | None]:
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

    def delivered(self, item_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(outbox_table).where(outbox_table.c.id == item_id).values(
                delivered_at=utcnow(), attempts=outbox_table.c.attempts + 1, last_error=None))

    def failed(self, item_id: int, next_attempt_at: dt.datetime, error: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(outbox_table).where(outbox_table.c.id == item_id).values(
                next_attempt_at=next_attempt_at, attempts=outbox_table.c.attempts + 1, last_error=error[:2000]))
