"""Evidence clips: the URL path of an event's MP4.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("campusguard_events") as batch:  # SQLite: batch mode
        batch.add_column(sa.Column("clip", sa.String(512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campusguard_events") as batch:
        batch.drop_column("clip")
