"""Planning and merge-on-read."""
