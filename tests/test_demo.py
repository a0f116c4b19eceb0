"""The demo never deletes what it did not create (issue 30, item 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.demo import DEMO_TABLE, MARKER, SCHEMA, main, prepare_warehouse
from mere.errors import InvalidInput


def test_a_folder_with_a_user_file_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "mydata"
    folder.mkdir()
    (folder / "important.csv").write_text("a,b\n1,2\n")
    assert main([str(folder), "--batches", "1", "--rows", "10"]) == 2
    err = capsys.readouterr().err
    assert "not empty" in err and "Traceback" not in err and str(folder) in err
    assert err.count("\n") == 1  # one sentence
    assert sorted(os.listdir(folder)) == ["important.csv"]
    assert (folder / "important.csv").read_text() == "a,b\n1,2\n"


def test_a_foreign_mere_warehouse_is_refused(tmp_path: Path) -> None:
    # Even a warehouse holding a table of the demo's name: without the marker it is not the demo's.
    wh = tmp_path / "wh"
    cat = mere.connect(wh)
    t = cat.create_table(DEMO_TABLE, SCHEMA, primary_key=["order_id"])
    t.upsert(pa.table({"order_id": [1]}).cast(pa.schema([SCHEMA.field("order_id")])))
    before = sorted(p.relative_to(wh).as_posix() for p in wh.rglob("*"))
    with pytest.raises(InvalidInput, match="not a warehouse the demo made"):
        prepare_warehouse(str(wh))
    assert sorted(p.relative_to(wh).as_posix() for p in wh.rglob("*")) == before
    assert mere.connect(wh).table(DEMO_TABLE).scan().count() == 1


def test_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("keep")
    with pytest.raises(InvalidInput, match="is a file"):
        prepare_warehouse(str(f))
    assert f.read_text() == "keep"


@pytest.mark.parametrize("exists", [False, True])
def test_a_new_or_empty_folder_becomes_the_demos(tmp_path: Path, exists: bool) -> None:
    wh = tmp_path / "new"
    if exists:
        wh.mkdir()
    prepare_warehouse(str(wh))
    assert os.listdir(wh) == [MARKER]


def test_a_rerun_replaces_only_the_demos_table(tmp_path: Path) -> None:
    wh = tmp_path / "demo"
    prepare_warehouse(str(wh))
    cat = mere.connect(wh)
    cat.create_table(DEMO_TABLE, SCHEMA, primary_key=["order_id"]).upsert(
        pa.table({"order_id": [1, 2]}, schema=pa.schema([SCHEMA.field("order_id")]))
    )
    mine = cat.create_table("mine.kept", pa.schema([("x", pa.int64())]))
    mine.append(pa.table({"x": [7]}))
    (wh / "notes.txt").write_text("mine")
    prepare_warehouse(str(wh))  # a second run
    cat = mere.connect(wh)
    assert not cat.exists(DEMO_TABLE)
    assert cat.table("mine.kept").to_arrow().to_pydict() == {"x": [7]}
    assert (wh / "notes.txt").read_text() == "mine"
    assert (wh / MARKER).is_file()
    assert not any(p.suffix == ".parquet" for p in (wh / "sales").rglob("*"))


def test_make_demo_default_folder_is_the_ignored_demo_warehouse() -> None:
    # `make demo` runs `python -m mere.demo` with no argument: the folder is ./demo-warehouse, which
    # .gitignore keeps out of the repository.
    from mere import demo

    src = Path(demo.__file__).read_text()
    assert 'default="demo-warehouse"' in src
    root = Path(__file__).resolve().parents[1]
    assert "/demo-warehouse/" in (root / ".gitignore").read_text().splitlines()
    assert "$(PY) -m mere.demo\n" in (root / "Makefile").read_text()


@pytest.mark.slow
def test_the_demo_reruns_in_its_folder_and_keeps_what_the_user_added(tmp_path: Path) -> None:
    """The real demo (Spark), run in a folder an earlier run left (its marker and table), where the user
    has since put a file and a table of their own: it replaces only its table. A first run differs only in
    ``prepare_warehouse``, which the tests above cover; one Spark run here instead of two saves a minute."""
    pytest.importorskip("pyspark")
    wh = tmp_path / "demo-warehouse"
    prepare_warehouse(str(wh))
    earlier = mere.connect(wh).create_table(DEMO_TABLE, SCHEMA, primary_key=["order_id"])
    earlier.upsert(pa.table({"order_id": [10**9]}, schema=pa.schema([SCHEMA.field("order_id")])))
    mere.connect(wh).create_table("mine.kept", pa.schema([("x", pa.int64())])).append(pa.table({"x": [7]}))
    (wh / "notes.txt").write_text("mine")
    env = {**os.environ, "PYTHONPATH": str(Path(mere.__file__).parents[1])}
    cmd = [sys.executable, "-m", "mere.demo", str(wh), "--batches", "1", "--rows", "100"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "RESULT: OK" in run.stdout
    assert (wh / "notes.txt").read_text() == "mine"
    cat = mere.connect(wh)
    assert cat.table("mine.kept").to_arrow().to_pydict() == {"x": [7]}
    demo = cat.table(DEMO_TABLE)
    assert demo.version == 1  # the table of this run only
    assert 10**9 not in demo.scan().to_arrow().column("order_id").to_pylist()
