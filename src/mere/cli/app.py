"""The ``mere`` commands (click + rich), built on the public API only: Catalog, Table and Scan methods."""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import io
import json
import logging
import math
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

import click
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from rich.text import Text

import mere
from mere.cli.settings import (
    Settings,
    SettingsError,
    parse_duration,
    parse_pairs,
    redact,
    redact_url,
    resolve,
    shown_catalog,
)
from mere.errors import InvalidInput, MereError
from mere.options import parse_as_of, parse_columns
from mere.spec import is_bytes_type

if TYPE_CHECKING:
    from mere.metadata import FileEntry
    from mere.table.compaction import CompactionTask

EXIT_ERROR = 1
EXIT_USAGE = 2
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class Format(enum.StrEnum):
    """Output formats of ``scan`` and ``head``."""

    table = "table"
    csv = "csv"
    parquet = "parquet"
    jsonl = "jsonl"


# The format an --output file's suffix names when --format is not given.
_FORMAT_OF_SUFFIX = {
    ".parquet": Format.parquet,
    ".csv": Format.csv,
    ".jsonl": Format.jsonl,
    ".json": Format.jsonl,
    ".ndjson": Format.jsonl,
}


# -- the connection -------------------------------------------------------------------------------


@dataclasses.dataclass
class State:
    """What the global options said; the catalog opens on first use."""

    warehouse: str | None
    catalog: str | None
    storage_options: list[str]
    config: str | None
    settings: Settings | None = None
    _catalog: mere.Catalog | None = None

    def resolve(self) -> Settings:
        """The settings, from options, environment and config file."""
        if self.settings is None:
            try:
                self.settings = resolve(self.warehouse, self.catalog, self.storage_options, self.config)
            except SettingsError as e:
                raise click.UsageError(str(e)) from None
        return self.settings

    def open(self) -> mere.Catalog:
        """The catalog (opening it creates nothing)."""
        if self._catalog is None:
            s = self.resolve()
            self._catalog = mere.connect(s.warehouse, s.catalog, s.storage_options)
        return self._catalog

    def table(self, name: str) -> mere.Table:
        """An existing table (NoSuchTable otherwise; nothing is created)."""
        return self.open().table(name)


_STATE: State | None = None  # this invocation's state, for the error handler's redaction


class _InOrder(click.Group):
    """A group that lists its commands in the order they are defined (reads first, maintenance last)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The command names, in definition order."""
        return list(self.commands)


@click.group(name="mere", cls=_InOrder, context_settings=CONTEXT, no_args_is_help=True)
@click.option("--warehouse", "-w", metavar="URI", help="Warehouse path or URI (env MERE_WAREHOUSE).")
@click.option(
    "--catalog",
    "-c",
    metavar="URL",
    help="Catalog: an SQLite file path, sqlite:///path or postgresql://user@host/db (env MERE_CATALOG); "
    "default: catalog.db inside a local warehouse.",
)
@click.option(
    "--storage-option",
    "-o",
    "storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Storage option, repeatable (env MERE_STORAGE_OPTIONS: a JSON object or k=v,k=v).",
)
@click.option(
    "--config",
    metavar="FILE",
    help="Config file (TOML: warehouse, catalog, [storage_options]); default $MERE_CONFIG, else "
    "~/.config/mere/config.toml. Options beat environment variables, which beat the file.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    warehouse: str | None,
    catalog: str | None,
    storage_options: tuple[str, ...],
    config: str | None,
) -> None:
    """Inspect, read and maintain mere tables."""
    global _STATE
    _STATE = State(warehouse, catalog, list(storage_options), config)
    ctx.obj = _STATE
    for item in storage_options:  # check the syntax at once, before any command runs
        try:
            parse_pairs([item], "--storage-option")
        except SettingsError as e:
            raise click.BadParameter(str(e), param_hint="--storage-option") from None


# -- output helpers ---------------------------------------------------------------------------------


def _out() -> Console:
    # Piped output is not cut to 80 columns (COLUMNS still sets the width where given).
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=200 if wide else None)


def _err() -> Console:
    return Console(file=sys.stderr, highlight=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinities: they become the strings "NaN", "Infinity", "-Infinity"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, tuple):
        return [_finite(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    return json.dumps(_finite(value), default=_json_default, allow_nan=False, ensure_ascii=False)


def _print_json(value: Any) -> None:
    text = _dumps(value) + "\n"
    if _utf8(sys.stdout):
        sys.stdout.write(text)
        return
    # JSON is UTF-8 text (RFC 8259), whatever the locale's encoding: written as bytes where possible.
    out = getattr(sys.stdout, "buffer", None)
    if out is None:
        sys.stdout.write(text.encode("ascii", "backslashreplace").decode("ascii"))  # no bytes to write to
        return
    sys.stdout.flush()
    out.write(text.encode("utf-8"))
    out.flush()


def _utf8(stream: Any) -> bool:
    """Whether a text stream encodes every character (UTF-8 or UTF-16/32)."""
    try:
        return codecs.lookup(stream.encoding or "ascii").name.startswith("utf")
    except (LookupError, AttributeError):
        return False


def _cell(value: Any) -> Text:
    if value is None:
        return Text("null", style="dim")
    if isinstance(value, (dict, list)):
        return Text(_dumps(value))
    return Text(str(value))


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _columns(text: str | None) -> list[str] | None:
    """``--columns``: names separated by commas; a name holding a comma or a quote is written in double
    quotes, as in CSV (``'id,"a,b"'``; a quote inside doubled): :func:`mere.options.parse_columns`."""
    try:
        return parse_columns(text)
    except InvalidInput as e:
        raise click.BadParameter(str(e), param_hint="--columns") from None


def _one_read_point(version: int | None, as_of: str | None, tag: str | None) -> None:
    """--version, --as-of and --tag name one version: two of them are bad usage (exit 2)."""
    given = [
        name
        for name, value in (("--version", version), ("--as-of", as_of), ("--tag", tag))
        if value is not None
    ]
    if len(given) > 1:
        raise click.UsageError(f"give one of --version, --as-of and --tag, not {' and '.join(given)}")


def _as_of(text: str | None) -> dt.datetime | None:
    """``--as-of``: an ISO 8601 time, or seconds since the epoch (:func:`mere.options.parse_as_of`)."""
    return None if text is None else parse_as_of(text)


def _duration(text: str, option: str) -> dt.timedelta:
    try:
        return parse_duration(text)
    except SettingsError as e:
        raise click.BadParameter(str(e), param_hint=option) from None


# -- commands -----------------------------------------------------------------------------------------

json_flag = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
table_arg = click.argument("table")  # namespace.table, or table in the 'default' namespace
version_opt = click.option(
    "--version", type=click.IntRange(min=0), default=None, help="Read this version (time travel)."
)


@cli.command("tables")
@click.argument("namespace", required=False)
@json_flag
@click.pass_obj
def tables_command(state: State, namespace: str | None, as_json: bool) -> None:
    """List the tables (all, or those of NAMESPACE)."""
    cat = state.open()
    names = cat.tables(namespace)
    if not names and not cat.initialized:  # a mistyped warehouse or catalog must not look like an empty one
        raise click.ClickException(
            f"no mere catalog at {shown_catalog(cat.catalog_url)}: check --warehouse / --catalog "
            "(a catalog appears with the first table created)"
        )
    if as_json:
        _print_json(names)
    else:
        for name in names:
            sys.stdout.write(name + "\n")


@cli.command("describe")
@table_arg
@version_opt
@json_flag
@click.pass_obj
def describe_command(state: State, table: str, version: int | None, as_json: bool) -> None:
    """Schema, primary key, partitioning, buckets, properties, version and files of TABLE."""
    t = state.table(table)
    snap = t.snapshot(version=version)
    files = t.inspect.files(snap.version).to_pylist()
    spec = t.spec_at(snap.version)  # an older version shows its own columns
    ops = {
        c: op.name + (f":{op.separator}" if op.name == "concat" else "")
        for c, op in spec.merge_operators.items()
    }
    columns = [
        {
            "name": f.name,
            "type": str(f.type),
            "nullable": f.nullable,
            "primary_key": f.name in spec.primary_key,
            "partition": f.name in spec.partition_by,
            "merge_operator": ops.get(f.name),
            "field_id": spec.field_ids.get(f.name),
            "default": None
            if spec.defaults.get(spec.field_ids.get(f.name, -1)) is None
            else str(spec.defaults[spec.field_ids[f.name]]),
        }
        for f in spec.schema
    ]
    data_files = [f for f in files if f["content"] == "data"]
    info: dict[str, Any] = {
        "name": t.name,
        "warehouse": redact_url(t.catalog.storage.uri),
        "catalog": shown_catalog(t.catalog.catalog_url),
        "location": t.location,
        "version": snap.version,
        "current_version": t.version,
        "committed_at": snap.committed_at,
        "operation": snap.operation,
        "columns": columns,
        "primary_key": list(spec.primary_key),
        "partition_by": list(spec.partition_by),
        "buckets": spec.buckets,
        "merge_operators": ops,
        "cdc_column": spec.cdc_column,
        "properties": dict(spec.properties),
        "files": {
            "count": len(files),
            "data_files": len(data_files),
            "delete_files": len(files) - len(data_files),
            "rows": sum(f["row_count"] for f in data_files),
            "delete_rows": sum(f["row_count"] for f in files if f["content"] != "data"),
            "bytes": sum(f["size_bytes"] for f in files),
        },
    }
    if spec.sequence_by:  # only where set: the output of other tables stays as it was
        info["sequence_by"] = list(spec.sequence_by)
    if spec.merge_engine:
        info["merge_engine"] = spec.merge_engine
    if spec.sequence_groups:
        info["sequence_groups"] = {g: list(cs) for g, cs in spec.sequence_groups.items()}
    if spec.has_primary_key and spec.partition_by:  # where keys could move between partitions
        info["key_scope"] = spec.key_scope
    if as_json:
        _print_json(info)
        return
    out = _out()
    out.print(Text(t.name, style="bold"))
    fi = info["files"]
    head = [
        ("location", f"{info['warehouse'].rstrip('/')}/{t.location}"),
        ("catalog", info["catalog"]),
        (
            "version",
            f"{snap.version} ({snap.operation}, {snap.committed_at.isoformat(timespec='seconds')})"
            + ("" if snap.version == info["current_version"] else f"; current {info['current_version']}"),
        ),
        ("primary key", ", ".join(spec.primary_key) or "(none)"),
        ("partitioned by", ", ".join(spec.partition_by) or "(none)"),
        ("buckets", str(spec.buckets)),
        ("change column", spec.cdc_column or "(none)"),
        *([("sequence by", ", ".join(spec.sequence_by))] if spec.sequence_by else []),
        *([("merge engine", spec.merge_engine)] if spec.merge_engine else []),
        *(
            [
                (
                    "sequence groups",
                    "; ".join(f"{g}: {', '.join(cs)}" for g, cs in spec.sequence_groups.items()),
                )
            ]
            if spec.sequence_groups
            else []
        ),
        *([("key scope", info["key_scope"])] if "key_scope" in info else []),
        (
            "files",
            f"{fi['count']} ({fi['data_files']} data, {fi['delete_files']} delete), {fi['rows']} stored rows, "
            f"{_human_bytes(fi['bytes'])}",
        ),
    ]
    grid = RichTable.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for k, v in head:
        grid.add_row(k, Text(v))
    out.print(grid)
    schema = RichTable(title="schema", title_justify="left")
    for col in ("column", "type", "nullable", "key", "merge", "id", "default"):
        schema.add_column(col)
    for c in columns:
        key = "primary key" if c["primary_key"] else ("partition" if c["partition"] else "")
        schema.add_row(  # names and values as Text: rich would read '[...]' in them as markup
            Text(c["name"]),
            Text(c["type"]),
            "yes" if c["nullable"] else "no",
            key,
            Text(c["merge_operator"] or ""),
            str(c["field_id"]),
            Text(c["default"] or ""),
        )
    out.print(schema)
    if info["properties"]:
        props = RichTable(title="properties", title_justify="left")
        props.add_column("key")
        props.add_column("value")
        for k, v in sorted(info["properties"].items()):
            props.add_row(Text(k), Text(v))
        out.print(props)


@cli.command("history")
@table_arg
@click.option("--limit", "-n", type=click.IntRange(min=1), default=None, help="Only the newest N versions.")
@json_flag
@click.pass_obj
def history_command(state: State, table: str, limit: int | None, as_json: bool) -> None:
    """Every version of TABLE: when, which operation, what changed."""
    snaps = state.table(table).history()
    if limit is not None:
        snaps = snaps[-limit:]
    rows: list[dict[str, Any]] = [
        {
            "version": s.version,
            "committed_at": s.committed_at,
            "operation": s.operation,
            "expired": s.expired,
            "summary": dict(s.summary),
        }
        for s in snaps
    ]
    if as_json:
        _print_json(rows)
        return
    out = RichTable()
    for col in ("version", "committed at (UTC)", "operation", "summary"):
        out.add_column(col)
    for r in rows:
        out.add_row(
            str(r["version"]) + (" (expired)" if r["expired"] else ""),
            r["committed_at"].astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            Text(r["operation"]),
            Text(_summary_text(r["summary"])),
            style="dim" if r["expired"] else "",
        )
    _out().print(out)


def _summary_text(summary: dict[str, Any]) -> str:
    s = dict(summary)
    s.pop("read_version", None)
    parts = []
    if "rows" in s:
        parts.append(f"rows={s.pop('rows')}")
    if "added_files" in s or "removed_files" in s:
        parts.append(f"files=+{s.pop('added_files', 0)}/-{s.pop('removed_files', 0)}")
    if "added_bytes" in s:
        parts.append(f"bytes=+{_human_bytes(int(s.pop('added_bytes') or 0))}")
    parts += [f"{k}={v if isinstance(v, str) else _dumps(v)}" for k, v in sorted(s.items())]
    return " ".join(parts)


def _read(
    state: State,
    table: str,
    columns: str | None,
    filter: str | None,
    version: int | None,
    as_of: str | None,
    tag: str | None,
    limit: int | None,
    fmt_name: str | None,
    output: str | None,
    as_json: bool,
) -> None:
    fmt = _format(fmt_name, output, as_json)
    _one_read_point(version, as_of, tag)
    t = state.table(table)
    scan = t.scan(columns=_columns(columns), filter=filter, version=version, as_of=_as_of(as_of), tag=tag)
    _emit(fmt, scan.schema, _limited(scan.to_batches(), limit), output)


def _format(fmt_name: str | None, output: str | None, as_json: bool) -> Format:
    fmt = None if fmt_name is None else Format(fmt_name)
    if fmt is None and output is not None and not as_json:
        fmt = _FORMAT_OF_SUFFIX.get(os.path.splitext(output)[1].lower())
        if fmt is None:
            raise click.BadParameter(
                f"cannot tell the format of {output!r} from its suffix: give --format csv, jsonl or parquet",
                param_hint="--output",
            )
    if as_json:
        if fmt not in (None, Format.jsonl):
            raise click.UsageError(f"--json prints JSON lines; it cannot go with --format {fmt.value}")
        fmt = Format.jsonl
    fmt = fmt or Format.table
    if fmt is Format.parquet and output is None:
        raise click.BadParameter("--format parquet needs --output FILE", param_hint="--output")
    if fmt is Format.table and output is not None:
        raise click.BadParameter(
            "--format table prints to the terminal; write files with --format csv, jsonl or parquet",
            param_hint="--output",
        )
    return fmt


def _emit(fmt: Format, schema: pa.Schema, batches: Iterator[pa.RecordBatch], output: str | None) -> None:
    try:
        if fmt is Format.table:
            _print_rows(schema, batches)
        elif output is None:
            _write_stream(fmt, schema, batches, sys.stdout.buffer)
        else:
            _write_file(fmt, schema, batches, output)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def _limited(batches: Iterator[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
    if limit is None:
        yield from batches
        return
    left = limit
    try:
        for b in batches:
            if left <= 0:
                break
            if b.num_rows > left:
                b = b.slice(0, left)
            left -= b.num_rows
            yield b
    finally:
        close = getattr(batches, "close", None)
        if close is not None:  # stop the readers of splits not needed any more
            close()


_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}  # a duration unit's digits past the second


def _python_rows(batch: pa.RecordBatch) -> list[list[Any]]:
    """The batch's rows as lists of Python values. Values Python cannot hold (dates and times past year
    9999 or before year 1) are shown as Arrow writes them, as text. Durations are seconds (a float), in
    every unit: through Python they would be cut to microseconds."""
    for i, field in enumerate(batch.schema):
        if pa.types.is_duration(field.type):
            per_second = 10 ** _UNIT_DIGITS[field.type.unit]
            counts = batch.column(i).cast(pa.int64()).cast(pa.float64())
            batch = batch.set_column(i, field.with_type(pa.float64()), pc.divide(counts, float(per_second)))
    try:
        columns = [c.to_pylist() for c in batch.columns]
    except (OverflowError, ValueError):
        columns = []
        for field, column in zip(batch.schema, batch.columns):
            try:
                columns.append(column.to_pylist())
            except (OverflowError, ValueError):
                if pa.types.is_nested(field.type):
                    raise click.ClickException(
                        f"column {field.name!r} holds dates or times Python cannot represent (past year "
                        "9999 or before year 1) inside nested values: write it with --format parquet"
                    ) from None
                columns.append(_values_or_text(column))
    return [list(row) for row in zip(*columns)] if columns else [[] for _ in range(batch.num_rows)]


def _values_or_text(column: pa.Array) -> list[Any]:
    """Each value as Python holds it, or as Arrow writes it where Python cannot: a value's form does not
    depend on the other values of its batch (a slow path, for the rare batch that needs it)."""
    texts = column.cast(pa.string())
    out: list[Any] = []
    for i in range(len(column)):
        try:
            out.append(column[i].as_py())
        except (OverflowError, ValueError):
            out.append(texts[i].as_py())
    return out


def _seconds_text(column: pa.Array) -> pa.Array:
    """A duration column as exact decimal seconds (``1.5``, ``-0.000001``), NULLs kept."""
    digits = _UNIT_DIGITS[column.type.unit]
    out: list[str | None] = []
    for count in column.cast(pa.int64()).to_pylist():
        if count is None:
            out.append(None)
            continue
        whole, part = divmod(abs(count), 10**digits)
        fraction = f"{part:0{digits}d}".rstrip("0") if digits else ""
        out.append(f"{'-' if count < 0 else ''}{whole}{'.' + fraction if fraction else ''}")
    return pa.array(out, pa.string())


def _print_rows(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> None:
    out = RichTable()
    for name in schema.names:
        out.add_column(Text(name))
    for b in batches:
        for row in _python_rows(b):
            out.add_row(*(_cell(v) for v in row))
    _out().print(out)


def _write_stream(fmt: Format, schema: pa.Schema, batches: Iterator[pa.RecordBatch], sink: IO[bytes]) -> None:
    if fmt is Format.jsonl:
        names = schema.names
        for b in batches:
            lines = "".join(_dumps(dict(zip(names, row))) + "\n" for row in _python_rows(b))
            sink.write(lines.encode())
    elif fmt is Format.csv:
        import pyarrow.csv as pacsv

        nested = [f.name for f in schema if pa.types.is_nested(f.type)]
        if nested:
            raise click.ClickException(
                f"CSV cannot hold nested column(s) {nested}: use --format jsonl or parquet, or --columns"
            )
        binary = [i for i, f in enumerate(schema) if is_bytes_type(f.type)]
        # Durations in seconds, as in JSON lines (pyarrow's CSV writer gives bare counts of the unit).
        durations = [i for i, f in enumerate(schema) if pa.types.is_duration(f.type)]
        if binary or durations:  # bytes as hex, as in JSON lines: CSV is text, bytes need not be UTF-8
            texts = set(binary) | set(durations)
            schema = pa.schema([f.with_type(pa.string()) if i in texts else f for i, f in enumerate(schema)])
        with pacsv.CSVWriter(sink, schema) as writer:
            for b in batches:
                for i in binary:
                    hexed = pa.array(
                        [None if v is None else v.hex() for v in b.column(i).to_pylist()], pa.string()
                    )
                    b = b.set_column(i, schema.field(i), hexed)
                for i in durations:
                    b = b.set_column(i, schema.field(i), _seconds_text(b.column(i)))
                writer.write_batch(b)
    else:  # parquet
        import pyarrow.parquet as pq

        with pq.ParquetWriter(sink, schema) as writer:
            for b in batches:
                writer.write_batch(b)
    sink.flush()


def _open_stream(found: os.stat_result | None) -> Any:
    """Our stdout or stderr when ``found`` is the very file it writes to, else None."""
    if found is None:
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            opened = os.fstat(stream.fileno())
        except (OSError, ValueError, AttributeError):  # no descriptor (e.g. captured by a test runner)
            continue
        if (opened.st_dev, opened.st_ino) == (found.st_dev, found.st_ino):
            return stream
    return None


def _write_file(fmt: Format, schema: pa.Schema, batches: Iterator[pa.RecordBatch], path: str) -> None:
    """Write to ``path``: ``-`` is stdout; a pipe or device (``/dev/stdout``, ``>(cmd)``) is written in
    place; a regular file (through its symlink, if it is one) is written to a temporary file beside it,
    then renamed over it, so that a failed read leaves no partial file."""
    if path == "-":
        _write_stream(fmt, schema, batches, sys.stdout.buffer)
        return
    if not path.strip():
        raise click.BadParameter("an empty file name", param_hint="--output")
    try:
        found: os.stat_result | None = os.stat(path)
    except OSError:
        found = None  # a new file
    mode = found.st_mode if found is not None else None
    if mode is not None and stat.S_ISDIR(mode):
        raise click.BadParameter(f"{path} is a directory", param_hint="--output")
    stream = _open_stream(found)
    if stream is not None:  # e.g. /dev/stdout while stdout is redirected to a file: write at its offset
        stream.flush()
        _write_stream(fmt, schema, batches, stream.buffer)
        stream.buffer.flush()
        return
    special = os.path.abspath(path).startswith(("/dev/fd/", "/dev/stdout", "/dev/stderr", "/proc/"))
    if mode is not None and (special or not stat.S_ISREG(mode)):
        # Devices, pipes and the files behind /proc/self/fd/N are written in place: a rename would put a
        # new file where the one a shell opened was.
        with open(path, "wb") as sink:
            _write_stream(fmt, schema, batches, sink)
        return
    target = os.path.realpath(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mere-", suffix=".partial", dir=os.path.dirname(target))
    except OSError as e:
        raise click.ClickException(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            _write_stream(fmt, schema, batches, f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, (stat.S_IMODE(mode) if mode is not None else 0o666 & ~umask))  # as open() would
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _scan_options(fn: Callable[..., None]) -> Callable[..., None]:
    options = [
        click.option(
            "--columns",
            metavar="A,B",
            help='Comma-separated columns to read (a name with a comma in double quotes: id,"a,b").',
        ),
        click.option("--filter", metavar="EXPR", help="SQL filter, e.g. \"day = '2026-11-21' and qty > 3\"."),
        version_opt,
        click.option(
            "--as-of",
            metavar="TIME",
            help="Read the version current at this time: ISO 8601 (a time without a zone is UTC, not local time) or epoch seconds.",
        ),
        click.option("--tag", metavar="NAME", help="Read the version this tag names."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _output_options(fn: Callable[..., None]) -> Callable[..., None]:
    options = [
        click.option(
            "--format",
            "-f",
            "fmt_name",
            type=click.Choice([f.value for f in Format]),
            default=None,
            help="Output format (default: table).",
        ),
        click.option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write to this file (needed for parquet); its suffix (.parquet, .csv, .jsonl) gives the format "
            "when --format is not given.",
        ),
        click.option(
            "--json", "as_json", is_flag=True, help="Rows as JSON lines (the same as --format jsonl)."
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@cli.command("scan")
@table_arg
@_scan_options
@click.option(
    "--limit", "-n", type=click.IntRange(min=0), default=None, help="At most N rows (default: all)."
)
@_output_options
@click.pass_obj
def scan_command(state: State, table: str, **options: Any) -> None:
    """Read the merged rows of TABLE: print them, or write csv, jsonl or parquet."""
    _read(state, table, **options)


@cli.command("head")
@table_arg
@_scan_options
@click.option(
    "--limit", "-n", type=click.IntRange(min=0), default=10, show_default=True, help="At most N rows."
)
@_output_options
@click.pass_obj
def head_command(state: State, table: str, **options: Any) -> None:
    """The first rows of TABLE (a scan with --limit 10)."""
    _read(state, table, **options)


@cli.command("explain")
@table_arg
@_scan_options
@json_flag
@click.pass_obj
def explain_command(
    state: State,
    table: str,
    columns: str | None,
    filter: str | None,
    version: int | None,
    as_of: str | None,
    tag: str | None,
    as_json: bool,
) -> None:
    """How a scan of TABLE would read: what is pruned, which filters run before and after the merge."""
    _one_read_point(version, as_of, tag)
    t = state.table(table)
    ex = t.scan(
        columns=_columns(columns), filter=filter, version=version, as_of=_as_of(as_of), tag=tag
    ).explain()
    if as_json:
        _print_json(dataclasses.asdict(ex))
    else:
        sys.stdout.write(str(ex) + "\n")


@cli.command("changes")
@table_arg
@click.option("--from", "start", type=click.IntRange(min=0), default=None, help="The older version.")
@click.option(
    "--to", "end", type=click.IntRange(min=0), default=None, help="The newer version (default: newest)."
)
@click.option(
    "--consumer",
    metavar="NAME",
    default=None,
    help="Instead of --from: the changes after this consumer's position (see 'mere consumer').",
)
@click.option(
    "--commit",
    is_flag=True,
    help="With --consumer: once every row is written, commit the consumer to the version read up to.",
)
@click.option("--columns", metavar="A,B", help="Comma-separated columns (key columns always come first).")
@click.option("--filter", metavar="EXPR", help="Keep the change rows this SQL filter holds for.")
@click.option(
    "--limit", "-n", type=click.IntRange(min=0), default=None, help="At most N rows (default: all)."
)
@_output_options
@click.pass_obj
def changes_command(
    state: State,
    table: str,
    start: int | None,
    end: int | None,
    consumer: str | None,
    commit: bool,
    columns: str | None,
    filter: str | None,
    limit: int | None,
    fmt_name: str | None,
    output: str | None,
    as_json: bool,
) -> None:
    """The net change of every key of TABLE between two versions (_change, _version, _commit_time).

    With --consumer, the changes after that consumer's position; --commit then moves it (at-least-once:
    only after the output is complete, so a failed run is read again).
    """
    if (start is None) == (consumer is None):
        raise click.UsageError("give --from VERSION or --consumer NAME (one of them)")
    if commit and consumer is None:
        raise click.UsageError("--commit moves a consumer: give --consumer NAME")
    if commit and limit is not None:
        raise click.UsageError("--commit with --limit would skip the rows past the limit; drop one of them")
    fmt = _format(fmt_name, output, as_json)
    t = state.table(table)
    if consumer is not None:
        end, reader = t.consumer(consumer, create=False).changes(
            end, columns=_columns(columns), filter=filter
        )
    else:
        reader = t.changes(start, end, columns=_columns(columns), filter=filter)
    _emit(fmt, reader.schema, _limited(iter(reader), limit), output)
    if commit:
        assert consumer is not None and end is not None
        t.consumer(consumer, create=False).commit(end)


@cli.command("tags")
@table_arg
@json_flag
@click.pass_obj
def tags_command(state: State, table: str, as_json: bool) -> None:
    """The tags of TABLE and the versions they name."""
    tags = state.table(table).tags()
    if as_json:
        _print_json(tags)
        return
    out = RichTable()
    out.add_column("tag")
    out.add_column("version")
    for name, version in tags.items():
        out.add_row(Text(name), str(version))
    _out().print(out)


@cli.command("tag")
@table_arg
@click.argument("name")
@version_opt
@click.option("--replace", is_flag=True, help="Move the tag if it exists.")
@json_flag
@click.pass_obj
def tag_command(
    state: State, table: str, name: str, version: int | None, replace: bool, as_json: bool
) -> None:
    """Name a version of TABLE (default: the newest); expire keeps tagged versions."""
    try:
        tagged = state.table(table).tag(name, version, replace=replace)
    except mere.errors.TagExists as e:  # the API's advice, in the command line's words
        raise mere.errors.TagExists(str(e).replace("replace=True", "--replace")) from None
    if as_json:
        _print_json({"table": table, "tag": name, "version": tagged})
    else:
        sys.stdout.write(f"{table}: tag {name} -> version {tagged}\n")


@cli.command("untag")
@table_arg
@click.argument("name")
@json_flag
@click.pass_obj
def untag_command(state: State, table: str, name: str, as_json: bool) -> None:
    """Remove a tag of TABLE (its version may then expire)."""
    state.table(table).untag(name)
    if as_json:
        _print_json({"table": table, "untagged": name})
    else:
        sys.stdout.write(f"{table}: tag {name} removed\n")


@cli.command("consumers")
@table_arg
@json_flag
@click.pass_obj
def consumers_command(state: State, table: str, as_json: bool) -> None:
    """The change-feed consumers of TABLE: position, lag, last seen; those expire dropped, and why."""
    rows = state.table(table).inspect.consumers().to_pylist()
    if as_json:
        _print_json(rows)
        return
    out = RichTable()
    for col in ("consumer", "position", "lag", "last seen (UTC)", "state"):
        out.add_column(col)
    for r in rows:
        dropped = r["dropped_at"] is not None
        state_text = f"dropped {_utc(r['dropped_at'])}: {r['dropped_reason']}" if dropped else "live"
        out.add_row(
            Text(r["name"]),
            str(r["position"]),
            str(r["lag"]),
            _utc(r["last_seen"]),
            Text(state_text),
            style="dim" if dropped else "",
        )
    _out().print(out)


def _utc(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@cli.group("consumer", cls=_InOrder, no_args_is_help=True)
def consumer_group() -> None:
    """Register or drop a change-feed consumer (a named position that expire keeps; see 'consumers')."""


@consumer_group.command("create")
@table_arg
@click.argument("name")
@click.option(
    "--version",
    type=click.IntRange(min=0),
    default=None,
    help="Its position: its feed starts after this version (default: the newest).",
)
@json_flag
@click.pass_obj
def consumer_create_command(state: State, table: str, name: str, version: int | None, as_json: bool) -> None:
    """Register consumer NAME of TABLE (an existing one is left as it is)."""
    position = state.table(table).consumer(name, start_version=version).position
    if as_json:
        _print_json({"table": table, "consumer": name, "position": position})
    else:
        sys.stdout.write(f"{table}: consumer {name} at version {position}\n")


@consumer_group.command("drop")
@table_arg
@click.argument("name")
@json_flag
@click.pass_obj
def consumer_drop_command(state: State, table: str, name: str, as_json: bool) -> None:
    """Remove consumer NAME of TABLE (also one expire dropped): the versions it held may then expire."""
    state.table(table).drop_consumer(name)
    if as_json:
        _print_json({"table": table, "dropped": name})
    else:
        sys.stdout.write(f"{table}: consumer {name} dropped\n")


@cli.command("rollback")
@table_arg
@click.argument("version", type=click.IntRange(min=0), required=False)
@click.option("--tag", metavar="NAME", help="Roll back to the version this tag names.")
@click.option(
    "--expected-version",
    type=click.IntRange(min=0),
    default=None,
    metavar="V",
    help="The newest version you looked at: refuse (nothing changes) if a write other than a compaction "
    "landed after it, instead of undoing it.",
)
@json_flag
@click.pass_obj
def rollback_command(
    state: State,
    table: str,
    version: int | None,
    tag: str | None,
    expected_version: int | None,
    as_json: bool,
) -> None:
    """Make an older VERSION (or --tag) of TABLE current again, as a new commit; history is kept."""
    if (version is None) == (tag is None):
        raise click.UsageError("give a VERSION or --tag NAME (one of them)")
    result = state.table(table).rollback(version, tag=tag, expected_version=expected_version)
    if as_json:
        _print_json({"table": table, "version": result.version, "operation": result.operation})
    else:
        target = f"tag {tag}" if tag is not None else f"version {version}"
        sys.stdout.write(f"{table}: rolled back to {target}; now version {result.version}\n")


@cli.command("compact")
@table_arg
@click.option(
    "--min-files",
    type=click.IntRange(min=1),
    default=None,
    help="Fold splits with at least this many sorted runs (files; those of one compaction count once) or "
    "any delete markers [default: 2; not with --auto].",
)
@click.option("--partition", multiple=True, metavar="COL=VALUE", help="Only this partition; repeatable.")
@click.option(
    "--auto",
    is_flag=True,
    help="Follow the table's policy (compaction.min-files, compaction.size-amplification-percent): compact "
    "only the splits it finds due.",
)
@json_flag
@click.pass_obj
def compact_command(
    state: State, table: str, min_files: int | None, partition: tuple[str, ...], auto: bool, as_json: bool
) -> None:
    """Fold each split's files of TABLE into one merged file (a new version; old files stay until expire)."""
    if auto and min_files is not None:
        raise click.UsageError("--auto follows the table's policy (compaction.min-files); drop --min-files")
    min_files = 2 if min_files is None else min_files
    try:
        wanted = parse_pairs(partition, "--partition") if partition else None
    except SettingsError as e:
        raise click.BadParameter(str(e), param_hint="--partition") from None
    given = [item.partition("=")[0].strip() for item in partition]
    twice = sorted({c for c in given if given.count(c) > 1})
    if twice:  # one value per column: a second one would silently replace the first
        raise click.BadParameter(
            f"partition column(s) {twice} given more than once; compact one partition per call",
            param_hint="--partition",
        )
    t = state.table(table)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_err(),
        transient=True,
        disable=not sys.stderr.isatty(),  # a bar only where someone watches
    )

    def run(tasks: Sequence[CompactionTask]) -> list[list[FileEntry]]:
        job = progress.add_task(f"compacting {t.name}", total=len(tasks))
        results: list[list[FileEntry]] = []
        try:
            for task in tasks:
                results.append(task.run(t.storage))
                progress.advance(job)
        except BaseException:
            t.abort_compaction(results)
            raise
        return results

    due = t.compaction_due() if auto else None  # for cron or an orchestrator: the policy decides
    if due == [] and wanted:
        t.plan_compaction(partition=wanted, splits=())  # nothing due: the partition is still checked
    with progress:
        if due is None:
            result = t.compact(min_files=min_files, partition=wanted, run=run)
        else:
            result = t.compact(partition=wanted, run=run, splits=due, tiered=True) if due else None
    info: dict[str, Any] = {"table": t.name, "compacted": result is not None}
    if result is not None:
        info |= {
            "version": result.version,
            "files_added": result.files_added,
            "files_removed": result.files_removed,
            "bytes_added": result.bytes_added,
        }
    if as_json:
        _print_json(info)
    elif result is None and auto:
        where = " in that partition" if wanted else ""
        sys.stdout.write(f"nothing to compact in {t.name}: its compaction policy finds no split due{where}\n")
    elif result is None:
        sys.stdout.write(
            f"nothing to compact in {t.name}: no split has {min_files}+ runs or delete markers\n"
        )
    else:
        sys.stdout.write(
            f"compacted {t.name}: version {result.version}, files +{result.files_added}/-{result.files_removed}\n"
        )


apply_flag = click.option(
    "--apply",
    "--no-dry-run",
    "apply",
    is_flag=True,
    help="Really delete (the default is a dry run that lists what would go).",
)


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``'0..2, 5'``."""
    out: list[str] = []
    for n in sorted(numbers):
        if out and out[-1].split("..")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('..')[0]}..{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def _report(
    table: str, what: str, paths: list[str], applied: bool, as_json: bool, extra: dict[str, Any]
) -> None:
    if as_json:
        _print_json({"table": table, "dry_run": not applied, "count": len(paths), "files": paths, **extra})
        return
    verb = "deleted" if applied else "would delete"
    lines = [f"{what} {table}: {verb} {len(paths)} file(s)"]
    if extra.get("expired_versions"):
        versions = _ranges(extra["expired_versions"])
        lines[0] += (
            f"; version(s) {versions} {'are' if applied else 'would'} no longer {'' if applied else 'be '}readable"
        )
    if extra.get("dropped_consumers"):
        lines.append(
            f"{'dropped' if applied else 'would drop'} consumer(s) unseen for longer than "
            f"changes.consumer-expiration: {', '.join(extra['dropped_consumers'])}"
        )
    lines += [f"  {p}" for p in paths]
    if not applied and paths:
        lines.append("(dry run: nothing was deleted; pass --apply to delete)")
    sys.stdout.write("\n".join(lines) + "\n")


@cli.command("expire")
@table_arg
@click.option(
    "--older-than",
    default="7d",
    show_default=True,
    help="Give up versions older than this (7d, 12h, 1h30m, 0).",
)
@apply_flag
@json_flag
@click.pass_obj
def expire_command(state: State, table: str, older_than: str, apply: bool, as_json: bool) -> None:
    """Give up time travel to old versions of TABLE and delete the files only they use (dry run unless --apply).

    The version current at the cutoff, tagged versions and the versions change-feed consumers still need
    stay readable; a consumer unseen for longer than changes.consumer-expiration that holds some back is
    dropped (reported).
    """
    age = _duration(older_than, "--older-than")
    t = state.table(table)
    before = t.history()
    tagged = set(t.tags().values())
    listed = t.inspect.consumers().to_pylist()
    paths = sorted(t.expire(older_than=age, dry_run=not apply))
    readable = [s for s in before if not s.expired]
    try:
        cutoff = dt.datetime.now(dt.UTC) - age
    except OverflowError:  # before year 1: no version is that old
        keep = None
    else:
        keep = max((s.version for s in readable if s.committed_at <= cutoff), default=None)
    now = dt.datetime.now(dt.UTC)
    live = [c for c in listed if c["dropped_at"] is None]
    # A consumer unseen too long that holds back versions before the cutoff is dropped; the others pin.
    dropping = [
        c
        for c in live
        if keep is not None
        and c["droppable_after"] is not None
        and c["droppable_after"] < now
        and c["position"] < keep
    ]
    if apply:
        after = {c["name"] for c in t.inspect.consumers().to_pylist() if c["dropped_at"] is not None}
        dropping = [c for c in live if c["name"] in after]
        was_readable = {r.version for r in readable}
        gone = [s.version for s in t.history() if s.expired and s.version in was_readable]
    else:
        pins = [c["position"] for c in live if c not in dropping]
        if keep is not None and pins:
            keep = min(keep, *pins)
        gone = [
            s.version for s in readable if keep is not None and s.version < keep and s.version not in tagged
        ]
    extra = {
        "older_than_seconds": age.total_seconds(),
        "expired_versions": gone,
        "dropped_consumers": [c["name"] for c in dropping],
    }
    _report(t.name, "expire", paths, apply, as_json, extra)


@cli.command("cleanup")
@table_arg
@click.option(
    "--older-than", default="1h", show_default=True, help="Only files older than this (1h, 30m, 0)."
)
@apply_flag
@json_flag
@click.pass_obj
def cleanup_command(state: State, table: str, older_than: str, apply: bool, as_json: bool) -> None:
    """Delete files mere wrote for TABLE that no version references, left by failed or killed writes (dry run
    unless --apply). Files mere did not write are never deleted."""
    age = _duration(older_than, "--older-than")
    t = state.table(table)
    paths = sorted(t.cleanup(older_than=age, dry_run=not apply))
    _report(t.name, "cleanup", paths, apply, as_json, {"older_than_seconds": age.total_seconds()})


# -- running ------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _known_secrets() -> list[str]:
    """Every secret the options, environment and config file hold, to hide in an error message."""
    if _STATE is None:
        return []
    if _STATE.settings is not None:
        return _STATE.settings.secrets()
    with contextlib.suppress(SettingsError, ValueError, OSError):
        return resolve(
            _STATE.warehouse or "-", _STATE.catalog, _STATE.storage_options, _STATE.config
        ).secrets()
    pairs = {}  # the settings do not resolve: at least the command line's own
    for item in _STATE.storage_options:
        with contextlib.suppress(SettingsError):
            pairs.update(parse_pairs([item], ""))
    return Settings(_STATE.warehouse or "", _STATE.catalog, pairs).secrets()


def _fail(message: str, code: int) -> int:
    try:
        secrets = _known_secrets()
    except Exception:  # the message must still go out (redact hides URL passwords without a list)
        secrets = []
    with contextlib.suppress(OSError, ValueError):  # stderr closed or broken
        sys.stderr.write(f"mere: error: {redact(_one_line(message), secrets)}\n")
        sys.stderr.flush()
    return code


def run(argv: list[str]) -> int:
    """Run the command line on ``argv``; returns the exit status (0 ok, 1 error, 2 bad usage)."""
    global _STATE
    _STATE = None
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and not _utf8(stream):
            # A Latin-1 or ASCII locale: characters it lacks print escaped instead of failing the command.
            stream.reconfigure(errors="backslashreplace")
    if not os.environ.get("MERE_DEBUG"):
        # Retries of object-store requests are logged as warnings: a failing command prints one error
        # line, not one line per retry.
        logging.getLogger("mere.io.retry").setLevel(logging.ERROR)
    try:
        result = cli.main(args=argv, prog_name="mere", standalone_mode=False)
    except click.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:  # a bare `mere` (click >= 8.2)
            sys.stdout.write(e.ctx.get_help() + "\n")
            return 0
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        return _fail(e.format_message() + hint, EXIT_USAGE)
    except click.ClickException as e:
        return _fail(e.format_message(), e.exit_code)
    except SystemExit as e:  # click exits 1 itself when the reader of stdout went away (EPIPE)
        return e.code if isinstance(e.code, int) else EXIT_ERROR
    except click.Abort:
        return _fail("aborted", 130)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except MereError as e:
        return _fail(str(e) or type(e).__name__, EXIT_ERROR)
    except OSError as e:
        return _fail(f"{e.strerror or e}" + (f": {e.filename}" if e.filename else ""), EXIT_ERROR)
    except pa.ArrowException as e:
        return _fail(f"cannot write the output: {e}", EXIT_ERROR)
    except Exception as e:
        if os.environ.get("MERE_DEBUG"):
            raise
        return _fail(f"internal error {type(e).__name__}: {e} (MERE_DEBUG=1 shows the traceback)", EXIT_ERROR)
    return result if isinstance(result, int) else 0
