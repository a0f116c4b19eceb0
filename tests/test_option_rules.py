"""One rule per kind of option value (:mod:`mere.options`), whatever the entry point: the same text is
accepted with the same meaning, or refused with InvalidInput, by the command line, the Python API (and its
storage options) and the Spark data source's options.

The Spark checks plan reads without a SparkSession (the data source's schema and reader run in the
planning process): no JVM starts here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import mere
from mere.cli import app as cli_app
from mere.errors import InvalidInput, NoSuchVersion
from mere.io.options import resolve_options
from mere.io.s3 import parse_settings
from mere.options import (
    BYTE_UNITS,
    FALSE_WORDS,
    TRUE_WORDS,
    format_columns,
    parse_as_of,
    parse_bool,
    parse_bytes,
    parse_columns,
)

REFUSED = ("refused",)


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """("ok", value) or REFUSED (InvalidInput); any other error fails the test."""
    try:
        return ("ok", call())
    except InvalidInput:
        return REFUSED


def cli(*args: str) -> tuple[int, str, str]:
    raw, err = io.BytesIO(), io.StringIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_app.run(list(args))
    out.flush()
    return rc, raw.getvalue().decode(), err.getvalue()


def spark_options() -> Any:
    pytest.importorskip("pyspark", reason="pip install 'mere[spark]'")
    from mere.integrations.spark import options

    return options


# -- storage options through the Python API and the command line ----------------------------------------


def python_api_storage(tmp: Path, key: str, value: str) -> tuple[Any, ...]:
    """Whether ``mere.connect`` takes the storage option (an S3 warehouse with a local catalog: no request)."""
    try:
        mere.connect("s3://bucket/wh", catalog=f"sqlite:///{tmp / 'c.db'}", storage_options={key: value})
    except InvalidInput as e:
        assert f"storage option {key!r}" in str(e), e
        return REFUSED
    return ("ok",)


def cli_storage(tmp: Path, key: str, value: str) -> tuple[Any, ...]:
    """Whether ``mere --storage-option key=value`` takes it (its later failure, without tables, is not about
    the option)."""
    rc, _, err = cli(
        "-w", "s3://bucket/wh", "--catalog", f"sqlite:///{tmp / 'c.db'}", "--storage-option", f"{key}={value}", "tables"
    )  # fmt: skip
    if f"storage option {key!r}" in err:
        assert rc == 1, err
        return REFUSED
    return ("ok",)


def storage_value(key: str, value: str) -> tuple[Any, ...]:
    """The storage option as the S3 layer reads it (every storage option, whoever gave it, ends here)."""
    attribute = {"anonymous": "anonymous", "coalesce_bytes": "coalesce_bytes"}[key]
    return outcome(lambda: getattr(parse_settings(resolve_options({key: value}, environ={})), attribute))


# -- booleans ----------------------------------------------------------------------------------------------

BOOL_WORDS = [*TRUE_WORDS, *FALSE_WORDS, "", " ", "maybe", "2", "-1", "tru", "yess", "none", "1.0", "enable"]
bool_texts = st.one_of(
    st.tuples(st.sampled_from(BOOL_WORDS), st.booleans(), st.sampled_from(["", " ", "\t"])).map(
        lambda t: t[2] + (t[0].upper() if t[1] else t[0]) + t[2]
    ),
    st.text(max_size=5),
)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local table ``r.t`` with columns named as column lists make hard, at versions 1..3 (version k
    holds k rows), committed some milliseconds apart."""
    wh = str(tmp_path_factory.mktemp("rules") / "wh")
    schema = pa.schema([("id", pa.int64()), ("a,b", pa.string()), ('q"x', pa.int64()), ("qty", pa.int64())])
    t = mere.connect(wh).create_table("r.t", schema, primary_key="id")
    for i in range(1, 4):
        time.sleep(0.05)
        t.upsert(pa.table({"id": [i], "a,b": ["v"], 'q"x': [i], "qty": [i]}))
        time.sleep(0.05)
    yield wh


@given(text=bool_texts)
@example(text="")
@example(text=" Yes ")
@example(text="maybe")
def test_a_boolean_reads_alike_everywhere(
    text: str, lake: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("bool")
    rule = outcome(lambda: parse_bool(text, "x"))
    assert rule == storage_value("anonymous", text)  # storage_options, --storage-option, the environment
    assert python_api_storage(tmp, "anonymous", text) == cli_storage(tmp, "anonymous", text) == rule[:1]
    spark = spark_options()
    assert outcome(lambda: spark.bool_option("pushdown", text)) == rule
    from mere.integrations.spark import MereDataSource

    source = MereDataSource({"warehouse": lake, "table": "r.t", "readChangeFeed": text})
    feed = outcome(lambda: "_change" in source.schema().fieldNames())
    assert feed == rule
    if text.strip() == "":
        assert rule == ("ok", False)  # blank: not given, the default


# -- byte sizes --------------------------------------------------------------------------------------------

UNITS = [*BYTE_UNITS, "t", "tb", "kk", "bytes", "x", "m b"]
size_texts = st.one_of(
    st.tuples(st.integers(0, 5000), st.sampled_from(["", " "]), st.sampled_from(UNITS), st.booleans()).map(
        lambda t: f"{t[0]}{t[1]}{t[2].upper() if t[3] else t[2]}"
    ),
    st.text(alphabet="0123456789kmgibKMGIB -.", max_size=6),
)


@given(text=size_texts)
@example(text="")
@example(text="128m")
@example(text="1 MiB")
@example(text="-5m")
def test_a_byte_size_reads_alike_everywhere(text: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("bytes")
    rule = outcome(lambda: parse_bytes(text, "x"))
    stored = storage_value("coalesce_bytes", text)
    spark = spark_options()
    opened = outcome(lambda: spark.PartitionSizing.from_options({"open_cost_bytes": text}).open_cost)
    assert (
        python_api_storage(tmp, "coalesce_bytes", text)
        == cli_storage(tmp, "coalesce_bytes", text)
        == rule[:1]
    )
    assert stored[:1] == opened[:1] == rule[:1]
    if rule == ("ok", None):  # blank: not given, each option's default
        assert stored == ("ok", 1 << 20) and opened == ("ok", 4 << 20)
    elif rule != REFUSED:
        assert stored == opened == rule and outcome(lambda: spark.size_option("o", text, minimum=0)) == rule


def test_byte_size_units_are_binary_in_any_spelling() -> None:
    for text in ("134217728", "131072k", "131072 KiB", "128m", "128MB", "128 mib"):
        assert parse_bytes(text, "x") == 128 << 20
    assert parse_bytes("1g", "x") == parse_bytes("1GiB", "x") == 1 << 30
    with pytest.raises(InvalidInput, match="at least 1"):
        parse_bytes("0", "option 'max_partition_bytes'", minimum=1)


# -- column lists ------------------------------------------------------------------------------------------

names = st.text(alphabet='ab ,"', min_size=1, max_size=4).map(str.strip).filter(bool)


@given(st.lists(names, min_size=1, max_size=4))
def test_column_lists_round_trip_with_commas_and_quotes(columns: list[str]) -> None:
    text = format_columns(columns)
    assert parse_columns(text) == columns
    assert cli_app._columns(text) == columns
    assert spark_options().column_list_option("columns", text) == columns


@given(text=st.text(alphabet='ab ,"', max_size=8))
@example(text="a,,b")
@example(text='"a,b')
@example(text=" ")
def test_a_column_list_reads_alike_everywhere(text: str) -> None:
    import click

    rule = outcome(lambda: parse_columns(text, "x"))
    try:
        given_cli: tuple[Any, ...] = ("ok", cli_app._columns(text))
    except click.BadParameter:
        given_cli = REFUSED
    assert given_cli == rule == outcome(lambda: spark_options().column_list_option("columns", text))


def test_column_lists_end_to_end(lake: str) -> None:
    rc, out, err = cli("-w", lake, "head", "r.t", "--columns", 'id , "a,b" ', "--json")
    assert rc == 0 and list(json.loads(out.splitlines()[0])) == ["id", "a,b"], err
    from mere.integrations.spark import MereDataSource

    spark_options()
    source = MereDataSource({"warehouse": lake, "table": "r.t", "columns": 'id , "a,b" ,"q""x"'})
    assert source.schema().fieldNames() == ["id", "a,b", 'q"x']
    for bad in ("id,,qty", '"a,b'):
        rc, _, err = cli("-w", lake, "head", "r.t", "--columns", bad)
        assert rc == 2 and "is not a comma-separated list of column names" in err
        with pytest.raises(InvalidInput, match="is not a comma-separated list of column names"):
            MereDataSource({"warehouse": lake, "table": "r.t", "columns": bad}).schema()


# -- as_of ---------------------------------------------------------------------------------------------------


def _commit_times(lake: str) -> list[float]:
    t = mere.connect(lake).table("r.t")
    return [t.snapshot(version=v).committed_at.timestamp() for v in range(1, 4)]


def _as_of_texts(seconds: float, style: int) -> str:
    when = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return [
        f"{seconds:.6f}",
        f"{int(seconds)}" if seconds == int(seconds) else f"{seconds:.3f}",
        f"{seconds:.12e}",
        when.isoformat(),
        when.astimezone(dt.timezone(dt.timedelta(hours=-8))).isoformat(),
        when.isoformat().replace("+00:00", "Z"),
        f"  {seconds:.6f} ",
    ][style]


def _versions_read(lake: str, text: str) -> set[tuple[Any, ...]]:
    """What each entry point reads at ``as_of=text``: ("version", n), REFUSED or ("no such version",)."""

    def python_api() -> tuple[Any, ...]:
        try:
            return ("version", mere.connect(lake).table("r.t").scan(as_of=text).to_arrow().num_rows)
        except InvalidInput:
            return REFUSED
        except NoSuchVersion:
            return ("no such version",)

    def command_line() -> tuple[Any, ...]:
        rc, out, err = cli("-w", lake, "scan", "r.t", "--as-of", text, "--json")
        if rc == 0:
            return ("version", len(out.splitlines()))
        return REFUSED if "as_of must be" in err else ("no such version",)

    def spark() -> tuple[Any, ...]:
        options = spark_options()
        from mere.integrations.spark import MereDataSource, MereReader

        given = {"warehouse": lake, "table": "r.t", "as_of": text}
        try:
            reader = MereReader(options.TableRef.from_options(given), given, MereDataSource(given).schema())
        except InvalidInput:
            return REFUSED
        except NoSuchVersion:
            return ("no such version",)
        return ("version", reader.version)

    return {python_api(), command_line(), spark()}


@given(
    point=st.sampled_from([-1.0, 0.5, 1.5, 2.5, 10.0]),
    style=st.integers(0, 6),
    garbage=st.sampled_from(["", "soon", "1_000", "nan", "2026-13-01", "12:00"]),
)
def test_as_of_reads_alike_everywhere(lake: str, point: float, style: int, garbage: str) -> None:
    times = _commit_times(lake)
    # A point between commits (or before the first, or well after the last), far from any commit time.
    seconds = times[0] - 60 if point < 0 else times[min(int(point), 2)] + (0.02 if point < 10 else 60)
    seen = _versions_read(lake, _as_of_texts(round(seconds, 3), style))
    assert len(seen) == 1, seen
    assert _versions_read(lake, garbage) == {REFUSED}


def test_as_of_text_of_a_number_is_epoch_seconds() -> None:
    assert parse_as_of("1700000000") == parse_as_of(1_700_000_000) == parse_as_of(" 1.7e9 ")
    assert parse_as_of("1700000000").tzinfo is dt.UTC
    assert parse_as_of("2026-11-21T08:00:00").tzinfo is None  # the caller names the zone
    for bad in ("", "nan", "inf", "1_000", "soon", True):
        with pytest.raises(InvalidInput, match="as_of must be"):
            parse_as_of(bad)
