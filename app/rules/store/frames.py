"""The detection log's rows: one per frame the rules evaluated (app/rules/store/framelog.py
encodes them), read back in evaluation order by replay and deleted by retention.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.engine import Engine

from app.rules.store.batched import delete_in_batches
from app.rules.store.schema import frames_table, to_us


class FramesRepo:
    """The detection-log table (thread-safe: the engine's connection pool)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def log(self, rows: list[dict[str, Any]]) -> None:
        """Insert detection-log rows (``frames_table`` columns but ``id``) in one transaction."""
        if rows:
            with self.engine.begin() as conn:
                conn.execute(frames_table.insert(), rows)

    def count(self, camera_ids: list[str], since: dt.datetime, until: dt.datetime) -> dict[str, int]:
        """Logged frames per camera captured in [since, until)."""
        f = frames_table.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(f.camera_id, func.count()).where(
                f.camera_id.in_(camera_ids), f.captured_us >= to_us(since), f.captured_us < to_us(until))
                .group_by(f.camera_id)).all()
        return {r[0]: int(r[1]) for r in rows}

    def iter(self, camera_ids: list[str], since: dt.datetime, until: dt.datetime, chunk: int = 2000):
        """These cameras' logged rows captured in [since, until), in evaluation order (capture
        time, then insertion), read ``chunk`` rows at a time (keyset pagination: a day of
        frames never sits in memory, and stopping early reads no more)."""
        f = frames_table.c
        last: tuple[int, int] | None = None
        while True:
            conds = [f.camera_id.in_(camera_ids), f.captured_us >= to_us(since), f.captured_us < to_us(until)]
            if last is not None:  # a row-value comparison: both databases walk the (captured_us, id) index
                conds.append(tuple_(f.captured_us, f.id) > tuple_(last[0], last[1]))
            with self.engine.connect() as conn:
                rows = conn.execute(select(frames_table).where(*conds)
                                    .order_by(f.captured_us, f.id).limit(chunk)).all()
            yield from rows
            if len(rows) < chunk:
                return
            last = (rows[-1].captured_us, rows[-1].id)

    def delete_before(self, cutoff: dt.datetime, batch: int = 5000) -> int:
        """Delete logged frames captured before ``cutoff``, ``batch`` rows per transaction
        (a day of frames in one DELETE would hold the write lock for long); how many went."""
        return delete_in_batches(self.engine, frames_table, frames_table.c.captured_us < to_us(cutoff), batch)
