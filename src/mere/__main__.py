"""``python -m mere``: the command line, as ``python -m mere.cli`` and the ``mere`` command."""

from mere.cli import main

if __name__ == "__main__":
    main()
