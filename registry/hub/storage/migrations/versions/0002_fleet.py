"""Fleet (#16): blob leases for gc, indexes gc asks by, 64-bit blob sizes (PostgreSQL's INTEGER is 32-bit).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blob_leases",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("taken_at", sa.Float, nullable=False),
    )
    for table in ("files", "lfs_objects"):
        with op.batch_alter_table(table) as t:
            t.alter_column("size", type_=sa.BigInteger, existing_type=sa.Integer, existing_nullable=False)
    op.create_index("ix_files_sha256", "files", ["sha256"])
    op.create_index("ix_lfs_objects_oid", "lfs_objects", ["oid"])


def downgrade() -> None:
    op.drop_index("ix_lfs_objects_oid", "lfs_objects")
    op.drop_index("ix_files_sha256", "files")
    for table in ("files", "lfs_objects"):
        with op.batch_alter_table(table) as t:
            t.alter_column("size", type_=sa.Integer, existing_type=sa.BigInteger, existing_nullable=False)
    op.drop_table("blob_leases")
