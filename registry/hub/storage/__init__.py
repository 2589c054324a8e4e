"""Storage of the hub: SQL metadata (SQLAlchemy Core) and content-addressed blobs on disk (registry/hub/README.md)."""
