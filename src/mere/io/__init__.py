"""Storage access. Only this package touches files or object stores."""

from mere.io.storage import Storage

__all__ = ["Storage"]
