"""The Alembic history of the hub's schema: one for SQLite and PostgreSQL (run by storage/schema.py)."""
