"""Alembic revisions, oldest first: 0001 = the round-1 schema that `create_all` made."""
