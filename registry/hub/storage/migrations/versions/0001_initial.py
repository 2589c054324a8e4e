"""The round-1 schema, as `create_all` made it (databases from then are stamped at this revision).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repos",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("namespace", sa.String(96), nullable=False),
        sa.Column("name", sa.String(96), nullable=False),
        sa.Column("private", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("type", "namespace", "name"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "commits",
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repos.id"), primary_key=True),
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("parent", sa.String(40)),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("author", sa.String(96), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "files",
        sa.Column("repo_id", sa.Integer, primary_key=True),
        sa.Column("commit_id", sa.String(40), primary_key=True),
        sa.Column("path", sa.String(1024), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("oid", sa.String(64), nullable=False),
        sa.Column("lfs", sa.Boolean, nullable=False),
    )
    op.create_table(
        "refs",
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repos.id"), primary_key=True),
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("commit_id", sa.String(40), nullable=False),
    )
    op.create_table(
        "lfs_objects",
        sa.Column("repo_id", sa.Integer, primary_key=True),
        sa.Column("oid", sa.String(64), primary_key=True),
        sa.Column("size", sa.Integer, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("hash", sa.String(64), primary_key=True),
        sa.Column("user", sa.String(96), nullable=False),
        sa.Column("write_namespaces", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "orgs",
        sa.Column("name", sa.String(96), primary_key=True),
        sa.Column("trusted", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "org_members",
        sa.Column("org", sa.String(96), primary_key=True),
        sa.Column("user", sa.String(96), primary_key=True),
    )
    op.create_table(
        "keys",
        sa.Column("namespace", sa.String(96), primary_key=True),
        sa.Column("key_id", sa.String(16), primary_key=True),
        sa.Column("public_key", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in ("settings", "keys", "org_members", "orgs", "tokens", "lfs_objects", "refs", "files"):
        op.drop_table(table)
    op.drop_table("commits")
    op.drop_table("repos")
