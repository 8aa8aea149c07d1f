"""The detection log: one row per evaluated frame, for replaying a changed site file.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "campusguard_frames",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("camera_id", sa.String(128), nullable=False),
        sa.Column("captured_us", sa.BigInteger(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("fresh", sa.Boolean(), nullable=False),
        sa.Column("names", sa.Text(), nullable=False),
        sa.Column("detections", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_campusguard_frames_time", "campusguard_frames", ["captured_us"])


def downgrade() -> None:
    op.drop_index("ix_campusguard_frames_time", "campusguard_frames")
    op.drop_table("campusguard_frames")
