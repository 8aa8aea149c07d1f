"""The fleet's shared state: replicas (heartbeats), camera state (one row per camera, written
in batches by the replica that gets its frames) and line crossings (counts that every replica
answers the same and that survive a restart).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "campusguard_replicas",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "campusguard_camera_state",
        sa.Column("camera_id", sa.String(128), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("last_frame_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("open_events", sa.JSON(), nullable=False),
        sa.Column("view", sa.JSON(), nullable=True),
        sa.Column("source", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("frame_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("frame_jpeg", sa.LargeBinary(), nullable=True),
    )
    op.create_table(
        "campusguard_crossings",
        sa.Column("id", BIGINT, primary_key=True, autoincrement=True),
        sa.Column("camera_id", sa.String(128), nullable=False),
        sa.Column("at_us", sa.BigInteger(), nullable=False),
        sa.Column("line", sa.String(257), nullable=False),
        sa.Column("direction", sa.String(8), nullable=False),
        sa.Column("class_name", sa.String(128), nullable=False),
    )
    op.create_index("ix_campusguard_crossings_camera", "campusguard_crossings", ["camera_id", "at_us"])


def downgrade() -> None:
    op.drop_index("ix_campusguard_crossings_camera", "campusguard_crossings")
    op.drop_table("campusguard_crossings")
    op.drop_table("campusguard_camera_state")
    op.drop_table("campusguard_replicas")
