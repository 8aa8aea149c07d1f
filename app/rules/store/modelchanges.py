"""Runtime model changes in the event store: the log every replica of a site reads (issue 41).

A replica that loads, swaps or unloads a model through /admin/models appends one row; every
replica polls the rows after the last ``seq`` it has seen and applies them through its own
``ModelSwitch`` (app/wiring/model_sync.py). Rows are only appended (a later change of a name
supersedes an earlier one), so ``seq`` is the order of the changes across the replicas.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Engine

from app.core.modellog import ChangeLog, LoggedChange
from app.rules.store.schema import model_changes_table as t


class ModelChangesRepo(ChangeLog):
    """The ``campusguard_model_changes`` table (thread-safe: the engine's connection pool)."""

    enabled = True

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def append(self, change: LoggedChange) -> int:
        """Store ``change`` (its ``seq`` is ignored); the seq it got."""
        with self.engine.begin() as conn:
            result = conn.execute(t.insert().values(
                at=change.at, name=change.name[:64], action=change.action[:16], weights=change.weights,
                weights_sha256=change.weights_sha256, models_file_sha256=change.models_file_sha256,
                by=change.by[:64]))
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    def after(self, seq: int, limit: int = 500) -> list[LoggedChange]:
        """The changes after ``seq``, oldest first, at most ``limit``."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.seq > seq).order_by(t.c.seq).limit(limit)).all()
        return [LoggedChange(seq=r.seq, at=r.at, name=r.name, action=r.action, weights=r.weights,
                             weights_sha256=r.weights_sha256, models_file_sha256=r.models_file_sha256, by=r.by)
                for r in rows]
