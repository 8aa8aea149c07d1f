"""The audit trail: one row per change a person made; append-only (a trigger refuses UPDATE).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION campusguard_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'campusguard_audit is append-only';
END $$
"""
PG_TRIGGER = ("CREATE TRIGGER campusguard_audit_no_update BEFORE UPDATE ON campusguard_audit "
              "FOR EACH ROW EXECUTE FUNCTION campusguard_audit_append_only()")
SQLITE_TRIGGER = ("CREATE TRIGGER campusguard_audit_no_update BEFORE UPDATE ON campusguard_audit "
                  "BEGIN SELECT RAISE(ABORT, 'campusguard_audit is append-only'); END")


def upgrade() -> None:
    op.create_table(
        "campusguard_audit",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("client", sa.String(64), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("before", sa.Text(), nullable=True),
        sa.Column("after", sa.Text(), nullable=True),
    )
    op.create_index("ix_campusguard_audit_at", "campusguard_audit", ["at"])
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    elif dialect == "sqlite":
        op.execute(SQLITE_TRIGGER)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    on_table = " ON campusguard_audit" if dialect == "postgresql" else ""
    op.execute("DROP TRIGGER IF EXISTS campusguard_audit_no_update" + on_table)
    if dialect == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS campusguard_audit_append_only()")
    op.drop_index("ix_campusguard_audit_at", "campusguard_audit")
    op.drop_table("campusguard_audit")
