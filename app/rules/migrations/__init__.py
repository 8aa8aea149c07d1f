"""Alembic migrations of the event store (run by ``app.rules.migrate``; see docs/rules.md)."""
