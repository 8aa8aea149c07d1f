"""Deletes in batches: a day of frames or a month of crossings in one DELETE would hold the
write lock (SQLite) or a long transaction (PostgreSQL) while live writers wait."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Table, delete, select
from sqlalchemy.engine import Engine


def delete_in_batches(engine: Engine, table: Table, condition: ColumnElement[bool], batch: int = 5000) -> int:
    """Delete the rows of ``table`` matching ``condition``, ``batch`` rows per transaction; how many went."""
    deleted = 0
    while True:
        with engine.begin() as conn:
            ids = select(table.c.id).where(condition).limit(batch).scalar_subquery()
            n = conn.execute(delete(table).where(table.c.id.in_(ids))).rowcount
        deleted += n
        if n < batch:
            return deleted
