"""How partitions are named, in one place: a partition's values are stored as strings (Arrow's cast of
the value to string), the catalog names a partition by the JSON object of those strings
(:func:`partition_json`), and its files lie in Hive-style folders (:func:`partition_path`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.arrays import sorted_unique
from mere.errors import InvalidInput
from mere.spec import TableSpec

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def partition_json(values: dict[str, str | None]) -> str:
    """The catalog's spelling of a partition: a JSON object of its values as strings, keys sorted, no
    spaces. Files, splits and commits name their partition by it, so it is spelled one way only."""
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


# Longer folder names are cut and given a digest: file systems refuse names over 255 bytes. The catalog, not
# the path, holds a file's partition values.
MAX_FOLDER_NAME = 200


def partition_path(spec: TableSpec, values: Mapping[str, str | None]) -> str:
    """The folders of a partition's files, Hive-style (``day=2024-01-01/region=eu``): values
    percent-encoded, NULL as ``HIVE_NULL``, names too long for a file system cut and given a digest."""
    parts = []
    for c in spec.partition_by:
        name = f"{c}={HIVE_NULL if values[c] is None else quote(str(values[c]), safe='')}"
        if len(name.encode()) > MAX_FOLDER_NAME:
            digest = hashlib.sha256(name.encode()).hexdigest()[:16]
            name = f"{name.encode()[: MAX_FOLDER_NAME - 17].decode(errors='ignore')}~{digest}"
        parts.append(name)
    return "/".join(parts)


def parse_partition(text: str) -> dict[str, str | None]:
    """A partition's values from the catalog's JSON spelling (:func:`partition_json`)."""
    return dict(json.loads(text))


def partition_string(spec: TableSpec, column: str, value: Any) -> str | None:
    """One partition value, given as a Python value of (or castable to) its column's type, as the string
    it is stored as (None for NULL)."""
    if value is None:
        return None
    t = spec.schema.field(column).type
    boolean = pa.types.is_boolean(t)
    if (
        (isinstance(value, bool) and not boolean)
        or (boolean and not isinstance(value, bool | str))
        or (isinstance(value, int | float) and (pa.types.is_string(t) or pa.types.is_large_string(t)))
    ):
        # Nothing is guessed: True is not 1, and 5 is not the text '5' (text may name any type's value).
        raise InvalidInput(f"partition value {value!r} does not fit column {column!r} of type {t}")
    try:
        scalar = pa.scalar(value) if not isinstance(value, str) else pa.scalar(value, pa.string())
        return str(scalar.cast(t).cast(pa.string()).as_py())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise InvalidInput(f"partition value {value!r} does not fit column {column!r} of type {t}") from e


def typed_partition(spec: TableSpec, partition: Mapping[str, str | None]) -> dict[str, Any]:
    """Partition values (stored as strings) back as Python values of their column types."""
    out: dict[str, Any] = {}
    for c, v in partition.items():
        if v is None:
            out[c] = None
        else:
            out[c] = pa.scalar(v, pa.string()).cast(spec.schema.field(c).type).as_py()
    return out


def partition_value_strings(
    spec: TableSpec, table: pa.Table
) -> tuple[np.ndarray, list[dict[str, str | None]]]:
    """Per-row partition code and, per code, the partition values rendered as strings."""
    n = table.num_rows
    if not spec.partition_by:
        return np.zeros(n, dtype=np.int64), [{}]
    code = np.zeros(n, dtype=np.int64)
    dictionaries = []
    for c in spec.partition_by:
        enc = pc.dictionary_encode(table.column(c), null_encoding="encode").combine_chunks()
        dictionary = enc.dictionary
        code = code * len(dictionary) + enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        dictionaries.append(pc.cast(dictionary, pa.string()).to_pylist())
    uniq, dense = sorted_unique(code, return_inverse=True)
    values = []
    for u in uniq.tolist():  # one iteration per partition, not per row
        parts: dict[str, str | None] = {}
        rest = u
        for c, d in zip(reversed(spec.partition_by), reversed(dictionaries)):
            rest, i = divmod(rest, len(d))
            parts[c] = d[i]
        values.append({c: parts[c] for c in spec.partition_by})
        check_readable_partition(spec, values[-1])
    return dense.astype(np.int64), values


def check_readable_partition(spec: TableSpec, values: Mapping[str, str | None]) -> None:
    """Refuse partition values that would not read back (e.g. a date past year 9999: its string does not
    parse, and Python has no value for it): no write may leave a table that cannot be read."""
    try:
        typed_partition(spec, values)
    except (pa.ArrowInvalid, OverflowError, ValueError) as e:
        bad = {c: v for c, v in values.items() if v is not None}
        raise InvalidInput(
            f"partition values {bad} cannot be stored: they would not read back ({e})"
        ) from None
