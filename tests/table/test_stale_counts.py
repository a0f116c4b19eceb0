"""Stale counts of upserts against the stored versions (``sequence_by``), through the lookup's fast path:
one integer key and sequence, per split an index of each key's highest stored sequence kept between
commits (dense by key offset where the keys fill their range, sorted otherwise, turning from one to the
other), per file the key and sequence columns the writer kept.

The property: commits of blind upserts and CDC deletes with random sequences, keys dense, sparse, or
dense then sparse, with compactions and dropped in-memory state (a fresh process) in between, count as
stale exactly the rows a dict model of each key's highest stored sequence says.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.table import stored_keys

_tables = itertools.count()

KEY_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "int16": pa.int16()}


def _keys(kind: str, layout: str, raw: list[int], step: int) -> list[int]:
    """Keys of a layout from small draws: dense ids, sparse (spread far apart), or dense that turn
    sparse at a later commit."""
    if layout == "dense" or (layout == "dense-then-sparse" and step < 2):
        return raw
    if kind == "int32":
        return [k * 40_000_000 - 2_000_000_000 for k in raw]
    if kind == "int16":
        return [k * 1_500 - 30_000 for k in raw]  # spread over the type's whole range
    return [k * 2 * 10**17 - 4 * 10**18 for k in raw]  # from near the lowest int64 to near the highest


commit = st.tuples(
    st.dictionaries(
        st.integers(0, 40), st.tuples(st.integers(0, 30), st.booleans()), min_size=1, max_size=15
    ),
    st.sampled_from(["none", "compact", "forget"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(KEY_TYPES)),
    seq_type=st.sampled_from(["int64", "int32", "uint16"]),
    layout=st.sampled_from(["dense", "sparse", "dense-then-sparse"]),
    buckets=st.integers(1, 3),
    commits=st.lists(commit, min_size=1, max_size=7),
)
def test_stale_counts_equal_the_model(
    tmp_path: Path,
    kind: str,
    seq_type: str,
    layout: str,
    buckets: int,
    commits: list[tuple[dict[int, tuple[int, bool]], str]],
) -> None:
    cat = mere.connect(str(tmp_path / "cat"))
    schema = pa.schema(
        [
            pa.field("k", KEY_TYPES[kind], nullable=False),
            pa.field("seq", pa.type_for_alias(seq_type)),
            pa.field("v", pa.string()),
            pa.field("op", pa.string()),
        ]
    )
    t = cat.create_table(
        f"s.t{next(_tables)}",
        schema,
        primary_key="k",
        buckets=buckets,
        sequence_by="seq",
        cdc_column="op",
        properties={"compaction.auto": "off"},
    )
    highest: dict[int, int] = {}  # each key's highest stored sequence, deletes too
    for step, (events, then) in enumerate(commits):
        keys = _keys(kind, layout, list(events), step)
        seqs = [s for s, _ in events.values()]
        ops = ["d" if d else "u" for _, d in events.values()]
        batch = pa.table(
            {
                "k": pa.array(keys, KEY_TYPES[kind]),
                "seq": pa.array(seqs, pa.type_for_alias(seq_type)),
                "v": [f"v{s}" for s in seqs],
                "op": ops,
            },
            schema=schema,
        )
        want = sum(1 for k, s in zip(keys, seqs) if k in highest and s < highest[k])
        assert t.upsert(batch).stale_rows == want
        for k, s in zip(keys, seqs):
            highest[k] = max(highest.get(k, s), s)
        if then == "compact":
            t.compact()
        elif then == "forget":  # as a new process: the lookup reads the files
            stored_keys.forget()


def test_the_index_follows_a_stream_and_turns_sorted_for_spread_keys(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path / "cat"))
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("seq", pa.int64())])
    t = cat.create_table(
        "s.t", schema, primary_key="k", buckets=1, sequence_by="seq", properties={"compaction.auto": "off"}
    )
    rng = np.random.default_rng(1)
    highest: dict[int, int] = {}
    for step in range(12):  # a stream: new ids each commit, some updates, some late
        keys = np.unique(np.r_[np.arange(step * 100, step * 100 + 100), rng.integers(0, step * 100 + 1, 30)])
        if step == 8:
            keys = np.r_[keys, [10**17]]  # one key far away: the dense index turns sorted
        seqs = rng.integers(0, 2_000, len(keys)) + step * 1_000
        want = sum(1 for k, s in zip(keys.tolist(), seqs.tolist()) if k in highest and s < highest[k])
        assert t.upsert(pa.table({"k": keys, "seq": seqs})).stale_rows == want
        for k, s in zip(keys.tolist(), seqs.tolist()):
            highest[k] = max(highest.get(k, s), s)
    mine = [ix for name, ix in stored_keys._index.items() if str(tmp_path) in name[0]]
    assert mine and not any(ix.dense for ix in mine)
