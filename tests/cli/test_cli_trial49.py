"""Adversarial trial of the ``mere`` command line (as a user runs it: subprocesses) and of README/docs claims.

Every CLI output is compared with the Python API's answer on the same warehouse (the oracle), and every
refused command is checked to leave the warehouse as it was (history, tags, consumers, files on disk).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import mere
from mere import errors

pytest.importorskip("click")
pytest.importorskip("rich")

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("day", pa.string()),
        ("qty", pa.int64()),
        ("note", pa.string()),
        ("x", pa.float64()),
    ]
)
NOTES = ["plain", 'a, "quoted"', None, "multi\nline", "ünï", "", "tab\there"]


@dataclass
class Result:
    rc: int
    out: str
    err: str


def env_for(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERE_")}
    env["XDG_CONFIG_HOME"] = str(tmp / "no-config")
    env.pop("COLUMNS", None)
    return env


def cli(args: Sequence[str], env: dict[str, str]) -> Result:
    p = subprocess.run(
        [sys.executable, "-m", "mere.cli", *args], env=env, capture_output=True, text=True, timeout=180
    )
    return Result(p.returncode, p.stdout, p.stderr)


def cli_all(calls: Sequence[Sequence[str]], env: dict[str, str]) -> list[Result]:
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda a: cli(a, env), calls))


def ok(r: Result, call: Any = None) -> Result:
    assert r.rc == 0 and "Traceback" not in r.err, (call, r)
    return r


def user_error(r: Result, rc: int, *words: str) -> None:
    """One ``mere: error:`` line naming the problem, exit ``rc``, no traceback, nothing on stdout."""
    assert r.rc == rc, r
    assert "Traceback" not in r.err and "internal error" not in r.err, r
    assert r.err.startswith("mere: error: ") and r.err.count("\n") == 1, r
    assert r.out == "", r
    for w in words:
        assert w.lower() in r.err.lower(), (w, r)


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def files_on_disk(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith("catalog.db")
    }


def fingerprint(wh: Path, name: str, catalog: str | None = None) -> Any:
    """What a refused command must not change: history, tags, consumers, properties, files."""
    t = mere.connect(wh, catalog).table(name)
    hist = [(s.version, s.operation, s.expired) for s in t.history()]
    cons = [(c["name"], c["position"], c["dropped_at"]) for c in t.inspect.consumers().to_pylist()]
    return hist, t.tags(), cons, dict(t.properties), files_on_disk(wh)


def build(wh: Path, catalog: str | None = None) -> mere.Table:
    cat = mere.connect(wh, catalog)
    t = cat.create_table(
        "sales.orders",
        SCHEMA,
        primary_key="id",
        partition_by="day",
        buckets=3,
        properties={"compaction.auto": "off", "retention.max-age": "off"},
    )
    t.upsert(
        pa.table(
            {
                "id": list(range(1, 8)),
                "day": ["d1", "d1", "d2", "d2", "d3", "d3", "d1"],
                "qty": [1, 2, 3, 4, 5, 6, 7],
                "note": NOTES,
                "x": [0.5, float("nan"), -0.0, 1e300, None, 2.25, -1.5],
            },
            schema=SCHEMA,
        )
    )  # v1
    t.upsert(pa.table({"id": [2, 8], "day": ["d1", "d2"], "qty": [20, 80]}))  # v2: partial rows
    t.delete("id = 3")  # v3
    t.update(set={"note": "upper(note)"}, where="qty > 4")  # v4
    cat.create_table("events", pa.schema([("e", pa.int32())])).append(pa.table({"e": [1, 2]}))
    return t


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trial49") / "wh"
    build(root)
    return root


def nan_free(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with float NaN as the string 'NaN' (NaN != NaN in Python)."""
    return [{k: "NaN" if isinstance(v, float) and v != v else v for k, v in r.items()} for r in rows]


def api_rows(t: mere.Table, **scan: Any) -> list[dict[str, Any]]:
    return nan_free(by_id(t.scan(**scan).to_arrow().to_pylist()))


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line]


def same_json_row(cli_row: dict[str, Any], api_row: dict[str, Any]) -> bool:
    for k, v in api_row.items():
        c = cli_row[k]
        if isinstance(v, float) and v != v:
            if c != "NaN":
                return False
        elif hasattr(v, "isoformat"):
            if c != v.isoformat():
                return False
        elif c != v:
            return False
    return set(cli_row) == set(api_row)


# -- reads equal the API's ------------------------------------------------------------------------


READS = [
    {},
    {"filter": "qty > 3"},
    {"filter": "day = 'd1' and note is not null"},
    {"filter": "id in (1, 2, 3, 8)", "columns": "id,qty"},
    {"version": 1},
    {"version": 2, "filter": "x > 0 or note like '%e%'", "columns": "note,id,x"},
]


def scan_args(read: dict[str, Any]) -> list[str]:
    out = []
    for k, v in read.items():
        out += [f"--{k}", str(v)]
    return out


def api_scan_kwargs(read: dict[str, Any]) -> dict[str, Any]:
    kw = dict(read)
    if "columns" in kw:
        kw["columns"] = kw["columns"].split(",")
    return kw


def test_scan_in_every_format_equals_the_api(wh: Path, tmp_path: Path) -> None:
    t = mere.connect(wh).table("sales.orders")
    w = ["-w", str(wh)]
    calls: list[list[str]] = []
    for i, read in enumerate(READS):
        a = [*w, "scan", "sales.orders", *scan_args(read)]
        calls += [
            [*a, "--json"],
            [*a, "--output", str(tmp_path / f"r{i}.parquet")],
            [*a, "--format", "csv", "--output", str(tmp_path / f"r{i}.csv")],
        ]
    results = cli_all(calls, env_for(tmp_path))
    for i, read in enumerate(READS):
        j, p, c = results[3 * i : 3 * i + 3]
        for r in (j, p, c):
            ok(r, read)
        want_table = t.scan(**api_scan_kwargs(read)).to_arrow()
        want = by_id(want_table.to_pylist())
        got_pq = pq.read_table(tmp_path / f"r{i}.parquet")
        assert got_pq.schema == want_table.schema, read
        assert by_id(got_pq.to_pylist()) == want or (
            # NaN != NaN in Python: compare with NaN taken out
            json.dumps(by_id(got_pq.to_pylist()), default=str) == json.dumps(want, default=str)
        ), read
        got_json = by_id(jsonl(j.out))
        assert len(got_json) == len(want) and all(same_json_row(a, b) for a, b in zip(got_json, want)), read
        got_csv = pacsv.read_csv(
            tmp_path / f"r{i}.csv",
            convert_options=pacsv.ConvertOptions(
                column_types=want_table.schema, strings_can_be_null=True, quoted_strings_can_be_null=False
            ),
        )
        assert got_csv.num_rows == len(want), read
        assert [r["id"] for r in by_id(got_csv.to_pylist())] == [r["id"] for r in want]
        if "note" in want_table.schema.names:
            assert [r["note"] for r in by_id(got_csv.to_pylist())] == [r["note"] for r in want], read


def test_head_limit_and_as_of_and_tag_reads(wh: Path, tmp_path: Path) -> None:
    t = mere.connect(wh).table("sales.orders")
    all_rows = api_rows(t)
    v2 = t.snapshot(version=2)
    w = ["-w", str(wh)]
    calls = [
        [*w, "head", "sales.orders", "--json"],
        [*w, "head", "sales.orders", "-n", "3", "--json"],
        [*w, "scan", "sales.orders", "--limit", "0", "--format", "csv"],
        [*w, "scan", "sales.orders", "--as-of", v2.committed_at.isoformat(), "--json"],
        [*w, "scan", "sales.orders", "--as-of", str(v2.committed_at.timestamp()), "--json"],
        [*w, "head", "events", "--json"],
    ]
    head10, head3, empty, asof_iso, asof_epoch, events = (ok(r) for r in cli_all(calls, env_for(tmp_path)))
    rows10, rows3 = jsonl(head10.out), jsonl(head3.out)
    assert len(rows10) == min(10, len(all_rows)) and len(rows3) == 3
    ids = [r["id"] for r in all_rows]
    assert sorted(r["id"] for r in rows10) == ids
    assert all(r["id"] in ids for r in rows3)
    assert empty.out.strip() == '"id","day","qty","note","x"'
    want = [r["id"] for r in api_rows(t, version=2)]
    assert [r["id"] for r in by_id(jsonl(asof_iso.out))] == want
    assert [r["id"] for r in by_id(jsonl(asof_epoch.out))] == want
    assert sorted(r["e"] for r in jsonl(events.out)) == [1, 2]


def test_history_changes_explain_describe_equal_the_api(wh: Path, tmp_path: Path) -> None:
    t = mere.connect(wh).table("sales.orders")
    w = ["-w", str(wh)]
    calls = [
        [*w, "history", "sales.orders", "--json"],
        [*w, "history", "sales.orders", "-n", "2", "--json"],
        [*w, "changes", "sales.orders", "--from", "1", "--json"],
        [*w, "changes", "sales.orders", "--from", "0", "--to", "2", "--columns", "qty", "--json"],
        [*w, "changes", "sales.orders", "--from", "1", "--filter", "qty > 4", "--json"],
        [*w, "explain", "sales.orders", "--filter", "id = 2 and qty > 1", "--json"],
        [*w, "explain", "sales.orders", "--filter", "day = 'd1'", "--version", "1", "--json"],
        [*w, "describe", "sales.orders", "--json"],
        [*w, "describe", "sales.orders", "--version", "1", "--json"],
        [*w, "tables", "--json"],
        [*w, "tables", "sales", "--json"],
    ]
    res = [ok(r, c) for r, c in zip(cli_all(calls, env_for(tmp_path)), calls)]
    hist, hist2, ch1, ch02, chdel, ex1, ex2, desc, desc1, tabs, tabs_ns = (
        json.loads(r.out) if i < 2 or i > 4 else jsonl(r.out) for i, r in enumerate(res)
    )

    api_hist = t.history()
    assert [h["version"] for h in hist] == [s.version for s in api_hist]
    assert [h["operation"] for h in hist] == [s.operation for s in api_hist]
    assert [h["committed_at"] for h in hist] == [s.committed_at.isoformat() for s in api_hist]
    assert [h["summary"] for h in hist] == [
        json.loads(json.dumps(dict(s.summary), default=str)) for s in api_hist
    ]
    assert hist2 == hist[-2:]

    def api_changes(*a: Any, **k: Any) -> list[dict[str, Any]]:
        return sorted(t.changes(*a, **k).read_all().to_pylist(), key=lambda r: (r["id"], r["_change"]))

    for got, want in (
        (ch1, api_changes(1)),
        (ch02, api_changes(0, 2, columns=["qty"])),
        (chdel, api_changes(1, filter="qty > 4")),
    ):
        got = sorted(got, key=lambda r: (r["id"], r["_change"]))
        assert len(got) == len(want)
        assert all(same_json_row(a, b) for a, b in zip(got, want)), (got, want)
    assert chdel and all(r["qty"] > 4 for r in chdel)

    import dataclasses

    for got, kw in ((ex1, {"filter": "id = 2 and qty > 1"}), (ex2, {"filter": "day = 'd1'", "version": 1})):
        want = json.loads(json.dumps(dataclasses.asdict(t.scan(**kw).explain()), default=str))
        assert got == want

    assert desc["version"] == t.version and desc1["version"] == 1
    assert [c["name"] for c in desc["columns"]] == SCHEMA.names
    assert desc["properties"] == dict(t.properties)
    assert desc["files"]["count"] == t.inspect.files().num_rows
    assert tabs == sorted(mere.connect(wh).tables()) == ["default.events", "sales.orders"]
    assert tabs_ns == ["sales.orders"]


# -- user errors ----------------------------------------------------------------------------------

ERRORS: list[tuple[list[str], int, tuple[str, ...]]] = [
    (["scan", "nope.table"], 1, ("nope.table", "does not exist")),
    (["scan", "sales.nope", "--json"], 1, ("sales.nope",)),
    (["scan", "sales.orders", "--version", "99"], 1, ("99",)),
    (["scan", "sales.orders", "--version", "-1"], 2, ("--version",)),
    (["scan", "sales.orders", "--version", "two"], 2, ("--version",)),
    (["scan", "sales.orders", "--tag", "ghost"], 1, ("ghost",)),
    (["scan", "sales.orders", "--filter", "qty >"], 1, ("filter",)),
    (["scan", "sales.orders", "--filter", "nocol = 1"], 1, ("nocol",)),
    (["scan", "sales.orders", "--filter", "qty = 'abc'"], 1, ("qty",)),
    (["scan", "sales.orders", "--columns", "id,nocol"], 1, ("nocol",)),
    (["scan", "sales.orders", "--columns", "id,id"], 1, ("id",)),
    (["scan", "sales.orders", "--format", "xml"], 2, ("xml",)),
    (["scan", "sales.orders", "--json", "--format", "csv"], 2, ("--json", "csv")),
    (["scan", "sales.orders", "--format", "parquet"], 2, ("--output",)),
    (["scan", "sales.orders", "--output", "rows.txt"], 2, ("rows.txt",)),
    (["head", "sales.orders", "-n", "-2"], 2, ("--limit",)),
    (["explain", "sales.orders", "--filter", "(("], 1, ("filter",)),
    (["describe", "sales.orders", "--version", "42"], 1, ("42",)),
    (["history", "default.nope"], 1, ("default.nope",)),
    (["history", "sales.orders", "-n", "0"], 2, ("--limit",)),
    (["changes", "sales.orders"], 2, ("--from", "--consumer")),
    (["changes", "sales.orders", "--from", "3", "--to", "1"], 1, ("3", "1")),
    (["changes", "sales.orders", "--from", "0", "--to", "77"], 1, ("77",)),
    (["changes", "sales.orders", "--from", "0", "--commit"], 2, ("--consumer",)),
    (["changes", "sales.orders", "--consumer", "ghost"], 1, ("ghost",)),
    (["tags", "nope"], 1, ("nope",)),
    (["consumers", "nope"], 1, ("nope",)),
    (["bogus-command"], 2, ("bogus-command",)),
    (["scan"], 2, ("TABLE",)),
]


def test_user_errors_exit_with_one_line_and_change_nothing(wh: Path, tmp_path: Path) -> None:
    before = fingerprint(wh, "sales.orders")
    w = ["-w", str(wh)]
    calls = [[*w, *args] for args, _, _ in ERRORS]
    for (_args, rc, words), r in zip(ERRORS, cli_all(calls, env_for(tmp_path))):
        user_error(r, rc, *words)
    assert fingerprint(wh, "sales.orders") == before


def test_missing_or_wrong_warehouse_fails_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo-wh"
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    env = env_for(tmp_path)
    calls = [
        ["-w", str(missing), "tables"],
        ["-w", str(missing), "scan", "sales.orders"],
        ["-w", str(missing), "describe", "t"],
        ["-w", str(missing), "expire", "t", "--apply"],
        ["-w", str(a_file), "tables"],
        ["tables"],
        ["-w", "", "tables"],
        ["-w", str(missing), "--config", str(tmp_path / "none.toml"), "tables"],
        ["-w", str(missing), "-o", "novalue", "tables"],
    ]
    r = cli_all(calls, env)
    user_error(r[0], 1, "no mere catalog")
    for x in r[1:4]:
        user_error(x, 1, "does not exist")
    user_error(r[4], 1, "file")
    user_error(r[5], 2, "warehouse")
    user_error(r[6], 2, "--warehouse")
    user_error(r[7], 2, "none.toml")
    user_error(r[8], 2, "--storage-option")
    assert not missing.exists()  # "Reads never create anything: a wrong warehouse or table name fails."


def test_refused_maintenance_commands_change_nothing(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = build(wh)
    t.tag("keep", 1)
    t.consumer("etl", start_version=2)
    before = fingerprint(wh, "sales.orders")
    w = ["-w", str(wh)]
    cases: list[tuple[list[str], int, tuple[str, ...]]] = [
        (["rollback", "sales.orders", "99"], 1, ("99",)),
        (["rollback", "sales.orders"], 2, ("VERSION", "--tag")),
        (["rollback", "sales.orders", "1", "--tag", "keep"], 2, ("--tag",)),
        (["rollback", "sales.orders", "--tag", "ghost"], 1, ("ghost",)),
        (["tag", "sales.orders", "keep", "--version", "2"], 1, ("keep", "--replace")),
        (["tag", "sales.orders", "new", "--version", "99"], 1, ("99",)),
        (["tag", "sales.orders", "bad name!"], 1, ("tag",)),
        (["untag", "sales.orders", "ghost"], 1, ("ghost",)),
        (["compact", "sales.orders", "--partition", "nocol=1"], 1, ("nocol",)),
        (["compact", "sales.orders", "--partition", "day"], 2, ("--partition",)),
        (["compact", "sales.orders", "--partition", "day=d1", "--partition", "day=d2"], 2, ("day",)),
        (["compact", "sales.orders", "--auto", "--min-files", "3"], 2, ("--auto", "--min-files")),
        (["compact", "sales.orders", "--min-files", "0"], 2, ("--min-files",)),
        (["expire", "sales.orders", "--older-than", "soon", "--apply"], 2, ("--older-than",)),
        (["expire", "sales.orders", "--older-than", "-1d", "--apply"], 2, ("--older-than",)),
        (["cleanup", "sales.orders", "--older-than", "1y", "--apply"], 2, ("--older-than",)),
        (["consumer", "create", "sales.orders", "c2", "--version", "99"], 1, ("99",)),
        (["consumer", "drop", "sales.orders", "ghost"], 1, ("ghost",)),
        (["changes", "sales.orders", "--consumer", "etl", "--commit", "--limit", "1"], 2, ("--limit",)),
        (["changes", "sales.orders", "--consumer", "etl", "--commit", "--filter", "nocol > 1"], 1, ("nocol",)),
        (["changes", "sales.orders", "--consumer", "etl", "--commit", "-o", str(tmp_path / "no/dir/f.csv")], 1, ("f.csv",)),
        (["changes", "sales.orders", "--consumer", "etl", "--commit", "--format", "parquet"], 2, ("--output",)),
        (["expire", "nope", "--apply"], 1, ("nope",)),
        (["cleanup", "nope", "--apply"], 1, ("nope",)),
        (["compact", "nope"], 1, ("nope",)),
    ]  # fmt: skip
    calls = [[*w, *args] for args, _, _ in cases]
    for (_args, rc, words), r in zip(cases, cli_all(calls, env_for(tmp_path))):
        user_error(r, rc, *words)
    assert fingerprint(wh, "sales.orders") == before
    assert not (tmp_path / "no").exists()


def test_conflicting_read_options_are_bad_usage(wh: Path, tmp_path: Path) -> None:
    w = ["-w", str(wh)]
    calls = [
        [*w, "scan", "sales.orders", "--version", "1", "--tag", "t"],
        [*w, "scan", "sales.orders", "--version", "1", "--as-of", "2030-01-01"],
    ]
    for r in cli_all(calls, env_for(tmp_path)):
        user_error(r, 2, "version")


# -- outputs ------------------------------------------------------------------------------------


def test_output_file_replaced_only_when_complete(wh: Path, tmp_path: Path) -> None:
    t = mere.connect(wh).table("sales.orders")
    existing = tmp_path / "old.csv"
    existing.write_text("old contents\n")
    fresh = tmp_path / "fresh.jsonl"
    a_dir = tmp_path / "adir"
    a_dir.mkdir()
    w = ["-w", str(wh)]
    calls = [
        # fails while reading: a runtime cast error after the output was opened
        [*w, "scan", "sales.orders", "--filter", "cast(note as bigint) > 1", "-o", str(existing)],
        [*w, "scan", "sales.orders", "--filter", "cast(note as bigint) > 1", "-o", str(fresh)],
        [*w, "scan", "sales.orders", "--format", "csv", "-o", str(a_dir)],
        [*w, "scan", "sales.orders", "--filter", "qty > 4", "-o", str(tmp_path / "new.parquet")],
    ]
    r = cli_all(calls, env_for(tmp_path))
    user_error(r[0], 1, "filter")
    user_error(r[1], 1, "filter")
    user_error(r[2], 2, "directory")
    ok(r[3])
    assert existing.read_text() == "old contents\n"
    assert not fresh.exists()
    assert list(a_dir.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []
    assert nan_free(by_id(pq.read_table(tmp_path / "new.parquet").to_pylist())) == api_rows(
        t, filter="qty > 4"
    )
    # a successful write replaces an existing file whole
    r2 = cli([*w, "scan", "sales.orders", "--columns", "id", "-o", str(existing)], env_for(tmp_path))
    ok(r2)
    got = pacsv.read_csv(existing).to_pylist()
    assert sorted(x["id"] for x in got) == [x["id"] for x in api_rows(t)]


# -- maintenance dry runs equal the API's ---------------------------------------------------------


def test_expire_and_cleanup_dry_runs_equal_the_api_and_change_nothing(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = build(wh)
    t.compact()
    t.tag("v1", 1)
    # an orphan file mere could have written: a staged, never-committed write
    t.stage(pa.table({"id": [100], "day": ["d9"], "qty": [1], "note": ["o"], "x": [1.0]}))
    before = fingerprint(wh, "sales.orders")
    api_expire = sorted(t.expire(older_than=mere.durations.parse_duration("0"), dry_run=True))
    api_cleanup = sorted(t.cleanup(older_than=mere.durations.parse_duration("0"), dry_run=True))
    assert fingerprint(wh, "sales.orders") == before
    w = ["-w", str(wh)]
    calls = [
        [*w, "expire", "sales.orders", "--older-than", "0", "--json"],
        [*w, "cleanup", "sales.orders", "--older-than", "0", "--json"],
        [*w, "expire", "sales.orders", "--older-than", "0"],
        [*w, "compact", "sales.orders", "--partition", "day=none", "--json"],
    ]
    ej, cj, etext, cnone = (ok(r) for r in cli_all(calls, env_for(tmp_path)))
    e, c = json.loads(ej.out), json.loads(cj.out)
    assert e["dry_run"] and c["dry_run"]
    assert e["files"] == api_expire and e["count"] == len(api_expire) > 0
    assert c["files"] == api_cleanup and c["count"] == len(api_cleanup) > 0
    # version 1 is tagged; the versions before the newest (0, 2, 3, 4; not the compaction's) would go
    assert 1 not in e["expired_versions"] and t.version not in e["expired_versions"]
    assert "dry run" in etext.out
    assert json.loads(cnone.out)["compacted"] is False
    assert fingerprint(wh, "sales.orders") == before
    # now apply, with the alias of --apply, and compare what is left with the API's view
    r = ok(
        cli([*w, "expire", "sales.orders", "--older-than", "0", "--no-dry-run", "--json"], env_for(tmp_path))
    )
    applied = json.loads(r.out)
    assert applied["dry_run"] is False and applied["files"] == api_expire
    t2 = mere.connect(wh).table("sales.orders")
    assert sorted(s.version for s in t2.history() if s.expired) == sorted(e["expired_versions"])
    assert all(not (wh / p).exists() and not Path(p).exists() for p in applied["files"])
    assert api_rows(t2, version=1) == api_rows(t, version=1)


def test_tag_rollback_consumer_roundtrip_equals_the_api(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = build(wh)
    want_v1 = api_rows(t, version=1)
    env = env_for(tmp_path)
    w = ["-w", str(wh)]
    ok(cli([*w, "tag", "sales.orders", "r1", "--version", "1", "--json"], env))
    ok(cli([*w, "consumer", "create", "sales.orders", "etl", "--version", "2"], env))
    feed = tmp_path / "feed.parquet"
    want_feed = sorted(t.changes(2).read_all().column("id").to_pylist())
    r = ok(cli([*w, "changes", "sales.orders", "--consumer", "etl", "--commit", "-o", str(feed)], env))
    assert r.out == ""
    assert sorted(pq.read_table(feed).column("id").to_pylist()) == want_feed
    rb = ok(cli([*w, "rollback", "sales.orders", "--tag", "r1", "--json"], env))
    t = mere.connect(wh).table("sales.orders")
    assert json.loads(rb.out)["version"] == t.version == 5
    assert api_rows(t) == want_v1
    assert t.tags() == {"r1": 1}
    cons = {c["name"]: c["position"] for c in t.inspect.consumers().to_pylist()}
    assert cons == {"etl": 4}
    calls = [
        [*w, "tags", "sales.orders", "--json"],
        [*w, "consumers", "sales.orders", "--json"],
        [*w, "changes", "sales.orders", "--consumer", "etl", "--json"],
    ]
    tags, consumers, after = (ok(x) for x in cli_all(calls, env))
    untag = ok(cli([*w, "untag", "sales.orders", "r1", "--json"], env))
    assert json.loads(tags.out) == {"r1": 1}
    assert [c["position"] for c in json.loads(consumers.out)] == [4]
    want_after = sorted(t.changes(4).read_all().column("id").to_pylist())
    assert sorted(x["id"] for x in jsonl(after.out)) == want_after
    assert json.loads(untag.out) == {"table": "sales.orders", "untagged": "r1"}
    assert mere.connect(wh).table("sales.orders").tags() == {}


def test_postgres_catalog(pg_server: Any, tmp_path: Path) -> None:
    url = pg_server.create_database(f"trial49_{os.getpid()}")
    wh = tmp_path / "wh"
    t = build(wh, url)
    before = fingerprint(wh, "sales.orders", url)
    w = ["-w", str(wh), "-c", url]
    calls = [
        [*w, "tables", "--json"],
        [*w, "scan", "sales.orders", "--filter", "qty > 2", "--json"],
        [*w, "history", "sales.orders", "--json"],
        [*w, "scan", "sales.nope"],
        [*w, "scan", "sales.orders", "--filter", "nocol = 1"],
        [*w, "rollback", "sales.orders", "99"],
    ]
    env = env_for(tmp_path)
    env["MERE_CATALOG"] = "sqlite:////nonexistent/should-not-be-used.db"  # the option wins
    tabs, scan, hist, nope, badf, badrb = cli_all(calls, env)
    assert json.loads(ok(tabs).out) == ["default.events", "sales.orders"]
    got = by_id(jsonl(ok(scan).out))
    want = api_rows(t, filter="qty > 2")
    assert len(got) == len(want) and all(same_json_row(a, b) for a, b in zip(got, want))
    assert [h["version"] for h in json.loads(ok(hist).out)] == [s.version for s in t.history()]
    user_error(nope, 1, "sales.nope")
    user_error(badf, 1, "nocol")
    user_error(badrb, 1, "99")
    assert fingerprint(wh, "sales.orders", url) == before
    # the catalog URL's password (none here) and host are fine to show; a bad one fails in one line
    r = cli(["-w", str(wh), "-c", url.rsplit("/", 1)[0] + "/no_such_db_49", "tables"], env)
    assert r.rc == 1 and "Traceback" not in r.err and r.err.startswith("mere: error: "), r


# -- docs claims ----------------------------------------------------------------------------------


def test_durations_accept_the_documented_forms(tmp_path: Path) -> None:
    # docs/storage.md: "Durations accept `5`, `2.5s`, `500ms`"; README: --older-than 7d, 12h, 1h30m, 0
    from mere.cli.settings import parse_duration

    assert parse_duration("2.5s").total_seconds() == 2.5
    assert parse_duration("500ms").total_seconds() == 0.5
    assert parse_duration("1h30m").total_seconds() == 5400


def test_readme_casts_only_without_loss(tmp_path: Path) -> None:
    cat = mere.connect(tmp_path / "wh")
    schema = pa.schema(
        [
            ("k", pa.int64()),
            ("i32", pa.int32()),
            ("d", pa.float64()),
            ("s", pa.large_string()),
            ("ts", pa.timestamp("us", tz="UTC")),
        ]
    )
    t = cat.create_table("c", schema, primary_key="k", buckets=1)
    # int64 values into an int32 column if they fit, string into large_string
    t.upsert(pa.table({"k": [1], "i32": pa.array([7], pa.int64()), "s": pa.array(["a"], pa.string())}))
    assert t.to_arrow().to_pylist()[0]["i32"] == 7
    bad = {
        "i32": pa.array([2**40], pa.int64()),
        "d": pa.array(["12.5"]),
        "s": pa.array([5], pa.int64()),
        "ts": pa.array([0], pa.timestamp("us")),
    }
    version = t.version
    for col, arr in bad.items():
        with pytest.raises(errors.SchemaMismatch, match=col):
            t.upsert(pa.table({"k": [2], col: arr}))
    with pytest.raises(errors.SchemaMismatch, match="i32"):
        t.upsert(pa.table({"k": [3], "i32": pa.array([True])}))
    assert t.version == version


def test_readme_literal_comparisons_are_exact(tmp_path: Path) -> None:
    # README: "`int_col = 1.5` is false, `int8_col < 1000` true; -0.0 = 0.0; NaN = NaN and NaN is larger
    # than any number"
    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table("n", pa.schema([("k", pa.int64()), ("b", pa.int8()), ("f", pa.float64())]))
    t.append(
        pa.table({"k": [1, 2, 3], "b": pa.array([1, 2, 127], pa.int8()), "f": [-0.0, float("nan"), 1e308]})
    )
    assert t.scan(filter="k = 1.5").count() == 0
    assert t.scan(filter="b < 1000").count() == 3
    assert t.scan(filter="f = 0.0").to_arrow().column("k").to_pylist() == [1]
    assert t.scan(filter="f = 'NaN'").to_arrow().column("k").to_pylist() == [2]
    assert sorted(t.scan(filter="f > 1e300").to_arrow().column("k").to_pylist()) == [2, 3]


def test_readme_cdc_values_any_case_and_spaces(tmp_path: Path) -> None:
    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table(
        "c", pa.schema([("k", pa.int64()), ("v", pa.string())]), primary_key="k", buckets=1, cdc_column="op"
    )
    ins = ["I", " +i", "c ", "R", "Insert", "u", "+U", "UPDATE"]
    t.upsert(pa.table({"k": list(range(len(ins))), "v": ["x"] * len(ins), "op": ins}))
    assert t.scan().count() == len(ins)
    t.upsert(pa.table({"k": [0, 1, 2, 3], "v": ["y"] * 4, "op": ["-U", " d", "-D", "delete "]}))
    assert sorted(t.to_arrow().column("k").to_pylist()) == [0, 4, 5, 6, 7]  # -U ignored
    v = t.version
    with pytest.raises(errors.MereError):
        t.upsert(pa.table({"k": [9], "v": ["z"], "op": ["X"]}))
    assert t.version == v


def test_readme_empty_writes_make_no_version(tmp_path: Path) -> None:
    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table("e", pa.schema([("k", pa.int64()), ("v", pa.int64())]), primary_key="k", buckets=2)
    t.upsert(pa.table({"k": [1], "v": [1]}))
    v = t.version
    for res in (
        t.upsert(pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.int64())})),
        t.delete("v = 42"),
    ):
        assert res.no_change and res.version == v
    with t.transaction():
        pass
    assert t.version == v and len(t.history()) == v + 1
    with pytest.raises(errors.MereError):
        t.delete(None)  # type: ignore[arg-type]
    t.truncate()
    assert t.scan().count() == 0 and t.version == v + 1
    assert t.history()[-1].summary.get("added_files", 0) == 0


def test_readme_exist_ok_only_for_the_same_spec(tmp_path: Path) -> None:
    cat = mere.connect(tmp_path / "wh")
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    t = cat.create_table("x", schema, primary_key="k", buckets=2)
    assert cat.create_table("x", schema, primary_key="k", buckets=2, exist_ok=True).name == t.name
    with pytest.raises(errors.MereError):
        cat.create_table("x", schema, primary_key="k", buckets=4, exist_ok=True)
    with pytest.raises(errors.MereError):
        cat.create_table("x", schema, primary_key="k", buckets=2)


def test_readme_idempotency_key_reruns_return_the_commit(tmp_path: Path) -> None:
    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table("i", pa.schema([("k", pa.int64()), ("v", pa.int64())]), primary_key="k", buckets=2)
    first = t.upsert(pa.table({"k": [1], "v": [1]}), idempotency_key="job-1")
    again = t.upsert(pa.table({"k": [1], "v": [999]}), idempotency_key="job-1")
    assert again.already_committed and again.version == first.version
    assert t.to_arrow().to_pylist() == [{"k": 1, "v": 1}]
    d1 = t.delete("k = 1", idempotency_key="del-1")
    t.upsert(pa.table({"k": [1], "v": [2]}))
    d2 = t.delete("k = 1", idempotency_key="del-1")
    assert d2.already_committed and d2.version == d1.version
    assert t.to_arrow().to_pylist() == [{"k": 1, "v": 2}]


def test_readme_cli_json_flags_print_json(wh: Path, tmp_path: Path) -> None:
    # README: "--json on tables, describe, history, explain (and on compact, expire, cleanup) prints JSON"
    w = ["-w", str(wh)]
    calls = [
        [*w, "tables", "--json"],
        [*w, "describe", "events", "--json"],
        [*w, "history", "events", "--json"],
        [*w, "explain", "events", "--json"],
        [*w, "compact", "events", "--json"],
        [*w, "expire", "events", "--json"],
        [*w, "cleanup", "events", "--json"],
    ]
    for c, r in zip(calls, cli_all(calls, env_for(tmp_path))):
        json.loads(ok(r, c).out)


def test_describe_of_an_old_version_shows_its_own_properties(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = build(wh)
    t.set_properties({"write.compression": "snappy"})
    r = ok(cli(["-w", str(wh), "describe", "sales.orders", "--version", "1", "--json"], env_for(tmp_path)))
    d = json.loads(r.out)
    assert d["version"] == 1
    assert d["properties"] == dict(t.spec_at(1).properties)


def test_expire_dry_run_says_what_apply_does_with_tags_and_unseen_consumers(tmp_path: Path) -> None:
    import time

    wh = tmp_path / "wh"
    cat = mere.connect(wh)
    t = cat.create_table(
        "t",
        pa.schema([("id", pa.int64()), ("v", pa.int64())]),
        primary_key="id",
        buckets=1,
        properties={
            "compaction.auto": "off",
            "retention.max-age": "off",
            "changes.consumer-expiration": "1s",
        },
    )
    for i in range(6):
        t.upsert(pa.table({"id": [i % 3], "v": [i]}))
    t.compact()
    t.tag("k", 1)
    t.consumer("old", start_version=2)
    t.consumer("fresh", start_version=t.version)  # unseen too, but it holds nothing back: left alone
    time.sleep(1.5)  # "old" is unseen for longer than 1s and holds versions 2.. back: dropped
    before = fingerprint(wh, "t")
    env = env_for(tmp_path)
    w = ["-w", str(wh)]
    dry = json.loads(ok(cli([*w, "expire", "t", "--older-than", "0", "--json"], env)).out)
    assert fingerprint(wh, "t") == before
    applied = json.loads(ok(cli([*w, "expire", "t", "--older-than", "0", "--apply", "--json"], env)).out)
    for key in ("expired_versions", "dropped_consumers", "files", "count"):
        assert dry[key] == applied[key], key
    assert dry["dropped_consumers"] == ["old"]
    t = mere.connect(wh).table("t")
    assert sorted(s.version for s in t.history() if s.expired) == dry["expired_versions"]
    assert dry["expired_versions"] == [v for v in range(t.version) if v != 1]
    live = {c["name"]: c["dropped_at"] is None for c in t.inspect.consumers().to_pylist()}
    assert live == {"old": False, "fresh": True}


def test_readme_delete_true_and_cdc_rows_given_to_delete(tmp_path: Path) -> None:
    cat = mere.connect(tmp_path / "wh")
    t = cat.create_table(
        "d", pa.schema([("k", pa.int64()), ("v", pa.int64())]), primary_key="k", buckets=2, cdc_column="op"
    )
    t.upsert(pa.table({"k": [1, 2, 3], "v": [1, 2, 3]}))
    v = t.version
    with pytest.raises(errors.MereError):  # "rows given to delete() that carry it must all say delete"
        t.delete(pa.table({"k": [1, 2], "op": ["D", "I"]}))
    assert t.version == v and t.scan().count() == 3
    t.delete(pa.table({"k": [1], "op": ["-D"]}))
    assert sorted(t.to_arrow().column("k").to_pylist()) == [2, 3]
    t.delete("TRUE")
    assert t.scan().count() == 0


def test_readme_partial_rows_not_null_and_metadata_aggregates(tmp_path: Path) -> None:
    # README: "A batch that lacks some non-key columns updates only the columns it has; a row that would
    # create a key without a NOT NULL column is refused"; "scan.count(); t.scan().max('qty') from
    # metadata where exact"
    cat = mere.connect(tmp_path / "wh")
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            pa.field("a", pa.int64(), nullable=False),
            ("b", pa.string()),
        ]
    )
    t = cat.create_table("n", schema, primary_key="k", buckets=2)
    t.upsert(pa.table({"k": [1, 2], "a": [10, 20], "b": ["x", "y"]}))
    v = t.version
    with pytest.raises(errors.SchemaMismatch, match="a"):
        t.upsert(pa.table({"k": [1, 3], "b": ["p", "q"]}))
    assert t.version == v
    t.upsert(pa.table({"k": [1], "b": ["p"]}))
    t.upsert(pa.table({"k": [5], "a": [-7], "b": [None]}))
    t.delete("k = 2")
    rows = sorted(t.to_arrow().to_pylist(), key=lambda r: r["k"])
    assert rows == [{"k": 1, "a": 10, "b": "p"}, {"k": 5, "a": -7, "b": None}]
    assert t.scan().max("a") == 10 and t.scan().min("a") == -7
    assert t.scan().count() == 2 and t.scan(filter="a > 0").count() == 1


def test_expired_versions_refused_everywhere_and_nothing_changes(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = build(wh)
    t.expire(older_than=mere.durations.parse_duration("0"), dry_run=False)
    assert t.history()[1].expired
    before = fingerprint(wh, "sales.orders")
    w = ["-w", str(wh)]
    calls = [
        [*w, "scan", "sales.orders", "--version", "1"],
        [*w, "describe", "sales.orders", "--version", "1"],
        [*w, "changes", "sales.orders", "--from", "1"],
        [*w, "rollback", "sales.orders", "1"],
        [*w, "tag", "sales.orders", "old", "--version", "1"],
        [*w, "consumer", "create", "sales.orders", "c", "--version", "1"],
    ]
    for r in cli_all(calls, env_for(tmp_path)):
        user_error(r, 1, "version 1 has expired")
    assert fingerprint(wh, "sales.orders") == before
