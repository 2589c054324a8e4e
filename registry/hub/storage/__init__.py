"""Storage of the hub: SQL metadata (SQLAlchemy Core) and content-addressed blobs on disk (DESIGN.md §5)."""
