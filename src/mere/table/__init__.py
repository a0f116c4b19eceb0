"""User-facing catalog, table and scan objects."""
