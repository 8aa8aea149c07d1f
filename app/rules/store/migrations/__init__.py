"""Alembic migrations of the event store (run by ``app.rules.store.migrate``; see docs/rules.md)."""
