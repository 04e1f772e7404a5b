"""Dataset schemas and atomic, idempotent dataset I/O."""
