"""Exactly-once writes from ``foreachBatch``: an idempotency key per micro-batch.

Spark runs a micro-batch again after a failure (a killed driver, a failed batch, a restart from the
checkpoint) with the same batch id, and keeps the query id in the checkpoint: the pair names the batch
across restarts. A ``foreachBatch`` function that gives each of its mere writes the key
:func:`batch_key` makes of them commits each write once: the replay finds the key's commit and returns
its result, writing nothing::

    from mere.integrations.spark import batch_key, merge

    def upsert_batch(df, batch_id):
        (merge(df.sparkSession, df, "sales.orders", warehouse=wh)
            .when_matched_update(set={"qty": "t.qty + s.qty"})
            .when_not_matched_insert_all()
            .execute(idempotency_key=batch_key(df, batch_id)))

    stream.writeStream.foreachBatch(upsert_batch).option("checkpointLocation", chk).start()
"""

from __future__ import annotations

from typing import Any

from mere.errors import InvalidInput
from mere.integrations.spark.sink import STREAM_QUERY_ID_PROPERTY

KEY_PREFIX = "spark-batch"
MAX_KEY_LENGTH = 255  # the catalog's idempotency key column


def query_id(source: Any) -> str:
    """The id of the streaming query ``source`` belongs to: the id Spark keeps in the checkpoint, the same
    across restarts (not the run id, which changes with each start).

    Args:
        source: the DataFrame a ``foreachBatch`` function receives (PySpark classic: the query id is the
            ``sql.streaming.queryId`` local property of the thread that runs the batch), a
            ``StreamingQuery`` (its ``id``), or the id as a string.

    Returns:
        The query id.

    Raises:
        InvalidInput: a DataFrame outside a ``foreachBatch`` call, or one of Spark Connect (whose
            ``foreachBatch`` runs on the server, where the client's query id is not reachable: pass a
            string that names the query stably, such as its checkpoint location), or anything else.
    """
    if isinstance(source, str):
        if not source:
            raise InvalidInput("query_id: the query id must be a non-empty string")
        return source
    from pyspark.sql import DataFrame

    if isinstance(source, DataFrame):
        try:
            context = source.sparkSession.sparkContext
        except Exception as e:  # Spark Connect has no SparkContext
            raise InvalidInput(
                "query_id: this DataFrame's session has no SparkContext (Spark Connect), so the query id "
                "is not reachable from foreachBatch; pass a string that names the query stably across "
                f"restarts instead, such as its checkpoint location ({type(e).__name__})"
            ) from None
        found = context.getLocalProperty(STREAM_QUERY_ID_PROPERTY)
        if not found:
            raise InvalidInput(
                "query_id: this DataFrame is not a micro-batch of a running streaming query (call it on "
                "the DataFrame foreachBatch passes, in the batch function's own thread), or pass the "
                "query id"
            )
        return str(found)
    identity = getattr(source, "id", None)
    if isinstance(identity, str) and identity and hasattr(source, "runId"):  # a StreamingQuery
        return identity
    raise InvalidInput(
        "query_id takes the DataFrame foreachBatch passes, a StreamingQuery or a query id string, got "
        f"{type(source).__name__}"
    )


def batch_key(source: Any, batch_id: int, what: str = "write") -> str:
    """The idempotency key of one write of a ``foreachBatch`` micro-batch: the same for every run of that
    batch (Spark replays a batch with its id after a failure, and the query id survives restarts from the
    checkpoint), different for every other batch.

    Give it to the write (``Merge.execute``, ``SparkMerge.execute``, ``Table.upsert``, ``update``,
    ``delete``, ``overwrite`` or the batch writer's ``idempotency_key`` option): a replayed batch then
    returns the first run's result and changes nothing. Keys are per table; a batch that writes one table
    twice gives each write its own ``what``.

    Args:
        source: the DataFrame ``foreachBatch`` passes (PySpark classic), a ``StreamingQuery`` or the query
            id as a string (see :func:`query_id`).
        batch_id: the batch id ``foreachBatch`` passes.
        what: names the write within the batch (default ``"write"``).

    Returns:
        ``spark-batch:<query id>:<batch id>:<what>``.

    Raises:
        InvalidInput: a negative or non-integer batch id, an empty ``what``, a key longer than the
            catalog keeps (255 characters), or a ``source`` :func:`query_id` cannot read.
    """
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise InvalidInput(f"batch_key: batch_id must be a non-negative int, got {batch_id!r}")
    if not isinstance(what, str) or not what:
        raise InvalidInput(f"batch_key: what must be a non-empty string, got {what!r}")
    key = f"{KEY_PREFIX}:{query_id(source)}:{batch_id}:{what}"
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(
            f"batch_key: the key would be {len(key)} characters, more than the catalog keeps "
            f"({MAX_KEY_LENGTH}); use a shorter query id or what"
        )
    return key
