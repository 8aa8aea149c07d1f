"""Alembic environment: always run on the connection ``app.rules.store.migrate`` hands over.

The caller holds the cross-replica lock on that connection (a PostgreSQL advisory lock),
so the migration must run on it rather than open its own; SQLite needs batch mode
(ALTER TABLE is limited there), which ``render_as_batch`` turns on for autogenerate too.
"""

from __future__ import annotations

from alembic import context

from app.rules.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only `alembic` run by hand without our wrapper
    raise RuntimeError("run migrations with `campusguard db upgrade` (app.rules.store.migrate), not bare alembic")

context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite",
                  version_table="alembic_version")
with context.begin_transaction():
    context.run_migrations()
