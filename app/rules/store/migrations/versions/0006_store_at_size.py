"""The store at size: indexes for every GET /events filter in list order, the outbox by
event (retention), and the detection log in replay order (captured_us, id); the indexes
they supersede are dropped (fewer indexes to write per event).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

EVENTS = "campusguard_events"
INDEXES = [
    ("ix_campusguard_events_order", EVENTS, ["started_at", "id"]),
    ("ix_campusguard_events_camera_order", EVENTS, ["camera_id", "started_at", "id"]),
    ("ix_campusguard_events_zone", EVENTS, ["zone", "started_at", "id"]),
    ("ix_campusguard_events_rule", EVENTS, ["rule", "started_at", "id"]),
    ("ix_campusguard_events_acknowledged", EVENTS, ["acknowledged", "started_at", "id"]),
    ("ix_campusguard_events_false_positive", EVENTS, ["false_positive", "started_at", "id"]),
    ("ix_campusguard_outbox_event", "campusguard_outbox", ["event_id"]),
    ("ix_campusguard_frames_order", "campusguard_frames", ["captured_us", "id"]),
]


# superseded: the new indexes lead with the same columns
REPLACED = [
    ("ix_campusguard_events_started", EVENTS, ["started_at"]),
    ("ix_campusguard_events_camera", EVENTS, ["camera_id", "started_at"]),
    ("ix_campusguard_frames_time", "campusguard_frames", ["captured_us"]),
]


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)
    for name, table, _ in REPLACED:
        op.drop_index(name, table)


def downgrade() -> None:
    for name, table, columns in REPLACED:
        op.create_index(name, table, columns)
    for name, table, _ in reversed(INDEXES):
        op.drop_index(name, table)
