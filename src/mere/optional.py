"""Optional engines: imported on first use, with the pip command in the error when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from mere.errors import NotInstalled


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`NotInstalled` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise NotInstalled(
            f"{purpose} needs {module.split('.')[0]}: pip install 'mere[{extra}]' ({e})"
        ) from e
