"""The ``mere`` command line against warehouses made with the Python API.

Starting a Python process costs ~2 s here, so each test runs a few invocations as real processes (side by
side where they are independent: `python -m mere.cli` and the installed `mere` script) and the rest
in-process through ``mere.cli.app.run``, the function the command itself calls, with the same output
streams, exit codes and error handling.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mere
from mere import errors
from mere.spec import default_properties

pytest.importorskip("click")
pytest.importorskip("rich")

from mere.cli import app as cli_app
from mere.cli.settings import Settings, SettingsError, parse_duration, redact, resolve

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("qty", pa.int64()), ("note", pa.string())])


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def one_error_line(self) -> str:
        """The single ``mere: error: ...`` line the command printed, checked to be alone."""
        assert self.err.endswith("\n") and self.err.count("\n") == 1, self.err
        assert self.err.startswith("mere: error: "), self.err
        assert "Traceback" not in self.err
        return self.err


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment without MERE_* settings and without a user config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERE_")}
    env["XDG_CONFIG_HOME"] = str(tmp / "no-config")
    env.update(extra)
    return env


def mere_cmd(*args: str, env: dict[str, str], script: bool = False) -> Result:
    exe = str(Path(sys.executable).with_name("mere"))
    argv = [exe, *args] if script else [sys.executable, "-m", "mere.cli", *args]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    return Result(p.returncode, p.stdout, p.stderr)


def mere_all(calls: Sequence[Sequence[str]], env: dict[str, str]) -> list[Result]:
    """Run several independent invocations side by side."""
    with ThreadPoolExecutor(3) as pool:
        return list(pool.map(lambda a: mere_cmd(*a, env=env), calls))


def in_process(*args: str) -> Result:
    raw = io.BytesIO()
    out, err = io.TextIOWrapper(raw, encoding="utf-8"), io.StringIO()  # stdout with a .buffer, as sys.stdout
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_app.run(list(args))
    out.flush()
    return Result(rc, raw.getvalue().decode(), err.getvalue())


def by_id(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(rows, key=lambda r: r["id"])  # type: ignore[arg-type, return-value]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("cli") / "wh"
    cat = mere.connect(wh)
    t = cat.create_table(
        "sales.orders",
        SCHEMA,
        primary_key="id",
        partition_by="day",
        buckets=2,
        merge_operators={"qty": "sum"},
        properties={"write.compression": "snappy"},
    )
    t.upsert(pa.table({"id": [1, 2, 3, 4, 5, 6], "day": ["d1"] * 3 + ["d2"] * 3, "qty": [1, 2, 3, 4, 5, 6],
                       "note": ["a", "b", None, "d", "e, \"quoted\"", "f"]}))  # fmt: skip
    t.upsert(pa.table({"id": [1, 4], "day": ["d1", "d2"], "qty": [10, 10]}))  # partial: qty only
    t.delete("id = 6")
    cat.create_table("events", pa.schema([("x", pa.float64())])).append(pa.table({"x": [1.5, 2.5]}))
    return wh


def test_read_only_commands(warehouse: Path, tmp_path: Path) -> None:
    t = mere.connect(warehouse).table("sales.orders")
    rows = by_id(t.to_arrow().to_pylist())
    w = ["-w", str(warehouse)]
    csv_out, pq_out, jsonl_out = tmp_path / "o.csv", tmp_path / "o.parquet", tmp_path / "o.jsonl"
    real = [  # as processes
        [*w, "tables", "--json"],
        [*w, "describe", "sales.orders", "--json"],
        [*w, "head", "sales.orders", "-n", "2", "--json"],
        [*w, "scan", "sales.orders", "--columns", "id,qty", "--filter", "qty > 3", "--format", "csv"],
    ]
    tables_json, desc_json, head, csv_r = mere_all(real, clean_env(tmp_path))
    calls = [
        [*w, "tables", "sales"],
        [*w, "describe", "sales.orders"],
        [*w, "history", "sales.orders", "--json"],
        [*w, "history", "sales.orders"],
        [*w, "scan", "sales.orders", "--version", "1", "--format", "parquet", "--output", str(pq_out)],
        [*w, "scan", "sales.orders", "--format", "jsonl", "--output", str(jsonl_out)],
        [*w, "scan", "sales.orders", "--filter", "day = 'd1'"],
        [*w, "explain", "sales.orders", "--filter", "id = 1 and qty > 2", "--columns", "id", "--json"],
        [*w, "explain", "sales.orders", "--filter", "id = 1"],
        [
            *w,
            "head",
            "sales.orders",
            "--columns",
            "note",
            "--filter",
            "id = 5",
            "--format",
            "csv",
            "--output",
            str(csv_out),
        ],
    ]
    res = [in_process(*c) for c in calls]
    for call, r in zip(real + calls, [tables_json, desc_json, head, csv_r, *res]):
        assert r.rc == 0 and r.err == "", (call, r)
    tables_ns, desc, hist_json, hist, pq_r, jsonl_r, scan, ex_json, ex, note_csv = res

    assert json.loads(tables_json.out) == ["default.events", "sales.orders"]
    assert tables_ns.out == "sales.orders\n"

    d = json.loads(desc_json.out)
    assert d["name"] == "sales.orders" and d["primary_key"] == ["id"] and d["partition_by"] == ["day"]
    assert d["buckets"] == 2 and d["merge_operators"] == {"qty": "sum"}
    assert d["properties"] == default_properties(True) | {"write.compression": "snappy"}
    assert d["version"] == d["current_version"] == t.version == 3
    assert [c["name"] for c in d["columns"]] == SCHEMA.names
    assert d["columns"][0] == {"name": "id", "type": "int64", "nullable": False, "primary_key": True,
                               "partition": False, "merge_operator": None, "field_id": 1,
                               "default": None}  # fmt: skip
    files = t.inspect.files()
    assert d["files"]["count"] == files.num_rows > 0
    assert d["files"]["bytes"] == sum(files.column("size_bytes").to_pylist())
    assert d["files"]["delete_files"] >= 1
    for word in ("sales.orders", "primary key", "partitioned by", "buckets", "write.compression", "snappy"):
        assert word in desc.out

    h = json.loads(hist_json.out)
    assert [v["version"] for v in h] == [0, 1, 2, 3]
    assert [v["operation"] for v in h] == ["create", "upsert", "upsert", "delete"]
    assert h[1]["summary"]["rows"] == 6 and not h[1]["expired"]
    dt.datetime.fromisoformat(h[1]["committed_at"])
    assert "upsert" in hist.out and "delete" in hist.out

    head_rows = [json.loads(line) for line in head.out.splitlines()]
    assert len(head_rows) == 2 and all(r in rows for r in head_rows)

    got_csv = pacsv.read_csv(io.BytesIO(csv_r.out.encode())).sort_by("id").to_pylist()
    assert got_csv == [{"id": r["id"], "qty": r["qty"]} for r in rows if r["qty"] > 3]  # type: ignore[operator]
    assert pacsv.read_csv(csv_out).to_pylist() == [{"note": 'e, "quoted"'}]
    assert pq.read_table(pq_out).sort_by("id") == t.scan(version=1).to_arrow().sort_by("id")
    assert by_id([json.loads(line) for line in jsonl_out.read_text().splitlines()]) == rows
    assert pq_r.out == jsonl_r.out == note_csv.out == ""

    assert "11" in scan.out and "d1" in scan.out and "d2" not in scan.out  # id 1: qty 1 + 10 (sum)

    e = json.loads(ex_json.out)
    assert e["version"] == 3 and e["key_lookup"] == [[1]]
    assert "id" in e["pre_merge_filter"] and "qty" in e["post_merge_filter"]
    assert ex.out.startswith("scan at version 3") and "before merge" in ex.out


def test_entry_points_and_settings_sources(
    warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The installed `mere` script, MERE_CONFIG files and the environment; options beat env beats file."""
    config = tmp_path / "mere.toml"
    config.write_text(f'warehouse = "{tmp_path / "elsewhere"}"\n[storage_options]\nretries = 3\n')
    good = tmp_path / "good.toml"
    good.write_text(f"warehouse = {json.dumps(str(warehouse))}\n")
    base = clean_env(tmp_path)
    with ThreadPoolExecutor(3) as pool:
        from_file = pool.submit(mere_cmd, "tables", "--json", env={**base, "MERE_CONFIG": str(good)})
        nowhere = pool.submit(mere_cmd, "tables", "--json", env=base)
        script = pool.submit(mere_cmd, "-w", str(warehouse), "tables", env=base, script=True)
    assert from_file.result().rc == 0 and json.loads(from_file.result().out) == [
        "default.events",
        "sales.orders",
    ]
    assert nowhere.result().rc == 2 and "no warehouse" in nowhere.result().one_error_line()
    assert script.result().rc == 0 and script.result().out.split() == ["default.events", "sales.orders"]

    for k, v in base.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MERE_CONFIG", str(config))
    monkeypatch.setenv("MERE_WAREHOUSE", str(warehouse))
    env_over_file = in_process("tables", "--json")
    monkeypatch.setenv("MERE_WAREHOUSE", str(tmp_path / "nowhere"))
    option_over_env = in_process("-w", str(warehouse), "tables", "--json")
    for r in (env_over_file, option_over_env):
        assert r.rc == 0 and json.loads(r.out) == ["default.events", "sales.orders"], r
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "nowhere").exists()


def test_errors_are_one_line_and_hide_secrets(
    warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = ["-w", str(warehouse)]
    fresh = tmp_path / "fresh-wh"
    secrets = ["TOPSECRET-1", "TOKEN-2", "PASSW0RD-3", "ENVSECRET-4"]
    pg = f"postgresql://alice:{secrets[2]}@127.0.0.1:1/db"
    real = [
        ["-w", str(fresh), "scan", "sales.orders"],
        [*w, "scan", "sales.orders", "--filter", "qty >"],
        [*w, "scan", "sales.orders", "--bogus"],
        [
            *w,
            "-o",
            f"secret_access_key={secrets[0]}",
            "-o",
            f"session_token={secrets[1]}",
            "-c",
            pg,
            "tables",
        ],
    ]
    calls = [
        [*w, "describe", "sales.nope"],
        [*w, "scan", "sales.orders", "--format", "parquet"],
        [*w, "expire", "sales.orders", "--older-than", "7x"],
        [*w, "head", "sales.orders", "--columns", "id,nope"],
        [*w, "-o", f"password={secrets[0]}", "tables"],  # refused by the core, which names the key only
        [*w, "-o", f"secret_access_key={secrets[0]}", "describe", "sales.nope"],
        [*w, "-o", "no-equals-sign", "tables"],
    ]
    env = clean_env(tmp_path, MERE_STORAGE_OPTIONS=json.dumps({"session_token": secrets[3]}))
    fresh_missing, bad_filter, bogus, pg_err = mere_all(real, env)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    missing, no_output, bad_age, bad_column, unknown, secret_err, bad_opt = [in_process(*c) for c in calls]
    res = [fresh_missing, bad_filter, bogus, pg_err, missing, no_output, bad_age, bad_column, unknown]
    res += [secret_err, bad_opt]
    assert missing.rc == 1 and "sales.nope does not exist" in missing.one_error_line()
    assert fresh_missing.rc == 1 and "does not exist" in fresh_missing.one_error_line()
    assert not fresh.exists()  # reads never create a warehouse or a catalog
    assert bad_filter.rc == 1 and "filter" in bad_filter.one_error_line()
    assert no_output.rc == 2 and "--output" in no_output.one_error_line()
    assert bogus.rc == 2 and "--bogus" in bogus.one_error_line()
    assert bad_age.rc == 2 and "7x" in bad_age.one_error_line()
    assert bad_column.rc == 1 and "nope" in bad_column.one_error_line()
    assert pg_err.rc == 1 and "alice" in pg_err.one_error_line()
    assert unknown.rc == 1 and "password" in unknown.one_error_line()
    assert secret_err.rc == 1 and "does not exist" in secret_err.one_error_line()
    assert bad_opt.rc == 2 and "key=value" in bad_opt.one_error_line()
    for r in res:
        assert r.out == "" or r.rc == 0
        for s in secrets:
            assert s not in r.out + r.err


def test_compact_expire_cleanup_dry_run_then_apply(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = mere.connect(wh).create_table("m.t", SCHEMA, primary_key="id", buckets=2)
    for i in range(3):
        t.upsert(pa.table({"id": [1, 2, 3], "day": ["d"] * 3, "qty": [i] * 3, "note": ["x"] * 3}))
    rows = by_id(t.to_arrow().to_pylist())
    orphan = wh / t.location / "bucket-00000" / "part-0123456789abcdef0123456789abcdef.parquet"
    orphan.write_bytes(b"left by a killed writer")
    old = time.time() - 7200
    os.utime(orphan, (old, old))
    w, env = ["-w", str(wh)], clean_env(tmp_path)

    compact = mere_cmd(*w, "compact", "m.t", "--json", env=env)
    dry = mere_cmd(*w, "expire", "m.t", "--older-than", "0", env=env)
    applied = mere_cmd(*w, "expire", "m.t", "--older-than", "0", "--json", "--apply", env=env)
    cdry = in_process(*w, "cleanup", "m.t", "--json")  # the compaction's files are younger than 1h: kept
    capplied = in_process(*w, "cleanup", "m.t", "--apply")
    for r in (compact, dry, applied, cdry, capplied):
        assert r.rc == 0 and r.err == "", r

    c = json.loads(compact.out)
    assert c["compacted"] and c["version"] == 4 and c["files_removed"] == 6
    listed = [line.strip() for line in dry.out.splitlines()[1:] if line.startswith("  ")]
    assert "would delete 6 file(s)" in dry.out and "--apply" in dry.out and len(listed) == 6
    e = json.loads(applied.out)
    assert e["dry_run"] is False and sorted(e["files"]) == sorted(listed)
    assert e["expired_versions"] == [0, 1, 2, 3]
    assert not any((wh / p).exists() for p in listed)
    assert by_id(t.to_arrow().to_pylist()) == rows

    cd = json.loads(cdry.out)
    assert cd["dry_run"] is True and cd["files"] == [
        f"{t.location}/bucket-00000/part-0123456789abcdef0123456789abcdef.parquet"
    ]
    assert "deleted 1 file(s)" in capplied.out and not orphan.exists()


def test_dry_run_lists_what_expire_and_cleanup_delete(tmp_path: Path) -> None:
    """Table.expire/cleanup(dry_run=True) name exactly what the real call deletes and change nothing,
    with tags and rollbacks about."""
    t = mere.connect(tmp_path / "wh").create_table("x.t", SCHEMA, primary_key="id", buckets=2)

    def write(i: int) -> None:
        t.upsert(pa.table({"id": [i % 4, 7], "day": ["d", "d"], "qty": [i, i], "note": ["n", "n"]}))
        time.sleep(0.03)  # commits far enough apart to aim a cutoff between them

    def both(cutoff: dt.datetime | None) -> list[str]:
        """expire(dry_run=True), then expire(), both giving up the versions before ``cutoff`` (None: all)."""

        def age() -> dt.timedelta:
            return dt.timedelta(0) if cutoff is None else dt.datetime.now(dt.UTC) - cutoff

        on_disk = {p for p, _, _ in t.storage.list_files(t.location)}
        history = t.history()
        dry = t.expire(age(), dry_run=True)
        assert {p for p, _, _ in t.storage.list_files(t.location)} == on_disk and t.history() == history
        real = t.expire(age(), dry_run=False)
        assert sorted(dry) == sorted(real)
        return real

    for i in range(3):
        write(i)
    t.compact()  # v4 replaces the files of v1..v3
    time.sleep(0.03)
    t.tag("keep-2", 2)
    for i in range(3, 5):
        write(i)
    t.rollback(4)  # v7: the compacted files again
    time.sleep(0.03)
    write(5)
    t.compact()
    time.sleep(0.03)
    assert both(t.snapshot(version=6).committed_at + dt.timedelta(milliseconds=10))  # v6 on; tagged v2 too
    t.untag("keep-2")
    assert both(None)  # now v2's files go too
    assert both(None) == []

    orphan = f"{t.location}/bucket-00001/del-0123456789abcdef0123456789abcdef.parquet"
    Path(t.storage.full_path(orphan)).write_bytes(b"x")
    time.sleep(0.01)
    assert t.cleanup(dt.timedelta(0), dry_run=True) == [orphan]
    assert Path(t.storage.full_path(orphan)).exists()
    assert (
        t.cleanup(dt.timedelta(0), dry_run=False) == [orphan]
        and not Path(t.storage.full_path(orphan)).exists()
    )
    with pytest.raises(errors.InvalidInput, match="dry_run"):
        t.expire(dry_run="yes")  # type: ignore[arg-type]


def test_settings_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        'warehouse = "file-wh"\ncatalog = "file.db"\n[storage_options]\nregion = "eu"\nretries = 2\n'
    )
    env = {"MERE_CONFIG": str(cfg), "MERE_STORAGE_OPTIONS": "region=us,allow_http=true"}
    s = resolve(env=env)
    assert (s.warehouse, s.catalog) == ("file-wh", "file.db")
    assert s.storage_options == {"region": "us", "retries": "2", "allow_http": "true"}
    s = resolve(
        "cli-wh", None, ["retries=5"], env={**env, "MERE_WAREHOUSE": "env-wh", "MERE_CATALOG": "e.db"}
    )
    assert (s.warehouse, s.catalog, s.storage_options["retries"]) == ("cli-wh", "e.db", "5")
    assert resolve(env={"XDG_CONFIG_HOME": str(tmp_path / "x"), "MERE_WAREHOUSE": "w"}).warehouse == "w"
    cfg.write_text('warehose = "typo"\n')
    with pytest.raises(SettingsError, match="warehose"):
        resolve(env=env)
    with pytest.raises(SettingsError, match="JSON"):
        resolve("w", env={"MERE_STORAGE_OPTIONS": "{bad", "XDG_CONFIG_HOME": str(tmp_path)})


_DURATION = re.compile(r"\s*0\s*|\s*(\d+(\.\d+)?\s*(ms|s|m|h|d|w)\s*)+", re.IGNORECASE)
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(sorted(UNITS))), min_size=1, max_size=4))
def test_durations_parse(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{u}" for n, u in parts)
    assert parse_duration(text) == dt.timedelta(seconds=sum(n * UNITS[u] for n, u in parts))


@given(st.text(max_size=12).filter(lambda s: not _DURATION.fullmatch(s)))
def test_bad_durations_are_usage_errors(text: str) -> None:
    r = in_process("-w", "/nonexistent/wh", "expire", "x.t", "--older-than", text)
    assert r.rc == 2 and r.out == "" and "--older-than" in r.one_error_line()


def _not_count(s: str) -> bool:
    try:
        return int(s) < 0
    except ValueError:
        return True


@given(
    st.sampled_from(["--limit", "--version"]),
    st.one_of(st.integers(max_value=-1).map(str), st.text(max_size=8).filter(_not_count)),
)
def test_bad_numbers_are_usage_errors(option: str, value: str) -> None:
    r = in_process("-w", "/nonexistent/wh", "scan", "x.t", option, value)
    assert r.rc == 2 and r.out == "" and option in r.one_error_line()
    assert not Path("/nonexistent/wh").exists()


SECRETISH = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters="*"), min_size=6)


@given(SECRETISH, SECRETISH, st.text(max_size=20))
def test_secrets_never_survive_redaction(secret: str, password: str, noise: str) -> None:
    url = f"postgresql://bob:{quote(password, safe='')}@db.example:5432/cat"
    s = Settings("s3://bucket/wh", url, {"aws_secret_access_key": secret, "region": "eu-west-1"})
    message = f"{noise}failed with {secret} at {url} ({password}) {noise}"
    shown = redact(message, s.secrets())
    assert secret not in shown and password not in shown and quote(password, safe="") not in shown


def test_short_secrets_go_as_whole_words_only() -> None:
    s = Settings("wh", "postgresql://a:b@host:1/db", {"token": "x1"})
    shown = redact("cannot open postgresql://a:b@host:1/db: b; token x1 in ax1", s.secrets())
    assert shown == "cannot open postgresql://a:***@host:1/db: ***; token *** in ax1"


def test_changes_tags_and_rollback(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = mere.connect(wh).create_table("m.t", SCHEMA, primary_key="id", buckets=2)
    t.upsert(pa.table({"id": [1, 2], "day": ["d"] * 2, "qty": [1, 2], "note": ["a", "b"]}))
    t.upsert(pa.table({"id": [2, 3], "day": ["d"] * 2, "qty": [20, 3], "note": ["b", "c"]}))
    t.delete("id = 1")
    w, env = ["-w", str(wh)], clean_env(tmp_path)
    feed_proc = mere_cmd(*w, "changes", "m.t", "--from", "1", "--json", env=env)
    assert feed_proc.rc == 0 and feed_proc.err == "", feed_proc
    feed = [json.loads(line) for line in feed_proc.out.splitlines()]
    want = t.changes(1).read_all().to_pylist()
    assert sorted((r["id"], r["_change"], r["qty"]) for r in feed) == sorted(
        (r["id"], r["_change"], r["qty"]) for r in want
    )
    csv = in_process(*w, "changes", "m.t", "--from", "1", "--to", "2", "--columns", "qty", "-f", "csv")
    assert csv.rc == 0 and csv.out.splitlines()[0] == '"id","qty","_change","_version","_commit_time"'

    tagged = in_process(*w, "tag", "m.t", "first", "--version", "1", "--json")
    assert tagged.rc == 0 and json.loads(tagged.out)["version"] == 1
    assert json.loads(in_process(*w, "tags", "m.t", "--json").out) == {"first": 1}
    by_tag = in_process(*w, "scan", "m.t", "--tag", "first", "--json")
    assert sorted(json.loads(line)["id"] for line in by_tag.out.splitlines()) == [1, 2]
    rolled = in_process(*w, "rollback", "m.t", "--tag", "first", "--json")
    assert rolled.rc == 0 and json.loads(rolled.out) == {
        "table": "m.t",
        "version": 4,
        "operation": "rollback",
    }
    assert by_id(t.refresh().to_arrow().to_pylist()) == by_id(t.to_arrow(version=1).to_pylist())
    assert in_process(*w, "untag", "m.t", "first").rc == 0
    assert json.loads(in_process(*w, "tags", "m.t", "--json").out) == {}

    for bad, code in (
        (["rollback", "m.t"], 2),  # neither a version nor a tag
        (["rollback", "m.t", "1", "--tag", "x"], 2),
        (["rollback", "m.t", "99"], 1),
        (["rollback", "m.t", "1", "--expected-version", "3"], 1),  # version 4 landed after 3: refused
        (["rollback", "m.t", "1", "--expected-version", "9"], 1),
        (["rollback", "m.t", "1", "--expected-version", "-1"], 2),
        (["changes", "m.t"], 2),  # --from is required
        (["changes", "m.t", "--from", "3", "--to", "1"], 1),
        (["scan", "m.t", "--tag", "nope"], 1),
        (["untag", "m.t", "nope"], 1),
        (["tag", "m.t", "bad name!"], 1),
    ):
        r = in_process(*w, *bad)
        assert r.rc == code, (bad, r)
        r.one_error_line()
    assert t.refresh().version == 4  # the failed commands changed nothing
    again = in_process(*w, "rollback", "m.t", "2", "--expected-version", "4", "--json")
    assert again.rc == 0 and json.loads(again.out)["version"] == 5
    assert by_id(t.refresh().to_arrow().to_pylist()) == by_id(t.to_arrow(version=2).to_pylist())


def test_consumers_listed_created_read_committed_and_dropped(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = mere.connect(wh).create_table(
        "m.t", SCHEMA, primary_key="id", buckets=2, properties={"retention.max-age": "off"}
    )
    t.upsert(pa.table({"id": [1, 2], "day": ["d"] * 2, "qty": [1, 2], "note": ["a", "b"]}))  # v1
    w = ["-w", str(wh)]
    made = in_process(*w, "consumer", "create", "m.t", "etl", "--version", "1", "--json")
    assert made.rc == 0 and json.loads(made.out) == {"table": "m.t", "consumer": "etl", "position": 1}
    t.upsert(pa.table({"id": [3], "day": ["d"], "qty": [3], "note": ["c"]}))  # v2
    t.upsert(pa.table({"id": [4], "day": ["d"], "qty": [4], "note": ["d"]}))  # v3
    listed = json.loads(in_process(*w, "consumers", "m.t", "--json").out)
    assert [(c["name"], c["position"], c["lag"], c["dropped_at"]) for c in listed] == [("etl", 1, 2, None)]
    text = in_process(*w, "consumers", "m.t")
    assert text.rc == 0 and "etl" in text.out and "live" in text.out

    # expire keeps what the consumer needs, and says so in its dry run as in its run
    dry = json.loads(in_process(*w, "expire", "m.t", "--older-than", "0", "--json").out)
    assert dry["expired_versions"] == [0] and dry["dropped_consumers"] == []
    done = json.loads(in_process(*w, "expire", "m.t", "--older-than", "0", "--apply", "--json").out)
    assert done["expired_versions"] == [0] and done["files"] == dry["files"]

    feed = in_process(*w, "changes", "m.t", "--consumer", "etl", "--commit", "--json")
    assert feed.rc == 0, feed
    assert sorted(json.loads(line)["id"] for line in feed.out.splitlines()) == [3, 4]
    assert t.consumer("etl").position == 3
    assert in_process(*w, "changes", "m.t", "--consumer", "etl", "--json").out == ""  # nothing new

    # unseen for longer than the table's limit: the next expire drops it, and reports it
    t.set_properties({"changes.consumer-expiration": "1ms"})  # v4
    time.sleep(0.01)
    dry = in_process(*w, "expire", "m.t", "--older-than", "0")
    assert "would drop consumer(s) unseen for longer than changes.consumer-expiration: etl" in dry.out
    done = json.loads(in_process(*w, "expire", "m.t", "--older-than", "0", "--apply", "--json").out)
    assert done["dropped_consumers"] == ["etl"] and done["expired_versions"] == [1, 2, 3]
    listed = json.loads(in_process(*w, "consumers", "m.t", "--json").out)
    assert listed[0]["dropped_at"] is not None and "unseen" in listed[0]["dropped_reason"]
    used = in_process(*w, "changes", "m.t", "--consumer", "etl")
    assert used.rc == 1 and "was dropped by expire" in used.one_error_line()
    dropped = in_process(*w, "consumer", "drop", "m.t", "etl")
    assert dropped.rc == 0 and dropped.out == "m.t: consumer etl dropped\n"
    assert json.loads(in_process(*w, "consumers", "m.t", "--json").out) == []

    for bad, code in (
        (["changes", "m.t", "--from", "1", "--consumer", "etl"], 2),
        (["changes", "m.t", "--from", "1", "--commit"], 2),
        (["changes", "m.t", "--consumer", "etl", "--commit", "-n", "1"], 2),
        (["changes", "m.t", "--consumer", "etl"], 1),  # no such consumer any more
        (["consumer", "drop", "m.t", "etl"], 1),
        (["consumer", "create", "m.t", "bad name"], 1),
        (["consumer", "create", "m.t", "x", "--version", "1"], 1),  # expired
    ):
        r = in_process(*w, *bad)
        assert r.rc == code, (bad, r)
        r.one_error_line()


def test_compact_auto_follows_the_table_policy(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = mere.connect(wh).create_table(
        "m.t",
        SCHEMA,
        primary_key="id",
        buckets=1,
        properties={"compaction.auto": "off", "compaction.min-files": "3"},
    )  # compacted only from outside (cron, an orchestrator), by the table's policy
    w = ["-w", str(wh)]
    for i in range(2):
        t.upsert(pa.table({"id": [i], "day": ["d"], "qty": [i], "note": ["x"]}))
    idle = in_process(*w, "compact", "m.t", "--auto", "--json")
    assert idle.rc == 0 and json.loads(idle.out)["compacted"] is False
    t.upsert(pa.table({"id": [9], "day": ["d"], "qty": [9], "note": ["x"]}))
    done = in_process(*w, "compact", "m.t", "--auto", "--json")
    assert done.rc == 0 and json.loads(done.out)["files_removed"] == 3
    assert len(t.refresh().files()) == 1


def test_describe_shows_each_version_with_its_own_columns(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = mere.connect(str(wh)).create_table(
        "ev.t", pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int32())]), primary_key="k"
    )
    t.upsert(pa.table({"k": [1], "v": pa.array([1], pa.int32())}))
    t.rename_column("v", "w")
    t.add_column("n", pa.string(), default="x")
    env = clean_env(tmp_path)
    now, then = mere_all(
        [
            ["--warehouse", str(wh), "describe", "ev.t", "--json"],
            ["--warehouse", str(wh), "describe", "ev.t", "--version", "1", "--json"],
        ],
        env,
    )
    assert now.rc == 0 and then.rc == 0, (now.err, then.err)
    cols = json.loads(now.out)["columns"]
    assert [(c["name"], c["field_id"], c["default"]) for c in cols] == [
        ("k", 1, None),
        ("w", 2, None),
        ("n", 3, "x"),
    ]
    assert [c["name"] for c in json.loads(then.out)["columns"]] == ["k", "v"]
    rows = mere_cmd("--warehouse", str(wh), "scan", "ev.t", "--version", "1", "--format", "jsonl", env=env)
    assert rows.rc == 0 and json.loads(rows.out.splitlines()[0]) == {"k": 1, "v": 1}, rows.err


def test_review_findings_on_bad_or_odd_input(warehouse: Path, tmp_path: Path) -> None:
    """Each case here once misbehaved (an independent review of the command line found them)."""
    w = ["-w", str(warehouse)]

    def error(*args: str, code: int = 1) -> str:
        r = in_process(*args)
        assert r.rc == code and r.out == "", (args, r)
        return r.one_error_line()

    bad_config = tmp_path / "bin.toml"
    bad_config.write_bytes(b"\xff\xfe warehouse = 1")
    assert "not UTF-8" in error("--config", str(bad_config), "tables", code=2)  # was: rc 1, no message
    assert "repeated: ['qty']" in error(*w, "head", "sales.orders", "--columns", "qty,qty", "--json")
    with pytest.raises(errors.InvalidInput, match="repeated"):
        mere.connect(warehouse).table("sales.orders").scan(columns=["qty", "qty"])
    assert "in-memory SQLite" in error(*w, "-c", "sqlite://", "tables")
    dsn = "host=127.0.0.1 user=alice password=KVSECRET99 dbname=db"
    assert "KVSECRET99" not in error(*w, "-c", dsn, "tables")  # refused, and never echoed
    # A mistyped warehouse, or an empty file given as the catalog, is not an empty catalog; neither is written.
    assert "no mere catalog" in error("-w", str(tmp_path / "typo"), "tables")
    assert not (tmp_path / "typo").exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    assert "no mere catalog" in error(*w, "-c", str(empty), "tables")
    assert empty.stat().st_size == 0
    assert "namespace must be" in error(*w, "tables", "../x")
    # Repeating a partition column compacted only the last value given.
    assert "more than once" in error(
        *w, "compact", "sales.orders", "--partition", "day=d1", "--partition", "day=d2", code=2
    )
    assert "drop --min-files" in error(*w, "compact", "sales.orders", "--auto", "--min-files", "3", code=2)
    # Epoch seconds for --as-of, as the error message offered.
    now = in_process(*w, "head", "sales.orders", "--as-of", str(int(time.time()) + 60), "--json")
    assert now.rc == 0 and len(now.out.splitlines()) == 5, now
    # --output: '-' is stdout; a symlink's target is written, the link stays; errors name the user's path.
    dash = in_process(*w, "scan", "sales.orders", "--format", "csv", "--output", "-")
    assert dash.rc == 0 and dash.out.startswith('"id","day","qty","note"') and not Path("-").exists()
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_text("old\n")
    link.symlink_to(real)
    assert in_process(*w, "scan", "sales.orders", "--format", "csv", "--output", str(link)).rc == 0
    assert link.is_symlink() and real.read_text().startswith('"id"')
    missing = str(tmp_path / "no" / "dir" / "x.csv")
    assert missing in error(*w, "scan", "sales.orders", "--format", "csv", "--output", missing)
    assert "is a directory" in error(
        *w, "scan", "sales.orders", "-f", "csv", "--output", str(tmp_path), code=2
    )


def test_odd_values_print_in_every_format(tmp_path: Path) -> None:
    """Names rich would read as markup, dates past year 9999, and bytes that are not UTF-8."""
    wh = tmp_path / "wh"
    schema = pa.schema([("id", pa.int64()), ("[/]", pa.string()), ("[red]x[/red]", pa.int64()),
                        ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("b", pa.binary())])  # fmt: skip
    t = mere.connect(wh).create_table("x.odd", schema, primary_key="id")
    t.upsert(pa.table({"id": [1, 2], "[/]": ["a", None], "[red]x[/red]": [1, 2], "d": [3_000_000, 0],
                       "ts": [2**62, 0], "b": [b"\xff\x00", None]}, schema=schema))  # fmt: skip
    w = ["-w", str(wh)]
    desc = in_process(*w, "describe", "x.odd")
    assert desc.rc == 0 and "[/]" in desc.out and "[red]x[/red]" in desc.out, desc
    for fmt in ("table", "jsonl"):
        r = in_process(*w, "scan", "x.odd", "--format", fmt)
        assert r.rc == 0 and r.err == "" and "10183-09-21" in r.out, (fmt, r)
    lines = [json.loads(line) for line in in_process(*w, "scan", "x.odd", "--json").out.splitlines()]
    assert {r["id"]: r["b"] for r in lines} == {1: "ff00", 2: None}
    csv = in_process(*w, "scan", "x.odd", "--format", "csv", "--columns", "id,b")
    assert csv.rc == 0 and sorted(csv.out.splitlines()) == sorted(['"id","b"', '1,"ff00"', "2,"]), csv


def test_second_review_findings(warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case here once misbehaved (a second independent review of the command line found them)."""
    w = ["-w", str(warehouse)]
    t = mere.connect(warehouse).table("sales.orders")
    rows = by_id(t.to_arrow().to_pylist())
    exe = [sys.executable, "-m", "mere.cli"]
    env = clean_env(tmp_path)
    # --output /dev/stdout while stdout is a file opened for appending: written at its end, never renamed
    # over it (which dropped what the file held).
    log = tmp_path / "app.log"
    log.write_text("IMPORTANT\n")
    with open(log, "ab") as sink:
        p = subprocess.run(
            [*exe, *w, "scan", "sales.orders", "--format", "jsonl", "--output", "/dev/stdout"],
            env=env,
            stdout=sink,
            timeout=120,
        )
    assert p.returncode == 0
    first, *lines = log.read_text().splitlines()
    assert first == "IMPORTANT"
    assert by_id([json.loads(line) for line in lines]) == rows
    # Outside a UTF-8 locale: JSON is written as UTF-8 bytes, tables escape what the encoding lacks.
    other = tmp_path / "wh"
    u = mere.connect(other).create_table(
        "sales.größe", pa.schema([("id", pa.int64()), ("wert", pa.string())]), primary_key="id"
    )
    u.upsert(pa.table({"id": [1], "wert": ["日本語"]}))
    ascii_env = {**env, "PYTHONIOENCODING": "ascii"}
    for args in (["describe", "sales.größe", "--json"], ["head", "sales.größe", "--json"]):
        p = subprocess.run([*exe, "-w", str(other), *args], env=ascii_env, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "größe" in p.stdout.decode("utf-8") or "日本語" in p.stdout.decode("utf-8")
        json.loads(p.stdout.decode("utf-8").splitlines()[0])
    p = subprocess.run(
        [*exe, "-w", str(other), "head", "sales.größe"], env=ascii_env, capture_output=True, timeout=120
    )
    assert p.returncode == 0 and b"\\u65e5" in p.stdout, p.stderr
    # ~ in the environment (no shell expands it there) is the home directory.
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(warehouse, home / "wh")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MERE_WAREHOUSE", "~/wh")
    listed = in_process("tables", "--json")
    assert listed.rc == 0 and "sales.orders" in listed.out
    monkeypatch.delenv("MERE_WAREHOUSE")
    # Given but empty: refused, not a fall back to the environment or the config file.
    for args in (["-w", "", "tables"], [*w, "--config", "", "tables"], [*w, "-c", " ", "tables"]):
        r = in_process(*args)
        assert r.rc == 2 and "is empty" in r.one_error_line()
    # An expiry age past the calendar, an as-of before year 1, another PostgreSQL driver: typed errors.
    r = in_process(*w, "expire", "sales.orders", "--older-than", "1000000d", "--json")
    assert r.rc == 0 and json.loads(r.out)["expired_versions"] == []
    r = in_process(*w, "scan", "sales.orders", "--as-of", "0001-01-01T00:00:00+01:00")
    assert r.rc == 1 and "no version" in r.one_error_line()
    for driver in ("psycopg2", "asyncpg"):
        r = in_process(*w, "-c", f"postgresql+{driver}://u:pw@127.0.0.1:1/db", "tables")
        assert r.rc == 1 and "psycopg" in r.one_error_line()
    # Secrets: an unencoded '@' in a password is refused without showing any of it; a SAS token's sig.
    r = in_process(*w, "-c", "postgresql://u:p@ss1234@127.0.0.1:1/db", "tables")
    assert r.rc == 1 and "%40" in r.one_error_line() and "ss1234" not in r.err
    r = in_process(*w, "-c", "postgresql://user@server:pw@127.0.0.1:1/db", "tables")  # Azure's user names
    assert r.rc == 1 and "write it as" not in r.err and "user%40server" in r.one_error_line()
    for args in (["tables"], ["describe", "sales.orders", "--json"]):  # SQLAlchemy reads "s3cr/et"
        r = in_process(*w, "-c", "postgresql://postgres:s3cr/et@127.0.0.1:1/postgres", *args)
        assert r.rc == 1 and "s3cr" not in r.err + r.out and "et@" not in r.err + r.out
    r = in_process(*w, "-o", "skip_signature=1", "scan", "sales.orders", "--version", "99")
    assert r.rc == 1 and "***" not in r.err  # a known option that is no secret: its value hides nothing
    sas = "abfs://c@acct.dfs.core.windows.net/wh?sv=1&sig=SASSIG99"
    r = in_process("-w", sas, "-c", str(warehouse / "catalog.db"), "describe", "sales.orders", "--json")
    assert "SASSIG99" not in r.out + r.err
    # A warehouse that lacks the table's files (a typo beside the right catalog): expire changes nothing.
    history = [(h.version, h.expired) for h in t.history()]
    typo = ["-w", str(tmp_path / "typo"), "-c", str(warehouse / "catalog.db")]
    r = in_process(*typo, "expire", "sales.orders", "--older-than", "0", "--apply")
    assert r.rc == 1 and "does not exist" in r.one_error_line()
    assert [(h.version, h.expired) for h in t.refresh().history()] == history
    assert not (tmp_path / "typo").exists()
    assert by_id(t.to_arrow().to_pylist()) == rows
    # The same where the newest version reads no file (truncated): a file expiring would delete is looked up.
    e = mere.connect(tmp_path / "e").create_table("ns.e", SCHEMA, primary_key="id")
    e.upsert(pa.table({"id": [1], "day": ["d"], "qty": [1], "note": ["n"]}))
    e.upsert(pa.table({"id": [2], "day": ["d"], "qty": [2], "note": ["n"]}))
    e.truncate()
    history = [(h.version, h.expired) for h in e.history()]
    typo = ["-w", str(tmp_path / "typo"), "-c", str(tmp_path / "e" / "catalog.db")]
    r = in_process(*typo, "expire", "ns.e", "--older-than", "0", "--apply")
    assert r.rc == 1 and "does not exist" in r.one_error_line()
    assert [(h.version, h.expired) for h in e.refresh().history()] == history
    r = in_process("-w", str(tmp_path / "e"), "expire", "ns.e", "--older-than", "0", "--apply", "--json")
    assert r.rc == 0 and json.loads(r.out)["expired_versions"]  # the right warehouse expires them


def test_columns_with_commas_and_quotes_in_their_names(tmp_path: Path) -> None:
    t = mere.connect(tmp_path / "wh").create_table(
        "ns.c",
        pa.schema([("id", pa.int64()), ("a,b", pa.string()), ('q"x', pa.int64())]),
        primary_key="id",
    )
    t.upsert(pa.table({"id": [1], "a,b": ["v"], 'q"x': [5]}))
    w = ["-w", str(tmp_path / "wh")]
    r = in_process(*w, "head", "ns.c", "--columns", 'id , "a,b" ', "--json")
    assert r.rc == 0 and json.loads(r.out) == {"id": 1, "a,b": "v"}
    r = in_process(*w, "head", "ns.c", "--columns", '"q""x"', "--json")
    assert r.rc == 0 and json.loads(r.out) == {'q"x': 5}
    r = in_process(*w, "head", "ns.c", "--columns", '"a,b', "--json")
    assert r.rc == 2 and "--columns" in r.one_error_line()


def test_a_value_prints_alike_whatever_its_batch_holds(tmp_path: Path) -> None:
    # A timestamp past year 9999 is shown as Arrow writes it; one beside it still prints as ISO 8601.
    kind = pa.timestamp("us", tz="Asia/Tokyo")
    t = mere.connect(tmp_path / "wh").create_table(
        "ns.far", pa.schema([("id", pa.int64()), ("ts", kind)]), primary_key="id", buckets=1
    )
    t.upsert(pa.table({"id": [1, 2], "ts": pa.array([0, 630_000_000_000_000_000], kind)}))
    t.upsert(pa.table({"id": [3], "ts": pa.array([0], kind)}))
    r = in_process("-w", str(tmp_path / "wh"), "scan", "ns.far", "--json")
    assert r.rc == 0
    shown = {row["id"]: row["ts"] for row in map(json.loads, r.out.splitlines())}
    assert shown[1] == shown[3] == "1970-01-01T09:00:00+09:00"
    assert shown[2].startswith("21933-")


def test_durations_are_seconds_in_every_format(tmp_path: Path) -> None:
    # Once: seconds in JSON lines (cut to microseconds), bare counts of the unit in CSV, H:MM:SS in tables.
    w = ["-w", str(tmp_path / "wh")]
    cat = mere.connect(tmp_path / "wh")
    for unit in ("s", "ms", "us", "ns"):
        t = cat.create_table(
            f"ns.d_{unit}", pa.schema([("id", pa.int64()), ("d", pa.duration(unit))]), primary_key="id"
        )
        t.upsert(pa.table({"id": [1, 2, 3], "d": pa.array([1_500_000, -1, None], pa.duration(unit))}))
        per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
        r = in_process(*w, "scan", f"ns.d_{unit}", "--json")
        assert r.rc == 0
        got = {row["id"]: row["d"] for row in map(json.loads, r.out.splitlines())}
        assert got == {1: 1_500_000 / per_second, 2: -1 / per_second, 3: None}
        r = in_process(*w, "scan", f"ns.d_{unit}", "--format", "csv")
        rows = pacsv.read_csv(io.BytesIO(r.out.encode())).sort_by("id").to_pylist()
        assert [float(row["d"]) if row["d"] is not None else None for row in rows] == [
            got[1],
            got[2],
            None,
        ]


def test_python_dash_m_mere_is_the_command_line(warehouse: Path, tmp_path: Path) -> None:
    args = ["-w", str(warehouse), "tables"]
    env = clean_env(tmp_path)
    short = subprocess.run([sys.executable, "-m", "mere", *args], env=env, capture_output=True, timeout=120)
    long = subprocess.run(
        [sys.executable, "-m", "mere.cli", *args], env=env, capture_output=True, timeout=120
    )
    assert short.returncode == long.returncode == 0, short.stderr
    assert short.stdout == long.stdout and b"sales.orders" in short.stdout
