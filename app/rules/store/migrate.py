"""Schema migrations of the event store (Alembic), safe when several replicas start at once.

The server applies pending migrations at startup and ``campusguard db upgrade`` does the
same by hand. Replicas that start together serialise on a lock held for the whole
upgrade: a PostgreSQL transaction-level advisory lock (released at commit, or when a
killed replica's connection drops) or, for SQLite files, a lock file beside the database.
The first replica migrates; the others find the schema at head and do nothing.

A database that ``metadata.create_all`` built before migrations existed has the tables
but no ``alembic_version``: it is *stamped* at the first revision (which creates exactly
those tables) and upgraded from there. A version table naming a revision this code does
not know (a newer release's database, or a hand-edited table) is reported and left alone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from app.core.errors import ConfigError
from app.rules.store.errors import StoreUnavailable, describe

log = logging.getLogger("campusguard.rules.migrate")

MIGRATIONS = Path(__file__).with_name("migrations")
BASELINE = "0001"  # the tables create_all made before Alembic
ADVISORY_LOCK_KEY = 0x43475F4D494752  # "CG_MIGR": one key for every CampusGuard replica


class MigrationError(ConfigError):
    """The database's migration state is not one this version can upgrade (left untouched)."""

    code = "migration_error"


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision this code ships."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("the migrations folder holds no revision")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: never migrated). Raises StoreUnavailable."""
    try:
        with engine.connect() as conn:
            return _current(conn)
    except DBAPIError as exc:
        raise StoreUnavailable(f"event store unreachable: {describe(exc)}") from None


def _current(conn: Connection) -> str | None:
    heads = MigrationContext.configure(conn).get_current_heads()
    if len(heads) > 1:
        raise MigrationError(f"the event store has several migration heads {sorted(heads)}; "
                             "fix alembic_version by hand")
    return heads[0] if heads else None


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Apply pending migrations under the cross-replica lock; return (before, after).

    Raises StoreUnavailable when the database cannot be reached and MigrationError when
    its version table names a revision this code does not know.
    """
    try:
        with _migration_lock(engine), engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
            before = _current(conn)
            cfg = alembic_config(conn)
            if before is None and inspect(conn).has_table("campusguard_events"):
                log.info("event store tables predate migrations: stamping them at revision %s", BASELINE)
                command.stamp(cfg, BASELINE)
            _known(cfg, _current(conn))
            command.upgrade(cfg, revision)
            after = _current(conn)
    except DBAPIError as exc:
        raise StoreUnavailable(f"event store unreachable: {describe(exc)}") from None
    except CommandError as exc:
        raise MigrationError(f"cannot migrate the event store: {exc}") from None
    if before != after:
        log.info("event store migrated from %s to %s", before or "empty", after)
    return before, after


def _known(cfg: Config, rev: str | None) -> None:
    if rev is None:
        return
    try:
        ScriptDirectory.from_config(cfg).get_revision(rev)
    except CommandError:
        raise MigrationError(
            f"the event store is at revision {rev!r}, which this version of CampusGuard does not know "
            f"(newest known: {head_revision()}); a newer release migrated it, or alembic_version was edited. "
            "Nothing was changed.") from None


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """SQLite files: an exclusive lock file next to the database (PostgreSQL locks in-database)."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    from filelock import FileLock

    with FileLock(str(Path(database).expanduser()) + ".migrate.lock", timeout=300):
        yield
