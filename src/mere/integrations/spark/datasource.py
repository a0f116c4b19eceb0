"""The ``mere`` data source Spark instantiates for every read, write and stream of the format."""

from __future__ import annotations

from typing import Any

import pyspark
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from mere.errors import InvalidInput
from mere.integrations.spark.compat import SCAN_SCOPED_READS
from mere.integrations.spark.ddl import bind, is_table_creation, ref_from_schema, unnamed_write
from mere.integrations.spark.options import (
    FORMAT_NAME,
    TableRef,
    bool_option,
    check_options,
    column_list_option,
    lower_options,
    read_point,
)
from mere.integrations.spark.sink import MereStreamWriter, MereWriter, WriteJob
from mere.integrations.spark.source import MerePushdownReader, MereReader
from mere.integrations.spark.stream import MereStreamReader, stream_schema, wants_change_feed
from mere.integrations.spark.types import spark_schema


class MereDataSource(DataSource):
    """``spark.read.format("mere")`` / ``df.write.format("mere")`` / ``df.writeStream.format("mere")`` /
    ``spark.readStream.format("mere").option("readChangeFeed", "true")``."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        # A Spark catalog table's reads and writes name no table: its columns do (ddl.ref_from_schema).
        opts = lower_options(options)
        named = bool(opts.get("table") or opts.get("path")) and not is_table_creation(options)
        self._ref = TableRef.from_options(options) if named else None

    @property
    def ref(self) -> TableRef:
        """The table the options name."""
        if self._ref is None:
            return TableRef.from_options(self.options)  # raises: "give the table name"
        return self._ref

    def _bound(self, schema: StructType, what: str) -> TableRef:
        """The table the options name, or else the one the Spark catalog table's columns name."""
        return self._ref if self._ref is not None else ref_from_schema(schema, what)

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        if is_table_creation(self.options):  # CREATE TABLE ... USING mere without a column list
            return bind(self.options)
        check_options(self.options)
        if wants_change_feed(self.options):  # Spark gives no other sign of a stream read
            return stream_schema(self.ref, self.options)
        table = self.ref.open()
        opts = lower_options(self.options)
        version, as_of, tag = read_point(opts)
        # The columns of the version read: a time-travel read sees that version's schema.
        return spark_schema(
            table.scan(
                columns=column_list_option("columns", opts.get("columns")),
                version=version,
                as_of=as_of,
                tag=tag,
            ).schema
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        self._ref = self._bound(schema, "this read")
        opts = lower_options(self.options)
        pushdown = bool_option("pushdown", opts.get("pushdown"))
        if wants_change_feed(self.options):
            raise InvalidInput(
                f"{self.ref.name}: 'readChangeFeed' reads are streams (spark.readStream); for a batch of "
                "changes use Table.changes(start_version, end_version)"
            )
        streaming = [o for o in ("startingversion", "maxversionspertrigger", "consumer") if o in opts]
        if streaming:
            raise InvalidInput(
                f"{self.ref.name}: option {streaming[0]!r} is for stream reads (spark.readStream); a batch "
                "read takes 'version', 'as_of' or 'tag'"
            )
        if pushdown:
            if not SCAN_SCOPED_READS:
                raise InvalidInput(
                    f"{self.ref.name}: .option('pushdown', 'true') is refused on Spark {pyspark.__version__}: it reuses "
                    "one query's pushed filters for later queries on the same DataFrame or view, which would return "
                    "wrong rows. Prune with .option('filter', \"<key/partition filter>\") instead."
                )
            return MerePushdownReader(self.ref, self.options, schema)
        return MereReader(self.ref, self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> MereWriter:
        # A write never binds by column metadata: Spark passes the query's own when its columns already
        # match the table's (a SELECT from another mere table would name that table). The hook names it.
        ref = self._ref if self._ref is not None else unnamed_write(schema, "this write")
        return MereWriter(WriteJob.plan(ref, self.options, schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> MereStreamWriter:
        ref = self._ref if self._ref is not None else unnamed_write(schema, "this stream write")
        return MereStreamWriter(WriteJob.plan(ref, self.options, schema, overwrite, streaming=True))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("mere").option("readChangeFeed", "true")``: the table's change feed,
        micro-batch by micro-batch (see :mod:`mere.integrations.spark.stream`)."""
        return MereStreamReader(self.ref, self.options, schema)
