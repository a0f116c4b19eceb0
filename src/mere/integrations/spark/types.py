"""Arrow and Spark types: the Spark schema of a mere table, record batches cast exactly to a declared
Spark schema, the columns Spark's own Parquet reader returns unchanged, and column references."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StructField,
    StructType,
)

from mere.errors import InvalidInput, SchemaMismatch
from mere.table.evolve import can_widen


def spark_type(t: pa.DataType) -> DataType:
    """The Spark type of an Arrow type (unsigned integers widen: uint64 values above 2**63 - 1 are refused
    when read, see :func:`conform_batch`); InvalidInput when Spark has none."""
    if pa.types.is_uint8(t):
        return ShortType()
    if pa.types.is_uint16(t):
        return IntegerType()
    if pa.types.is_uint32(t) or pa.types.is_uint64(t):
        return LongType()
    if pa.types.is_dictionary(t):
        return spark_type(t.value_type)
    if pa.types.is_decimal(t) and t.precision > 38:
        raise InvalidInput(f"Arrow type {t} has no Spark equivalent (Spark's decimals hold 38 digits)")
    # Nested types map their children the same way (a list of uint32 is an array of bigint).
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return ArrayType(spark_type(t.value_type), containsNull=t.value_field.nullable)
    if pa.types.is_map(t):
        return MapType(
            spark_type(t.key_type), spark_type(t.item_type), valueContainsNull=t.item_field.nullable
        )
    if pa.types.is_struct(t):
        return StructType([StructField(f.name, spark_type(f.type), nullable=f.nullable) for f in t])
    try:
        return from_arrow_type(t, prefer_timestamp_ntz=True)
    except (TypeError, NotImplementedError, ValueError) as e:
        raise InvalidInput(f"Arrow type {t} has no Spark equivalent") from e
    except Exception as e:  # PySparkTypeError and friends
        raise InvalidInput(f"Arrow type {t} has no Spark equivalent: {e}") from e


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a mere Arrow schema: tz-aware timestamps are TIMESTAMP, naive ones TIMESTAMP_NTZ."""
    fields = []
    for f in schema:
        try:
            fields.append(StructField(f.name, spark_type(f.type), nullable=f.nullable))
        except InvalidInput as e:
            raise InvalidInput(f"column {f.name!r}: {e}") from e
    return StructType(fields)


def arrow_target(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark checks record batches against (microsecond UTC timestamps)."""
    return to_arrow_schema(schema, timezone="UTC")


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` cast to ``target`` column by column; SchemaMismatch for a value that does not fit."""
    if batch.schema.equals(target):
        return batch
    arrays = []
    for f in target:
        a = batch.column(f.name)
        if a.type != f.type:
            if pa.types.is_timestamp(f.type) and pa.types.is_timestamp(a.type) and a.type.unit == "ns":
                # Nanoseconds floor to Spark's microseconds (a cast would round towards 1970).
                a = pc.floor_temporal(a, unit="microsecond")
            try:
                a = pc.cast(a, f.type, safe=not pa.types.is_timestamp(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatch(
                    f"column {f.name!r}: a value of {a.type} does not fit Spark's {f.type} "
                    f"({str(e).splitlines()[0]})"
                ) from e
        arrays.append(a)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def check_user_schema(name: str, table: pa.Schema, given: StructType) -> None:
    """A schema given with ``.schema(...)`` must describe the table's columns: a column the table may hold
    NULL in declared NOT NULL would let Spark optimise ``IS NULL`` away and crash on the NULLs; a type
    that cannot hold every stored value would fail mid-read."""
    have = spark_schema(table)
    for f in given.fields:
        if f.name not in have.fieldNames():
            continue  # the scan refused unknown columns already
        stored = have[f.name]
        if stored.nullable and not f.nullable:
            raise SchemaMismatch(
                f"{name}: column {f.name!r} may hold NULL in the table; the schema given declares it NOT NULL"
            )
        if f.dataType != stored.dataType:
            old, new = (arrow_target(StructType([x])).field(0).type for x in (stored, f))
            if not can_widen(old, new):
                raise SchemaMismatch(
                    f"{name}: column {f.name!r} is {stored.dataType.simpleString()} in the table; the schema "
                    f"given declares {f.dataType.simpleString()}, which cannot hold every value of it"
                )


_NATIVE_LEAVES = (
    pa.types.is_boolean,
    pa.types.is_signed_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_date32,
    pa.types.is_decimal128,
)


def native_type(t: pa.DataType) -> bool:
    """Whether Spark's Parquet reader returns this mere column exactly as the mere data source does:
    unsigned integers (read as wider or decimal types), nanosecond timestamps and float16 are not."""
    if pa.types.is_float16(t):
        return False
    if any(check(t) for check in _NATIVE_LEAVES):
        return True
    if pa.types.is_timestamp(t):
        return t.unit in ("ms", "us")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return native_type(t.value_type)
    if pa.types.is_struct(t):
        return all(native_type(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return native_type(t.key_type) and native_type(t.item_type)
    return False


def spark_column(name: str) -> Any:
    """A Spark column reference for any name (dots and backticks quoted)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")
