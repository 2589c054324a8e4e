"""Alembic's entry point: runs on the connection storage/schema.py hands over (inside its transaction)."""

from alembic import context

from registry.hub.storage.db import metadata

conn = context.config.attributes["connection"]
context.configure(
    connection=conn,
    target_metadata=metadata,
    render_as_batch=conn.dialect.name == "sqlite",  # SQLite alters a table by copying it
)
with context.begin_transaction():
    context.run_migrations()
