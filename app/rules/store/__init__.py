"""Persistence of events, outbox, detection log, audit trail and fleet state (SQLite or PostgreSQL), with
Alembic migrations and retention."""
