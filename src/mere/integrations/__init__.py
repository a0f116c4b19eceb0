"""Engine adapters built on the public core. The core never imports these modules.

Each adapter imports its engine lazily and raises :class:`mere.errors.NotInstalled` with the
``pip install`` hint when the engine is missing.
"""
