"""A streamed write holds a bounded amount: it writes each run of ``write.chunk-bytes`` before reading on.

The memory bound itself is measured in bench/bench_surface.py (peak RSS of a 5M-row stream); here the
structure that makes it bounded is checked: runs are written while the stream is still being read, and
the runs of one write still commit as one version that merges like one batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

import mere


def test_runs_are_written_while_the_stream_is_read(local_cat: mere.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("op", pa.string())])
    t = local_cat.create_table(
        "t.stream",
        schema,
        primary_key="id",
        cdc_column="op",
        buckets=2,
        properties={"write.chunk-bytes": str(64 << 10)},
    )
    root = os.path.join(t.storage.root, t.location)
    seen_files: list[int] = []

    def files_on_disk() -> int:
        return sum(len(names) for _, _, names in os.walk(root)) if os.path.isdir(root) else 0

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(40):  # ~40 KiB each: a run every other batch
            seen_files.append(files_on_disk())
            ids = list(range(i * 1000 % 7000, i * 1000 % 7000 + 1000))  # keys repeat across runs
            ops = ["D" if (i == 39 and k % 2) else "U" for k in ids]
            yield pa.record_batch(
                [pa.array(ids, pa.int64()), pa.array([f"{i}-{k}" * 3 for k in ids]), pa.array(ops)],
                schema=schema,
            )

    record = t.upsert(pa.RecordBatchReader.from_batches(schema, batches()))
    assert seen_files[0] == 0 and seen_files[-1] > 0  # files appeared before the stream ended
    assert seen_files[-1] >= 2 * 15  # about 19 runs x 2 buckets by the last batch
    assert record.version == 1 and record.files_added > 2  # one commit of many runs
    want: dict[int, str] = {}
    for i in range(40):
        for k in range(i * 1000 % 7000, i * 1000 % 7000 + 1000):
            if i == 39 and k % 2:
                want.pop(k, None)
            else:
                want[k] = f"{i}-{k}" * 3
    got = t.scan().to_arrow()
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) == want
    t.compact()
    assert t.scan().count() == len(want)


def test_in_memory_tables_are_written_as_one_run(local_cat: mere.Catalog) -> None:
    """A table already in memory is not cut by the streamed-run size: one file per split."""
    t = local_cat.create_table(
        "t.table",
        pa.schema([("id", pa.int64()), ("v", pa.string())]),
        primary_key="id",
        buckets=2,
        properties={"write.chunk-bytes": "1024"},
    )
    record = t.upsert(pa.table({"id": list(range(20_000)), "v": ["x" * 20] * 20_000}))
    assert record.files_added == 2
