"""A time without a zone in ``as_of`` (issue 30, item 10).

mere's Python API reads it as UTC, and every function that takes ``as_of`` says so (only an error message
did); Spark reads it in the session time zone (tests/integrations/spark/test_spark_as_of_zone.py).
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.errors import NoSuchVersion

MODULES = [
    "mere.table.table",
    "mere.table.scan",
    "mere.table.catalog",
    "mere.table.transaction",
    "mere.integrations.spark",
    "mere.integrations.spark_streaming",
    "mere.integrations.polars",
    "mere.integrations.duckdb",
    "mere.integrations.dask",
    "mere.integrations.ray",
    "mere.integrations.torch",
]


def _callables_taking_as_of() -> Iterator[tuple[str, Any]]:
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if getattr(value, "__module__", None) != name or attr.startswith("_"):
                continue
            members = [(attr, value)]
            if inspect.isclass(value):
                members += [
                    (f"{attr}.{k}", v)
                    for k, v in vars(value).items()
                    if callable(v) and not k.startswith("_")
                ]
                members += [(f"{attr}.__init__", value.__init__)] if "__init__" in vars(value) else []
            for label, fn in members:
                try:
                    params = inspect.signature(fn).parameters
                except (TypeError, ValueError):
                    continue
                if "as_of" in params:
                    yield f"{name}.{label}", (value if label.endswith("__init__") else fn)


def test_every_function_taking_as_of_says_how_a_time_without_a_zone_is_read() -> None:
    found = dict(_callables_taking_as_of())
    assert {"mere.table.table.Table.scan", "mere.table.table.Table.resolve_version"} <= set(found)
    assert "mere.integrations.spark.read_table" in found and "mere.integrations.polars.scan_table" in found
    missing = []
    for label, fn in found.items():
        doc = inspect.getdoc(fn) or ""
        wanted = (
            "session time zone" if label.startswith("mere.integrations.spark") else "UTC, not as local time"
        )
        if wanted not in " ".join(doc.split()):
            missing.append(label)
    assert not missing, f"these take as_of but do not say how a time without a zone is read: {missing}"


def test_the_cli_help_says_it(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mere.cli.app import cli

    for command in ("scan", "head", "explain"):
        out = CliRunner().invoke(cli, ["-w", str(tmp_path), command, "--help"], terminal_width=200)
        assert "without a zone is UTC, not local time" in " ".join(out.output.split()), out.output


def test_a_naive_time_is_utc_whatever_the_local_zone(tmp_path: Path) -> None:
    """What the documentation says, under a local zone west of UTC (a subprocess with TZ set)."""
    code = f"""
import datetime as dt, pyarrow as pa, mere
from mere.errors import NoSuchVersion
t = mere.connect({str(tmp_path / "wh")!r}).create_table("z.t", pa.schema([("id", pa.int64())]), primary_key="id")
t.upsert(pa.table({{"id": [1]}}))
now_utc = dt.datetime.now(dt.timezone.utc)
assert t.resolve_version(as_of=now_utc.replace(tzinfo=None)) == 1          # naive = UTC
assert t.resolve_version(as_of=now_utc.replace(tzinfo=None).isoformat()) == 1
try:
    t.to_arrow(as_of=dt.datetime.now())   # local wall time, 7-8 hours behind UTC: before the table existed
except NoSuchVersion:
    pass
else:
    raise AssertionError("datetime.now() in Los Angeles is hours before the commit, read as UTC")
print("ok")
"""
    env = {**os.environ, "TZ": "America/Los_Angeles", "PYTHONPATH": str(Path(mere.__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_naive_and_utc_name_the_same_version(tmp_path: Path) -> None:
    t = mere.connect(tmp_path / "wh").create_table("z.t", pa.schema([("id", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1]}))
    at = t.snapshot().committed_at
    assert t.resolve_version(as_of=at) == t.resolve_version(as_of=at.replace(tzinfo=None)) == 1
    with pytest.raises(NoSuchVersion):
        t.resolve_version(as_of=(at - dt.timedelta(hours=1)).replace(tzinfo=None))
