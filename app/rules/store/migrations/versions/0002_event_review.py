"""Operator review of events: acknowledged / false positive, a note, who and when.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("campusguard_events") as batch:  # SQLite: batch mode
        batch.add_column(sa.Column("acknowledged", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("false_positive", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("reviewed_by", sa.String(256), nullable=True))
        batch.add_column(sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_campusguard_events_ended", "campusguard_events", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_campusguard_events_ended", "campusguard_events")
    with op.batch_alter_table("campusguard_events") as batch:
        for name in ("reviewed_at", "reviewed_by", "note", "false_positive", "acknowledged"):
            batch.drop_column(name)
