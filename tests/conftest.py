"""Shared fixtures: a real throwaway PostgreSQL for the session, and catalogs over SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import mere
from mere.read import reader
from services import PostgresServer

settings.register_profile(
    "ci", max_examples=30, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev",
    max_examples=10,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(  # make test-fast: the developer loop
    "fast",
    max_examples=5,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Every Spark JVM the tests start (the session fixture's, and those of the demo and the stream processes
# they launch, which inherit this) compiles with C1 only: a test's JVM lives a minute or two, not long enough
# for C2 to pay back, and on two cores it halved the JVM's CPU time over test_spark_trial52.py (33 s to
# 16 s). spark-submit adds SPARK_SUBMIT_OPTS to the driver's command line; a value of the caller's wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

_db_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty catalog database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    return server.create_database(f"mere_{os.getpid()}_{next(_db_counter)}")


@pytest.fixture
def cat(catalog_url: str, tmp_path: Path) -> mere.Catalog:
    """A catalog over each backend with a local warehouse."""
    return mere.connect(str(tmp_path / "warehouse"), catalog=catalog_url)


@pytest.fixture
def local_cat(tmp_path: Path) -> mere.Catalog:
    """The embedded default: SQLite catalog inside a local warehouse."""
    return mere.connect(str(tmp_path / "warehouse"))


TESTS = Path(__file__).resolve().parent
# Marks by where a test lives: the suites that start a real engine or server. The developer loop
# (``make test-fast``) deselects them with one ``-m`` expression; ``make test`` runs everything.
MARKS_BY_PATH = {
    "integrations/spark": "spark",  # one local[2] SparkSession
    "io/s3": "s3",  # a real SeaweedFS
    "integrations/test_dask.py": "slow",  # a local Dask cluster
    "integrations/test_ray.py": "slow",  # a local Ray cluster
    "integrations/test_torch.py": "slow",  # PyTorch's DataLoader worker processes
    "integrations/test_engine_docs.py": "slow",  # every engine the docs show
    "test_services.py": "slow",  # PostgreSQL, SeaweedFS and the latency proxy themselves
    "test_soak.py": "slow",  # bench/bench_soak.py's short profile: PostgreSQL, SeaweedFS, many processes
}


def path_marks(path: Path) -> list[str]:
    """The marks :data:`MARKS_BY_PATH` gives a test file."""
    try:
        rel = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return []
    return [mark for prefix, mark in MARKS_BY_PATH.items() if rel == prefix or rel.startswith(prefix + "/")]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks by path (:data:`MARKS_BY_PATH`); under the ``fast`` profile, tests that fix their own example
    counts get the profile's smaller ones."""
    for item in items:
        for mark in path_marks(Path(str(item.path))):
            item.add_marker(getattr(pytest.mark, mark))
    if os.environ.get("HYPOTHESIS_PROFILE") != "fast":
        return
    fast = settings.get_profile("fast")
    for item in items:
        target = getattr(item, "obj", None)
        owner = getattr(item, "cls", None)
        for holder, attr in ((target, "_hypothesis_internal_use_settings"), (owner, "settings")):
            own = getattr(holder, attr, None) if holder is not None else None
            if isinstance(own, settings) and own is not fast:
                capped = settings(
                    own,
                    max_examples=min(own.max_examples, fast.max_examples),
                    stateful_step_count=min(own.stateful_step_count, fast.stateful_step_count),
                )
                setattr(holder, attr, capped)


@pytest.fixture(scope="module")
def strings_read_as_dictionaries() -> Iterator[None]:
    """Splits read dictionary-encoded strings as dictionaries whatever their size (by default only splits
    holding a file of ``DICTIONARY_MIN_ROWS`` rows do): for suites of small tables that must cover that
    path. Module-scoped, so Hypothesis tests may use it."""
    saved = reader.DICTIONARY_MIN_ROWS
    reader.DICTIONARY_MIN_ROWS = 0
    yield
    reader.DICTIONARY_MIN_ROWS = saved
