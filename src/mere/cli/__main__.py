"""``python -m mere.cli``."""

from mere.cli import main

if __name__ == "__main__":
    main()
