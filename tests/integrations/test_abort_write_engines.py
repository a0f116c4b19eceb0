"""Engine writers and ``Table.abort_write``: a Dask worker process killed (``os._exit``) in the middle of
staging, on a real local distributed cluster.

A worker plugin watches the table's folder from a thread of the worker process and kills the process as
soon as a file named for a write id appears there, so the kill lands while the task stages (nothing of
mere's is replaced). Dask either retries the task on the restarted worker (the write then commits) or,
with ``allowed-failures`` 0, gives up (KilledWorker) and the write fails.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere

dd = pytest.importorskip("dask.dataframe")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from mere.integrations.dask import write  # noqa: E402

pytestmark = pytest.mark.slow  # a local Dask cluster of worker processes

STAGED = re.compile(r"[a-z]+-[A-Za-z0-9_]+-[0-9a-f]{32}\.parquet")
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.int64()), ("v", pa.string())])


def _staged_names(folder: str) -> set[str]:
    return {os.path.join(d, f) for d, _dirs, names in os.walk(folder) for f in names if STAGED.fullmatch(f)}


class KillWhileStaging(distributed.WorkerPlugin):
    """Kill this worker's process when a new file named for a write id appears below ``folder``: once (a
    marker file remembers it) or every time."""

    def __init__(self, folder: str, marker: str, every_time: bool) -> None:
        self.folder, self.marker, self.every_time = folder, marker, every_time

    def setup(self, worker: Any) -> None:
        known = _staged_names(self.folder)

        def watch() -> None:
            while True:
                if _staged_names(self.folder) - known and (
                    self.every_time or not os.path.exists(self.marker)
                ):
                    Path(self.marker).touch()
                    os._exit(1)
                time.sleep(0.001)

        threading.Thread(target=watch, daemon=True).start()


@pytest.fixture
def cluster_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    allowed = request.param
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": allowed}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit="2GiB"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def _table(tmp_path: Path) -> mere.Table:
    t = mere.connect(str(tmp_path / "wh")).create_table("e.t", SCHEMA, primary_key="id", partition_by="day")
    t.upsert(pa.table({"id": [-1], "day": [0], "v": ["kept"]}, SCHEMA))
    return t


def _frame(n: int) -> Any:
    import pandas as pd

    # 150 partitions in one Dask partition: the task writes 150 files, the kill lands after the first
    return pd.DataFrame({"id": range(n), "day": [i % 150 for i in range(n)], "v": ["x"] * n})


def _unreferenced_staged(t: mere.Table) -> set[str]:
    referenced = t.context.store.all_file_paths(t.context.table_id)
    return {
        p
        for p, _s, _m in t.storage.list_files(t.location)
        if STAGED.fullmatch(Path(p).name) and p not in referenced
    }


@pytest.mark.parametrize("cluster_client", [0], indirect=True)
def test_a_worker_killed_mid_stage_of_a_failed_write_leaves_no_files(
    cluster_client: Any, tmp_path: Path
) -> None:
    """Dask gives up on the task (KilledWorker); the client deletes the killed attempt's files by the id."""
    t = _table(tmp_path)
    marker = tmp_path / "killed"
    cluster_client.register_plugin(KillWhileStaging(t.storage.full_path(t.location), str(marker), True))
    rows, version = t.to_arrow(), t.version
    with pytest.raises(distributed.KilledWorker):
        write(dd.from_pandas(_frame(3000), npartitions=1), t)
    assert marker.exists()
    assert t.refresh().version == version and t.to_arrow().equals(rows)
    assert _unreferenced_staged(t) == set()


@pytest.mark.parametrize("cluster_client", [3], indirect=True)
def test_a_worker_killed_mid_stage_of_a_write_that_commits_leaves_files_for_cleanup(
    cluster_client: Any, tmp_path: Path
) -> None:
    """As dask.write documents: a write that commits after Dask retried a killed worker's task does not
    look for the killed attempt's files (a listing per write); they are never read, and cleanup() takes them."""
    t = _table(tmp_path)
    marker = tmp_path / "killed"
    cluster_client.register_plugin(KillWhileStaging(t.storage.full_path(t.location), str(marker), False))
    version = t.version
    result = write(dd.from_pandas(_frame(3000), npartitions=1), t)
    assert marker.exists()  # the first attempt was killed while it staged
    assert result.version == version + 1 and t.refresh().to_arrow().num_rows == 3001
    left = _unreferenced_staged(t)
    rows = t.to_arrow()
    assert left <= set(t.cleanup(dt.timedelta(0), dry_run=False))
    assert _unreferenced_staged(t) == set() and t.to_arrow().equals(rows)
