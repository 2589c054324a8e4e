"""Team signing (#43): a publisher key added by rotation keeps the current key's endorsement of it.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("keys") as t:
        t.add_column(sa.Column("endorsed_by", sa.String(16)))
        t.add_column(sa.Column("endorsement", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("keys") as t:
        t.drop_column("endorsement")
        t.drop_column("endorsed_by")
