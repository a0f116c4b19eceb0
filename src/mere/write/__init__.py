"""Bucketing, sorting and writing files for a commit."""
