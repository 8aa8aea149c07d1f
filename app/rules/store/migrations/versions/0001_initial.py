"""The event store as `metadata.create_all` built it before migrations existed.

Revision ID: 0001
Revises:
Create Date: 2026-12-03

Databases created before Alembic have exactly these tables and no ``alembic_version``;
``app.rules.store.migrate`` stamps them at this revision instead of creating anything.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "campusguard_events",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("camera_id", sa.String(128), nullable=False),
        sa.Column("zone", sa.String(128), nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("rule_type", sa.String(32), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("objects", sa.JSON(), nullable=False),
        sa.Column("max_count", sa.Integer(), nullable=False),
        sa.Column("snapshot", sa.String(512), nullable=True),
    )
    op.create_index("ix_campusguard_events_started", "campusguard_events", ["started_at"])
    op.create_index("ix_campusguard_events_camera", "campusguard_events", ["camera_id", "started_at"])
    op.create_table(
        "campusguard_outbox",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.UniqueConstraint("url", "idempotency_key", name="uq_campusguard_outbox_key"),
    )
    op.create_index("ix_campusguard_outbox_pending", "campusguard_outbox", ["delivered_at", "url", "id"])


def downgrade() -> None:
    op.drop_table("campusguard_outbox")
    op.drop_table("campusguard_events")
