"""Runtime model changes shared by the replicas of a site (issue 41 part 3): each load, swap and
unload made through /admin/models, appended by the replica that made it and applied by the
others (app/wiring/model_sync.py).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "campusguard_model_changes",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("weights", sa.String(512), nullable=True),
        sa.Column("weights_sha256", sa.String(64), nullable=True),
        sa.Column("models_file_sha256", sa.String(64), nullable=True),
        sa.Column("by", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("campusguard_model_changes")
