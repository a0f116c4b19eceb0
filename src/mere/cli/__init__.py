"""The ``mere`` command line: inspect, read and maintain tables (``pip install 'mere[cli]'``).

``main`` imports click and rich only when it runs, so ``import mere`` never needs them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``mere`` command with ``argv`` (default: the process's arguments) and exit with its status."""
    try:
        from mere.cli.app import run
    except ImportError as e:  # click or rich missing
        sys.stderr.write(
            f"mere: error: the command line needs click and rich ({e}): pip install 'mere[cli]'\n"
        )
        sys.exit(1)
    sys.exit(run(list(sys.argv[1:] if argv is None else argv)))


__all__ = ["main"]
