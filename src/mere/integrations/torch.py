"""PyTorch: a mere table's merged rows as a ``torch.utils.data.IterableDataset``.

::

    from torch.utils.data import DataLoader
    from mere.integrations.torch import TableDataset

    ds = TableDataset(table, columns=["id", "x", "y"], batch_size=4096, shuffle=True, seed=7)
    loader = DataLoader(ds, batch_size=None, num_workers=4, pin_memory=True, persistent_workers=True)
    for epoch in range(10):
        ds.set_epoch(epoch)            # before iterating: reaches the workers, persistent ones too
        for batch in loader:           # {"id": tensor, "x": tensor, "y": tensor}
            ...

The dataset batches itself: give the ``DataLoader`` ``batch_size=None`` (its default ``batch_size=1``
would stack single batches into an extra dimension).

Planning happens once, at construction, on the process that builds the dataset: the scan's version is
pinned, and its splits (one per partition x bucket) are cut into key-range windows of at most
``max_task_bytes`` (:meth:`mere.table.scan.ScanTask.divide`). These *units* are self-contained, picklable
scan tasks: workers read them with storage access only, never the catalog. In ``__iter__`` each DataLoader
worker of each rank takes its shard (``rank * num_workers + worker_id`` of ``world_size * num_workers``)
and reads its whole units, largest first dealt to the lightest shard, so over all ranks and workers every
live row comes out exactly once per epoch. A shard with no unit yields nothing: for more shards than
splits, lower ``max_task_bytes``. In distributed training with several processes each rank builds its
own dataset: pass the same ``version`` to every rank (or build before anyone commits), else ranks that
plan different versions would not partition the same rows.

Output ``"torch"`` yields ``{column: torch.Tensor}`` of exactly ``batch_size`` rows (the last batch of a
shard may be shorter), plain CPU tensors that ``pin_memory=True`` pins. Integers (signed, and ``uint8``) and
floats keep their type; ``bool`` is ``torch.bool``; timestamps, durations and ``date64`` are ``int64`` in
their unit, ``date32`` is ``int32`` days, ``time32``/``time64`` are ``int32``/``int64``. Strings, decimals,
lists, wider unsigned integers and other types are refused when the dataset is built (use
``output="arrow"`` or leave the column out). Nullability is known only when rows are read: a null in a
tensor column raises :class:`~mere.errors.InvalidInput` naming it (filter it out with
``filter="col is not null"`` or fill it in the table). Output ``"arrow"`` yields ``pyarrow.RecordBatch``.

Memory: in the process that iterates (``num_workers=0``) numeric tensors are zero-copy views of the merged
Arrow data (DLPack: clone before writing in place); ``bool`` is one copy (Arrow packs bits), as is a batch
cut across two merged batches. In a DataLoader worker a batch's columns are written once into one block of
shared memory, which travels to the main process as one file descriptor and arrives as a plain dict of
views of it (torch alone would copy each tensor into shared memory and send one descriptor per column).

With ``shuffle=True`` the units are dealt and read in an order drawn from ``seed`` and the epoch, and rows
are permuted within each batch: the same ``seed`` and epoch give the same order, another epoch another.
The epoch lives in shared memory created with the dataset, so :meth:`TableDataset.set_epoch` in the main
process reaches DataLoader workers, persistent ones included; call it before iterating the loader.
"""

from __future__ import annotations

import heapq
import math
import multiprocessing
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing import context as _mp_context
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from mere.errors import InvalidInput, NotInstalled
from mere.table.catalog_transaction import CatalogSnapshot, pinned_version
from mere.table.scan import OPEN_COST_BYTES, TASK_BYTES, ScanTask, read_tasks

if TYPE_CHECKING:
    from mere.table.table import Table

_INSTALL_HINT = "pip install 'mere[torch]'"

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as _e:  # pragma: no cover - exercised only without torch
    raise NotInstalled(f"mere's PyTorch integration needs torch >= 2.2: {_INSTALL_HINT}") from _e

__all__ = ["OUTPUTS", "TableDataset"]

OUTPUTS = ("torch", "arrow")
PREFETCH_UNITS = 2  # units a shard merges ahead of the batch it hands out (threads within the worker)

Batch: TypeAlias = dict[str, torch.Tensor] | pa.RecordBatch

_INTEGERS: dict[pa.DataType, torch.dtype] = {
    pa.int8(): torch.int8,
    pa.int16(): torch.int16,
    pa.int32(): torch.int32,
    pa.int64(): torch.int64,
    pa.uint8(): torch.uint8,
    pa.float16(): torch.float16,
    pa.float32(): torch.float32,
    pa.float64(): torch.float64,
}


def tensor_type(kind: pa.DataType) -> tuple[torch.dtype, pa.DataType | None] | None:
    """The tensor dtype of an Arrow type and the fixed-width Arrow type its values are viewed as on the way.

    The view type is ``None`` where the values are taken as they are; the whole is ``None`` for a type torch
    cannot hold.
    """
    if kind in _INTEGERS:
        return _INTEGERS[kind], None
    if pa.types.is_boolean(kind):
        return torch.bool, None
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind) or pa.types.is_date64(kind):
        return torch.int64, pa.int64()
    if pa.types.is_time64(kind):
        return torch.int64, pa.int64()
    if pa.types.is_date32(kind) or pa.types.is_time32(kind):
        return torch.int32, pa.int32()
    return None


def _check_nulls(name: str, array: pa.Array) -> None:
    if array.null_count:
        raise InvalidInput(
            f"column {name!r} holds {array.null_count} null(s), which a tensor cannot hold: filter them out "
            f"(filter=\"{name} is not null\"), fill them in the table, or read with output='arrow'"
        )


def _tensor(name: str, array: pa.Array, dtype: torch.dtype, view: pa.DataType | None) -> torch.Tensor:
    """One Arrow array as a tensor: zero-copy (DLPack) but for booleans, which Arrow packs into bits."""
    _check_nulls(name, array)
    if len(array) == 0:
        return torch.empty(0, dtype=dtype)
    if dtype == torch.bool:  # one copy, into a fresh (writable) array
        return torch.from_numpy(np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.bool_))
    if view is not None:
        array = array.view(view)
    return torch.from_dlpack(array)  # read-only Arrow memory is fine here (no numpy warning)


class SharedBatch(dict[str, torch.Tensor]):
    """A batch whose tensors are views of one shared-memory block, as a DataLoader worker builds it.

    Pickled to the main process it travels as that one block (one file descriptor, no copy) and arrives
    as a plain ``dict`` of views of it; torch would otherwise share, send and map every tensor apart.
    """

    def __copy__(self) -> SharedBatch:
        # DataLoader's default_convert copies a mapping before it converts its values: keep the class.
        return SharedBatch(self)

    def __reduce__(self) -> tuple[Any, ...]:
        tensors = list(self.values())
        if not tensors or any(
            t.untyped_storage().data_ptr() != tensors[0].untyped_storage().data_ptr() or not t.is_contiguous()
            for t in tensors
        ):  # changed after it was built (a collate_fn): pickle it as a plain dict
            return (dict, (dict(self),))
        block = torch.empty(0, dtype=torch.uint8).set_(tensors[0].untyped_storage())
        layout = [
            (name, t.dtype, t.storage_offset() * t.element_size(), tuple(t.shape)) for name, t in self.items()
        ]
        return (_unpack, (block, layout))


def _unpack(
    block: torch.Tensor, layout: list[tuple[str, torch.dtype, int, tuple[int, ...]]]
) -> dict[str, torch.Tensor]:
    out = {}
    for name, dtype, offset, shape in layout:
        size = math.prod(shape) * dtype.itemsize
        out[name] = block[offset : offset + size].view(dtype).view(shape)
    return out


def _shared_block(nbytes: int) -> torch.Tensor:
    """``nbytes`` of shared memory as a uint8 tensor, allocated there (not copied in)."""
    try:
        storage = torch.UntypedStorage._new_shared(nbytes)
    except (AttributeError, RuntimeError):  # pragma: no cover - a torch without the private helper
        block = torch.empty(nbytes, dtype=torch.uint8)
        block.share_memory_()
        return block
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _combine(pieces: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(pieces) == 1:
        return pieces[0]
    concat = getattr(pa, "concat_batches", None)  # pyarrow >= 19
    if concat is not None:
        return concat(pieces)
    return pa.Table.from_batches(pieces).combine_chunks().to_batches()[0]


def assign_units(
    sizes: Sequence[int], shards: int, rng: np.random.Generator | None = None
) -> list[list[int]]:
    """Deal units (by index) to ``shards`` shards: largest first, each to the lightest shard.

    Ties go to the lower shard. With ``rng`` equal sizes are taken in a random order and the shards' lots are
    handed out in a random order. The same inputs give the same lots in every process.
    """
    n = len(sizes)
    tiebreak = rng.permutation(n) if rng is not None else np.arange(n)
    order = sorted(range(n), key=lambda i: (-sizes[i], int(tiebreak[i])))
    lots: list[list[int]] = [[] for _ in range(shards)]
    lightest = [(0, s) for s in range(min(shards, n))]  # shards beyond the units get nothing
    for i in order:
        held, s = heapq.heappop(lightest)
        lots[s].append(i)
        heapq.heappush(lightest, (held + sizes[i] + OPEN_COST_BYTES, s))
    if rng is not None:
        return [lots[int(k)] for k in rng.permutation(shards)]
    return lots


def rebatch_pieces(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[list[pa.RecordBatch]]:
    """The rows of ``batches`` in runs of exactly ``size`` rows (the last run may be shorter).

    Each run is a list of zero-copy slices of the input batches.
    """
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        n = batch.num_rows
        start = 0
        while start < n:
            take = min(size - held, n - start)
            pending.append(batch if take == n else batch.slice(start, take))
            held += take
            start += take
            if held == size:
                yield pending
                pending, held = [], 0
    if held:
        yield pending


def rebatch(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    """Record batches of exactly ``size`` rows (the last one may be shorter).

    Zero-copy where a batch lies within one input batch.
    """
    for pieces in rebatch_pieces(batches, size):
        yield _combine(pieces)


class TableDataset(IterableDataset[Batch]):
    """A mere table's merged rows as an iterable dataset of batches; see the module documentation.

    Give it to ``DataLoader(dataset, batch_size=None, ...)``: it batches itself. ``table.scan(columns=...,
    filter=..., version=..., as_of=..., tag=...)`` is planned here, once; the read point defaults to the
    newest version, pinned now.

    Args:
        table: The mere table (its catalog opened with a warehouse URI the workers can open).
        columns: The columns to read (default: all); each must be of a type torch holds, with
            ``output="torch"``.
        filter: A mere filter, evaluated in the scan.
        version: The version to read (give every rank the same one).
        batch_size: Rows per batch.
        shuffle: Deal and read the units in an order drawn from ``seed`` and the epoch, and permute rows
            within each batch (see :meth:`set_epoch`).
        seed: The seed of the shuffled order (a non-negative integer).
        rank: This process's rank in a distributed run (with ``world_size``; neither: ``torch.distributed``
            when initialized, else one process reads everything).
        world_size: The number of processes of a distributed run (with ``rank``).
        output: ``"torch"`` (dicts of tensors) or ``"arrow"`` (record batches).
        max_task_bytes: The most bytes of a unit of work (default 128 MiB): lower it for more, smaller units
            when there are more ranks x workers than splits.
        as_of: A point in time to read the table at; an ``as_of`` without a zone is read as UTC, not as local
            time.
        tag: A tag whose version to read.
        snapshot: A catalog snapshot (``cat.snapshot()``) whose version of the table to read (not with
            ``version``, ``as_of`` or ``tag``).

    Raises:
        InvalidInput: ``table`` is not a mere Table, a ``batch_size``, ``max_task_bytes``, ``seed``, ``rank``
            or ``world_size`` out of range, a ``shuffle`` that is not a bool, an unknown ``output``, only one
            of ``rank`` and ``world_size``, no columns, columns torch cannot hold (with ``output="torch"``),
            an invalid scan argument (as :meth:`mere.Table.scan` raises it), or a catalog opened with
            ``filesystem=``.
        SchemaMismatch: A column the table does not have.
        FilterError: A filter that does not parse or does not fit the table's columns.
        NoSuchVersion: The version (or time) is not in the retained history.
    """

    def __init__(
        self,
        table: Table,
        columns: Sequence[str] | str | None = None,
        filter: Any = None,
        version: int | None = None,
        batch_size: int = 1024,
        shuffle: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        output: str = "torch",
        max_task_bytes: int | None = None,
        *,
        as_of: Any = None,
        tag: str | None = None,
        snapshot: CatalogSnapshot | None = None,
    ) -> None:
        super().__init__()
        if not hasattr(table, "scan") or not hasattr(table, "spec"):  # not imported: mere.Table
            raise InvalidInput(f"TableDataset: table must be a mere Table, got {type(table).__name__}")
        _positive("batch_size", batch_size)
        if max_task_bytes is not None:
            _positive("max_task_bytes", max_task_bytes)
        if not isinstance(shuffle, bool):
            raise InvalidInput(f"TableDataset: shuffle must be True or False, got {shuffle!r}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise InvalidInput(f"TableDataset: seed must be a non-negative integer, got {seed!r}")
        if output not in OUTPUTS:
            raise InvalidInput(f"TableDataset: output must be one of {list(OUTPUTS)}, got {output!r}")
        if (rank is None) != (world_size is None):
            raise InvalidInput(
                f"TableDataset: give rank and world_size together (or neither, to take them from "
                f"torch.distributed), got rank={rank!r}, world_size={world_size!r}"
            )
        if rank is not None and world_size is not None:
            _positive("world_size", world_size)
            if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
                raise InvalidInput(f"TableDataset: rank must be in [0, {world_size}), got {rank!r}")
        version = pinned_version(snapshot, table, version, as_of, tag)
        scan = table.scan(columns=columns, filter=filter, version=version, as_of=as_of, tag=tag)
        schema: pa.Schema = scan.schema
        if not schema.names:  # batches of no tensor would lose the row count
            raise InvalidInput(f"{scan.table.name}: TableDataset needs at least one column, got columns=[]")
        kinds: list[tuple[torch.dtype, pa.DataType | None]] = []
        if output == "torch":
            refused = []
            for f in schema:
                kind = tensor_type(f.type)
                if kind is None:
                    refused.append(f"{f.name} ({f.type})")
                else:
                    kinds.append(kind)
            if refused:
                raise InvalidInput(
                    f"{scan.table.name}: torch tensors cannot hold column(s) {', '.join(refused)}; leave them "
                    f"out with columns=[...] or read record batches with output='arrow'"
                )
        tasks: list[ScanTask] = scan.tasks()
        cap = max_task_bytes or TASK_BYTES
        units = [u for t in tasks for u in t.divide(cap)]

        self.table_name: str = scan.table.name
        self.version: int = scan.version
        self.columns: list[str] = list(schema.names)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.output = output
        self.max_task_bytes = cap
        self.schema = schema
        self.units: list[ScanTask] = units
        self._kinds = kinds
        self._dist: tuple[int, int] | None = None  # rank and world size seen when pickled to a worker
        # Shared memory: DataLoader workers (persistent ones too) hold a copy of the dataset, and see
        # set_epoch through this value. Plain pickling (not to a child process) turns it into a number.
        self._epoch: Any = multiprocessing.RawValue("q", 0)

    # -- epochs and shards -----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads (see :meth:`set_epoch`)."""
        return int(self._epoch if isinstance(self._epoch, int) else self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch for the next iteration (with ``shuffle``, its order).

        Call it before iterating the DataLoader: its workers, persistent ones included, read it when an
        iteration starts.

        Args:
            epoch: The epoch, an integer in ``[0, 2**63)``.

        Raises:
            InvalidInput: An ``epoch`` that is not an integer in ``[0, 2**63)``.
        """
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch < 2**63:
            # Workers share it as a signed 64-bit value: a bigger one would wrap to another epoch's order.
            raise InvalidInput(
                f"TableDataset.set_epoch: epoch must be an integer in [0, 2**63), got {epoch!r}"
            )
        if isinstance(self._epoch, int):
            self._epoch = epoch
        else:
            self._epoch.value = epoch

    def shard(self) -> tuple[int, int]:
        """``(index, count)`` of the shard this process reads.

        The index is ``rank * num_workers + worker_id`` of ``world_size * num_workers``.
        """
        rank, world = self._rank_world()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return rank * workers + worker, world * workers

    def _rank_world(self) -> tuple[int, int]:
        if self.rank is not None and self.world_size is not None:
            return self.rank, self.world_size
        if self._dist is not None:
            return self._dist
        return _distributed() or (0, 1)

    def shard_units(self, shard: int, shards: int, epoch: int | None = None) -> list[ScanTask]:
        """The units shard ``shard`` of ``shards`` reads in ``epoch`` (default: the current one), in order."""
        if epoch is not None and (not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0):
            raise InvalidInput(
                f"TableDataset.shard_units: epoch must be a non-negative integer, got {epoch!r}"
            )
        epoch = self.epoch if epoch is None else epoch
        _positive("shards", shards)
        if not isinstance(shard, int) or isinstance(shard, bool) or not 0 <= shard < shards:
            raise InvalidInput(f"TableDataset: shard must be in [0, {shards}), got {shard!r}")
        sizes = [u.size_bytes for u in self.units]
        if self.shuffle:
            lots = assign_units(sizes, shards, np.random.default_rng([self.seed, epoch]))
            mine = lots[shard]
            order = np.random.default_rng([self.seed, epoch, shards, shard]).permutation(len(mine))
            return [self.units[mine[int(k)]] for k in order]
        return [self.units[i] for i in sorted(assign_units(sizes, shards)[shard])]

    # -- reading ---------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        """This shard's batches for the current epoch (the epoch is read now, not at the first batch)."""
        shard, shards = self.shard()
        epoch = self.epoch
        units = self.shard_units(shard, shards, epoch)
        rng = np.random.default_rng([self.seed, epoch, shards, shard, 1]) if self.shuffle else None
        return self._batches(units, rng)

    def _batches(self, units: list[ScanTask], rng: np.random.Generator | None) -> Iterator[Batch]:
        if not units:
            return
        shared = self.output == "torch" and get_worker_info() is not None
        source = read_tasks(units, parallel=PREFETCH_UNITS)
        try:
            for pieces in rebatch_pieces(source, self.batch_size):
                if rng is not None:
                    batch = _combine(pieces)
                    pieces = [batch.take(pa.array(rng.permutation(batch.num_rows)))]
                if self.output == "arrow":
                    yield _combine(pieces)
                elif shared:
                    yield self.shared_tensors(pieces)
                else:
                    yield self.to_tensors(_combine(pieces))
        finally:  # stop the merge threads now (after an error too): a worker exits only once they end
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def to_tensors(self, batch: pa.RecordBatch) -> dict[str, torch.Tensor]:
        """One record batch of this dataset's columns as ``{column: tensor}``.

        Zero-copy where the type allows. This is what the main process gets with ``num_workers=0``.
        """
        return {
            name: _tensor(name, batch.column(i), dtype, view)
            for i, (name, (dtype, view)) in enumerate(zip(self.columns, self._kinds))
        }

    def shared_tensors(self, pieces: Sequence[pa.RecordBatch]) -> SharedBatch:
        """The rows of ``pieces`` as ``{column: tensor}`` in one block of shared memory, copied there once.

        ``pieces`` are record batches of this dataset's columns. This is what a DataLoader worker yields: see
        :class:`SharedBatch`.
        """
        rows = sum(p.num_rows for p in pieces)
        offsets = []
        total = 0
        for dtype, _ in self._kinds:
            offsets.append(total)
            total += -(-rows * dtype.itemsize // 64) * 64  # every column 64-byte aligned
        block = _shared_block(max(total, 1))
        out = SharedBatch()
        for i, (name, (dtype, view)) in enumerate(zip(self.columns, self._kinds)):
            dest = block[offsets[i] : offsets[i] + rows * dtype.itemsize].view(dtype)
            at = 0
            for piece in pieces:
                column = piece.column(i)
                dest[at : at + len(column)].copy_(_tensor(name, column, dtype, view))
                at += len(column)
            out[name] = dest
        return out

    # -- pickling and display --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if _mp_context.get_spawning_popen() is None:
            state["_epoch"] = self.epoch  # not to a child process: shared memory cannot travel
        if self.rank is None and self._dist is None:
            # Taken where the DataLoader starts its workers (a spawned worker has no process group).
            state["_dist"] = _distributed()
        return state

    def __repr__(self) -> str:
        shard = "from torch.distributed" if self.rank is None else f"rank {self.rank} of {self.world_size}"
        return (
            f"TableDataset({self.table_name} @ v{self.version}, columns={self.columns}, "
            f"units={len(self.units)}, batch_size={self.batch_size}, shuffle={self.shuffle}, seed={self.seed}, "
            f"epoch={self.epoch}, output={self.output!r}, {shard})"
        )


def _distributed() -> tuple[int, int] | None:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"TableDataset: {name} must be a positive integer, got {value!r}")
