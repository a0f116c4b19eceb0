"""The catalog backends a test runs on, with readable ids (the ``catalog_url`` fixture makes each one)."""

from __future__ import annotations

import pytest

BACKENDS = pytest.mark.parametrize(
    "catalog_url",
    [
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ],
    indirect=True,
)
