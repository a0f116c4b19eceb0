"""The merge kernel's pick of a sequence group's version (:func:`mere.kernels.reduce_versions`): the
highest group sequence, on ties the latest arrival, against a plain model; integer-like sequences (signed,
unsigned, dates, timestamps) take a path without sorting, floats the sorting one."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from mere.kernels import group_starts, reduce_versions
from mere.spec import OP_MERGE, MergeOperator

TYPES = [pa.int64(), pa.int16(), pa.uint64(), pa.timestamp("us"), pa.date32(), pa.float64()]


def typed(values: list[int | None], kind: pa.DataType) -> pa.Array:
    ints = pa.array(values, pa.int32() if kind == pa.date32() else pa.int64())
    return ints.cast(kind)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    kind=st.sampled_from(TYPES),
    n=st.integers(0, 40),
    arrival_given=st.booleans(),
)
def test_a_group_goes_to_its_highest_sequence_then_latest_arrival(
    data: st.DataObject, kind: pa.DataType, n: int, arrival_given: bool
) -> None:
    keys = sorted(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
    rows = st.integers(0, 3)
    seq = data.draw(st.lists(rows, min_size=n, max_size=n))  # row sequence: already in order by key
    gseq = data.draw(st.lists(st.one_of(st.none(), rows), min_size=n, max_size=n))
    # (as uint64 too: Arrow's sort orders are, NumPy's are int64)
    unsigned = data.draw(st.booleans())
    arrival = np.array(data.draw(st.permutations(range(n))), np.uint64 if unsigned else np.int64)
    arrival = arrival if arrival_given else None
    versions = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "lsn": typed(sorted(seq), kind),
            "g": typed(gseq, kind),
            "v": pa.array(range(n), pa.int64()),
        }
    )
    starts = group_starts([versions.column("k")], n)
    out, _ = reduce_versions(
        versions,
        np.full(n, OP_MERGE, np.int8),
        starts,
        ["k"],
        {"v": MergeOperator("last")},
        groups={"g": ["v"]},
        sequence="lsn",
        puts_reset=False,
        arrival=arrival,
    )
    want = {}
    for i, (k, g) in enumerate(zip(keys, gseq)):
        if g is None:
            continue
        rank = (g, arrival[i] if arrival is not None else i)
        if k not in want or rank > want[k][0]:
            want[k] = (rank, i)
    got = dict(zip(out.column("k").to_pylist(), out.column("v").to_pylist()))
    assert got == {k: want[k][1] if k in want else None for k in dict.fromkeys(keys)}
