"""Footer.group_bytes: each leaf's chunk sizes are parsed on demand, and any subset (in any order, asked in
any sequence) sums to what pyarrow's metadata says for those chunks."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mere.io.footer import Footer


def _expected(md: pq.FileMetaData, leaves: list[int]) -> tuple[list[int], list[int]]:
    groups = [md.row_group(i) for i in range(md.num_row_groups)]
    return (
        [sum(g.column(j).total_uncompressed_size for j in leaves) for g in groups],
        [sum(g.column(j).total_compressed_size for j in leaves) for g in groups],
    )


def test_group_bytes_of_any_leaves_equal_the_metadata(tmp_path: Path) -> None:
    n = 5000
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([f"v{i % 97}" * (i % 5) for i in range(n)]),
            "nested": pa.array([{"a": i, "b": [i, None]} for i in range(n)]),
            "f": pa.array([i / 3 for i in range(n)]),
        }
    )
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=700, compression="zstd")
    md = pq.ParquetFile(path).metadata
    assert md.num_row_groups > 1 and md.num_columns == 5  # the struct holds two leaves
    footer = Footer(md, None)
    for leaves in ([1], [3, 0], [4], [0, 1, 2, 3, 4], [], [2, 2]):
        got = footer.group_bytes(leaves)
        assert (got[0].tolist(), got[1].tolist()) == _expected(md, leaves), leaves
    every = footer.group_bytes(None)
    assert (every[0].tolist(), every[1].tolist()) == _expected(md, list(range(5)))
    assert Footer(md, None).group_bytes(None)[1].tolist() == every[1].tolist()  # asked first, fresh
