"""Which replica opened an event: so that a live replica can end the open events of one that
is gone (app/rules/service/orphans.py), found by (replica, ended_at).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("campusguard_events") as batch:
        batch.add_column(sa.Column("replica", sa.String(64), nullable=True))
    op.create_index("ix_campusguard_events_open_replica", "campusguard_events", ["replica", "ended_at"])


def downgrade() -> None:
    op.drop_index("ix_campusguard_events_open_replica", "campusguard_events")
    with op.batch_alter_table("campusguard_events") as batch:
        batch.drop_column("replica")
