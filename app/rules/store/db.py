"""The event store: one SQLAlchemy database holding its repositories.

SQLite by default (a file path in ``events_db_url``), PostgreSQL for several replicas
(``postgresql+psycopg://...``). The schema is managed by Alembic migrations
(``app.rules.store.migrate``), applied on start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from app.core import redact
from app.core.errors import ConfigError
from app.rules.store.audit import AuditRepo
from app.rules.store.events import EventsRepo
from app.rules.store.fleet import FleetRepo
from app.rules.store.frames import FramesRepo
from app.rules.store.modelchanges import ModelChangesRepo
from app.rules.store.outbox import OutboxRepo


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


class EventStore:
    """The database handle: ``events``, ``outbox``, ``frames``, ``audit``, ``fleet`` and ``model_changes``
    repositories on one engine."""

    def __init__(self, url: str, *, migrate: bool = True, replica: str | None = None) -> None:
        """``migrate``: apply pending migrations now (the service defers it to its writer
        thread, so a database that is down at startup does not stop detection). ``replica``: the
        fleet's replica id, stored with each event this process opens (service/orphans.py)."""
        self.url = url
        try:
            self.engine = make_engine(url)
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise ConfigError(
                f"invalid CAMPUSGUARD_EVENTS_DB_URL {redact.dsn(url)}: {redact.scrub(str(exc))}") from None
        self.events = EventsRepo(self.engine, replica)
        self.outbox = OutboxRepo(self.engine)
        self.frames = FramesRepo(self.engine)
        self.audit = AuditRepo(self.engine)
        self.fleet = FleetRepo(self.engine)
        self.model_changes = ModelChangesRepo(self.engine)  # runtime model changes the replicas share
        if migrate:
            self.migrate()

    @property
    def safe_url(self) -> str:
        """The URL with its password masked and no query string (for logs and messages)."""
        return redact.dsn(self.url)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

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
