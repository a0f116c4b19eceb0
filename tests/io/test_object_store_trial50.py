"""Trial 50: "nothing is lost, ever" for tables on an object store (a real SeaweedFS), against a dict model.

What trial 48 (``tests/table/test_faults_trial48.py``) does not already do: there a writer or maintenance
process is SIGKILLed at patched points with a PostgreSQL catalog. Here the faults come from the network,
through the latency/fault proxy (``tools/latency_proxy.py``): failed and reset requests of each HTTP
method hit ``compact``, ``expire``, ``cleanup``, ``rollback``, writes' commit checks and deletes by
predicate; two writer processes share a SQLite catalog file over slow, flaky S3 while a maintenance
process compacts, expires and cleans up at age zero and a reader process reads; foreign objects (also
folder markers and objects in sibling prefixes that extend the table's location) sit beside and inside the
table through every maintenance command and a purge; and ``storage_options`` with bad values must give
typed ``MereError``s. After every step: no committed row lost, no failed write visible, every kept version
reads as the model says, no referenced file missing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing as mp
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.errors import MereError
from services import SeaweedServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import latency_proxy
from latency_proxy import FaultPlan, LatencyProxy

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
MANUAL = {"compaction.auto": "off", "retention.max-age": "off"}
HEX = "0123456789abcdef" * 2


# -- services -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:
        yield server


@pytest.fixture
def bucket(seaweed: SeaweedServer) -> str:
    return seaweed.create_bucket(f"t50-{uuid.uuid4().hex[:10]}")


@pytest.fixture
def proxy(seaweed: SeaweedServer) -> Iterator[LatencyProxy]:
    with LatencyProxy("127.0.0.1", seaweed.port) as p:
        yield p


class Lake:
    """One warehouse in its own bucket with a SQLite catalog file; ``connect()`` talks to the server
    directly, ``connect(proxy)`` through the fault proxy."""

    def __init__(self, seaweed: SeaweedServer, bucket: str, tmp: Path) -> None:
        self.seaweed, self.bucket = seaweed, bucket
        self.warehouse = f"s3://{bucket}/wh"
        self.catalog = f"sqlite:///{tmp / 'catalog.db'}"

    def options(self, proxy: LatencyProxy | None = None, **extra: str) -> dict[str, str]:
        return self.seaweed.storage_options(proxy.endpoint if proxy else None, **extra)

    def connect(self, proxy: LatencyProxy | None = None, **extra: str) -> mere.Catalog:
        return mere.connect(
            self.warehouse, catalog=self.catalog, storage_options=self.options(proxy, **extra)
        )

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.seaweed.endpoint,
            aws_access_key_id=self.seaweed.access_key,
            aws_secret_access_key=self.seaweed.secret_key,
            region_name="us-east-1",
        )

    def objects(self) -> set[str]:
        """Every object key of the bucket (folder markers included)."""
        client, out, token = self.client(), set(), None
        while True:
            kw = {"Bucket": self.bucket, **({"ContinuationToken": token} if token else {})}
            page = client.list_objects_v2(**kw)
            out |= {o["Key"] for o in page.get("Contents", [])}
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def put(self, key: str, body: bytes = b"not mere's") -> str:
        self.client().put_object(Bucket=self.bucket, Key=key, Body=body)
        return key

    def uploads(self) -> list[str]:
        return [u["Key"] for u in self.client().list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])]


@pytest.fixture
def lake(seaweed: SeaweedServer, bucket: str, tmp_path: Path) -> Lake:
    return Lake(seaweed, bucket, tmp_path)


# -- the model --------------------------------------------------------------------------------------------


def rows(ids: Any, v: int) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array([v] * len(ids), pa.int64())}, schema=SCHEMA
    )


def content(data: pa.Table) -> dict[int, int]:
    got = dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))
    assert len(got) == data.num_rows, "a key came back twice"
    return got


def object_key(t: mere.Table, rel: str) -> str:
    """The bucket key of a path relative to the warehouse root."""
    return f"{t.storage.root}/{rel}".split("/", 1)[1]


def check(cat: mere.Catalog, name: str, states: dict[int, dict[int, int]]) -> mere.Table:
    """The table opens afresh, reads as the model at its version and at every kept version, and
    references no missing object."""
    t = cat.table(name)
    assert t.version in states, (t.version, sorted(states))
    assert content(t.to_arrow()) == states[t.version]
    for snap in t.history():
        if not snap.expired and snap.version in states:
            assert content(t.to_arrow(version=snap.version)) == states[snap.version], snap.version
    ctx = t.context
    referenced = sorted(ctx.store.all_file_paths(ctx.table_id))
    assert ctx.storage.missing(referenced) == [], "a file the catalog references is missing"
    return t


def no_strays(lake: Lake, t: mere.Table) -> None:
    """After a cleanup at age zero: the table's prefix holds exactly its referenced files."""
    ctx = t.context
    referenced = {object_key(t, p) for p in ctx.store.all_file_paths(ctx.table_id)}
    mine = {
        k for k in lake.objects() if k.startswith(object_key(t, t.location) + "/") and not k.endswith("/")
    }  # folder markers ("bucket-00000/") are pyarrow's, made when mere makes a folder
    assert mine == referenced
    assert [u for u in lake.uploads() if u.startswith(object_key(t, t.location) + "/")] == []


# -- storage_options with bad values ----------------------------------------------------------------------


BAD_OPTIONS = [
    ("retries", "-1"),
    ("retries", "1.5"),
    ("retries", "many"),
    ("connect_timeout", "-1"),
    ("connect_timeout", "nan"),
    ("request_timeout", "1e400"),
    ("max_connections", "0"),
    ("coalesce_bytes", "1XB"),
    ("coalesce_bytes", "-1"),
    ("allow_http", "maybe"),
    ("anonymous", "2"),
    ("allow_bucket_creation", "x"),
    ("endpoint", "http://"),
    ("endpoint", "ftp://host"),
    ("endpoint", "://x"),
    ("proxy", "http://[bad"),
    ("role_arn", "arn:bad"),
    ("endpiont", "http://127.0.0.1:1"),
    # parts of an endpoint mere would ignore, and digits of other scripts
    ("endpoint", "http://127.0.0.1:1/some/path"),
    ("endpoint", "http://user:pw@127.0.0.1:1"),
    ("endpoint", "http://127.0.0.1:1?x=1"),
    ("endpoint", "http://127.0.0.1:port"),
    ("max_connections", "\u0661\u0662"),
    ("retries", "101"),
]


def _use(lake: Lake, name: str, **opts: Any) -> None:
    """Connect with ``opts`` over the lake's options and read, then write: what a job does first."""
    options: dict[str, Any] = {**lake.options(), "retries": "0", "connect_timeout": "1", **opts}
    cat = mere.connect(lake.warehouse, catalog=lake.catalog, storage_options=options)
    t = cat.table(name)
    t.to_arrow()
    t.upsert(rows([99], 99))


@pytest.fixture
def optlake(lake: Lake) -> Lake:
    lake.connect().create_table("o.t", SCHEMA, primary_key="id", buckets=2, properties=MANUAL).upsert(
        rows(range(5), 1)
    )
    return lake


@pytest.mark.parametrize(("key", "value"), BAD_OPTIONS, ids=[f"{k}={v}" for k, v in BAD_OPTIONS])
def test_bad_storage_option_values_are_typed_errors_and_change_nothing(
    optlake: Lake, key: str, value: str
) -> None:
    with pytest.raises(MereError):
        _use(optlake, "o.t", **{key: value})
    t = optlake.connect().table("o.t")
    assert (t.version, content(t.to_arrow())) == (1, dict.fromkeys(range(5), 1))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retries", "9" * 40),
        ("max_connections", "9" * 20),
        ("endpoint", "http://[::1"),
    ],
)
def test_out_of_range_and_malformed_values_are_typed_errors(optlake: Lake, key: str, value: str) -> None:
    with contextlib.suppress(MereError):
        _use(optlake, "o.t", **{key: value})
    # anything else escapes: the test fails with the raw exception


@pytest.mark.parametrize("bad", [{"retries": 5}, {"session_token": None}, {"region": b"us-east-1"}])
def test_a_non_string_value_is_refused_without_showing_the_secrets(
    optlake: Lake, bad: dict[str, Any]
) -> None:
    secret = optlake.options()["secret_access_key"]
    with pytest.raises(MereError) as info:
        _use(optlake, "o.t", **bad)
    assert secret not in str(info.value) and secret not in repr(info.value)


def test_a_malformed_endpoint_from_the_environment_is_a_typed_error(
    optlake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://[::1")
    options = {k: v for k, v in optlake.options().items() if k != "endpoint"}
    with pytest.raises(MereError):
        mere.connect(optlake.warehouse, catalog=optlake.catalog, storage_options=options).table(
            "o.t"
        ).to_arrow()


@pytest.mark.parametrize(("key", "value"), [("AWS_ALLOW_HTTP", "maybe"), ("AWS_SKIP_SIGNATURE", "2")])
def test_bad_values_from_the_environment_are_typed_errors(
    optlake: Lake, monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    monkeypatch.setenv(key, value)
    options = {k: v for k, v in optlake.options().items() if k != "allow_http"}
    with pytest.raises(mere.errors.InvalidInput):
        mere.connect(optlake.warehouse, catalog=optlake.catalog, storage_options=options).table(
            "o.t"
        ).to_arrow()


def test_the_tightest_valid_limits_neither_hang_nor_lose_rows(optlake: Lake) -> None:
    """One connection, one byte of read-ahead, one-byte ranges: every command still finishes, right."""
    import threading

    tight = {"max_connections": "1", "read_ahead_bytes": "1", "range_bytes": "1", "coalesce_bytes": "0"}
    cat = mere.connect(
        optlake.warehouse, catalog=optlake.catalog, storage_options={**optlake.options(), **tight}
    )
    want = dict.fromkeys(range(5), 1)
    done: list[Any] = []

    def work() -> None:
        t = cat.table("o.t")
        for i in range(3):
            t.upsert(rows(range(i * 100, i * 100 + 150), i + 2))
            want.update(content(rows(range(i * 100, i * 100 + 150), i + 2)))
        done.append(content(t.to_arrow()))
        t.compact()
        t.expire(older_than=dt.timedelta(0), dry_run=False)
        time.sleep(1.1)
        t.cleanup(older_than=dt.timedelta(0), dry_run=False)
        done.append(content(t.to_arrow()))
        done.append(t.scan(filter="v = 3").count())

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(90)
    assert not worker.is_alive(), "a command hung with max_connections=1"
    assert done == [want, want, sum(1 for v in want.values() if v == 3)]


@settings(max_examples=25, deadline=None)
@given(
    key=st.sampled_from(
        [
            "retries",
            "connect_timeout",
            "request_timeout",
            "max_connections",
            "coalesce_bytes",
            "range_bytes",
            "read_ahead_bytes",
            "allow_http",
            "anonymous",
            "virtual_hosted_style_request",
        ]
    ),
    value=st.one_of(
        st.text(alphabet="0123456789.-+eEkKmMgGiIbBsS _", max_size=12),
        st.sampled_from(["nan", "-0", "0x10", "1_000", "0.0", "1e3", "ms", "5 s", "\u0661", "true"]),
    ),
)
def test_any_text_for_a_typed_option_is_accepted_or_invalid_input(key: str, value: str) -> None:
    """Parsing alone (no server): each value either resolves or is refused with ``InvalidInput``."""
    from mere.io.storage import Storage

    opts = {"endpoint": "http://127.0.0.1:9", "access_key_id": "a", "secret_access_key": "b", key: value}
    with contextlib.suppress(mere.errors.InvalidInput):
        Storage("s3://bkt/wh", opts)


# -- maintenance and writes under network faults ------------------------------------------------------------


def _prepared(lake: Lake, name: str) -> tuple[mere.Table, dict[int, dict[int, int]]]:
    """A table with history worth maintaining: writes, a compaction, writes after it, a delete by
    predicate, and the staged files of a write that never committed (for cleanup). Returns the model of
    every version."""
    t = lake.connect().create_table(name, SCHEMA, primary_key="id", buckets=3, properties=MANUAL)
    states: dict[int, dict[int, int]] = {0: {}}
    state: dict[int, int] = {}

    def step(result: Any) -> None:
        states[result.version] = dict(state)

    for i in range(3):
        batch = rows(range(i * 20, i * 20 + 40), i + 1)
        state.update(content(batch))
        step(t.upsert(batch))
    step(t.compact())
    state.update(content(rows(range(100, 130), 7)))
    step(t.upsert(rows(range(100, 130), 7)))
    for k in [k for k in state if k % 4 == 0]:
        del state[k]
    step(t.delete("id % 4 = 0"))
    t.stage(rows(range(500, 520), 9), "upsert")  # a write that never committed: cleanup's to take
    return t, states


def _op(t: mere.Table, op: str) -> Any:
    if op == "compact":
        return t.compact()
    if op == "expire":
        return t.expire(older_than=dt.timedelta(0), dry_run=False)
    if op == "cleanup":
        return t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    if op == "rollback":
        return t.rollback(2)
    if op == "upsert":
        return t.upsert(rows(range(35, 60), 11), idempotency_key="late-upsert")
    if op == "delete":
        return t.delete("v = 2", idempotency_key="late-delete")
    raise AssertionError(op)


def _expect(op: str, states: dict[int, dict[int, int]], before: int) -> dict[int, int]:
    """The rows the table has after ``op`` landed on version ``before``."""
    state = dict(states[before])
    if op == "rollback":
        return dict(states[2])
    if op == "upsert":
        state.update(content(rows(range(35, 60), 11)))
    if op == "delete":
        state = {k: v for k, v in state.items() if v != 2}
    return state


def _is_list(info: latency_proxy.RequestInfo) -> bool:
    return info.method == "GET" and any(q in info.target for q in ("list-type", "prefix=", "uploads"))


FAULTS: dict[str, Callable[[], FaultPlan]] = {
    "put-503": lambda: FaultPlan("error", every=1, methods=["PUT", "POST"]),
    "put-reset": lambda: FaultPlan("reset", every=2, methods=["PUT"]),
    "get-503": lambda: FaultPlan(decide=lambda i: "error" if i.method == "GET" and not _is_list(i) else None),
    "get-cut": lambda: FaultPlan("reset", every=1, methods=["GET"], reset_after_bytes=300),
    "head-503": lambda: FaultPlan("error", every=1, methods=["HEAD"]),
    "delete-503": lambda: FaultPlan("error", every=1, methods=["DELETE", "POST"]),
    "delete-reset": lambda: FaultPlan("reset", every=2, methods=["DELETE", "POST"]),
    "list-503": lambda: FaultPlan(decide=lambda i: "error" if _is_list(i) else None),
    "all-503": lambda: FaultPlan("error", every=1),
}

CASES = [
    ("compact", "put-503"),
    ("compact", "get-cut"),
    ("expire", "delete-503"),
    ("expire", "delete-reset"),
    ("cleanup", "delete-503"),
    ("cleanup", "list-503"),
    ("rollback", "all-503"),
    ("upsert", "all-503"),
    ("delete", "get-503"),
]


@pytest.mark.parametrize(("op", "fault"), CASES, ids=[f"{o}-{f}" for o, f in CASES])
def test_a_faulted_command_loses_nothing_and_its_retry_lands_once(
    lake: Lake, proxy: LatencyProxy, op: str, fault: str
) -> None:
    name = "m.t"
    t, states = _prepared(lake, name)
    time.sleep(1.1)  # the store's times are whole seconds: the stray staged files are then old enough
    before = t.version
    objects_before = lake.objects()
    flaky = lake.connect(proxy, retries="0").table(name)
    proxy.faults = FAULTS[fault]()
    outcome: Any
    try:
        outcome = _op(flaky, op)
    except MereError as e:
        outcome = e
    proxy.faults = None
    assert proxy.stats.faults, "no fault was injected: the case tests nothing"

    direct = lake.connect()
    now = direct.table(name).version
    if isinstance(outcome, MereError) and op in ("compact", "rollback", "upsert", "delete"):
        # refused: the table is exactly as it was, and the objects the command uploaded are gone again
        assert now == before, f"a failed {op} committed: {outcome!r}"
        left = {k for k in lake.objects() - objects_before if not k.endswith("/")}
        assert left == set(), f"a failed {op} left objects behind: {sorted(left)}"
    if now > before:
        assert now == before + 1
        states[now] = _expect(op, states, before)
    check(direct, name, states)

    # The retry, with no faults: lands once (idempotency keys), and the table reads as the model says.
    t = direct.table(name)
    again = _op(t, op)
    if op in ("upsert", "delete"):
        assert again.already_committed == (now > before)
    final = t.version
    if final > now:
        assert final == now + 1
        states[final] = _expect(op, states, now)
    if op in ("upsert", "delete"):
        assert final == before + 1
    check(direct, name, states)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    time.sleep(1.1)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    check(direct, name, states)
    no_strays(lake, t)


# -- objects mere did not create, beside and inside the table's prefix ---------------------------------------


def _foreign(loc: str) -> tuple[list[str], list[str]]:
    """(beside, inside): keys of objects other tools put next to and under a table's location ``loc``."""
    parent = loc.rsplit("/", 1)[0]
    beside = [
        f"{loc}-old/bucket-00000/part-{HEX}.parquet",  # a sibling prefix extending the location: mere's names
        f"{loc}x/del-{HEX}.parquet",
        f"{loc}.parquet",
        f"{loc}_SUCCESS",
        f"{parent}/part-{HEX}.parquet",  # the namespace's folder
        f"{parent.rsplit('/', 1)[0]}/log-{HEX}.parquet",  # the warehouse root
    ]
    inside = [
        f"{loc}/_SUCCESS",
        f"{loc}/bucket-00000/part-{HEX}.parquet.crc",
        f"{loc}/bucket-00000/.part-{HEX}.parquet.crc",
        f"{loc}/bucket-00001/part-{HEX[:31]}.parquet",
        f"{loc}/bucket-00001/PART-{HEX}.parquet",
        f"{loc}/bucket-00000/data-{HEX}.parquet",
        f"{loc}/mine/notes.txt",
        f"{loc}/bucket-00007/part-{HEX}.parquet.tmp",
    ]
    return beside, inside


def test_maintenance_and_purge_keep_every_object_mere_did_not_create(lake: Lake) -> None:
    cat = lake.connect()
    t, states = _prepared(lake, "f.t")
    _prepared(lake, "f.t2")  # a neighbour table: its objects are not f.t's either
    loc = object_key(t, t.location)
    beside, inside = _foreign(loc)
    for key in beside + inside:
        lake.put(key)
    client = lake.client()
    uploads = {}
    for key in (f"{loc}-old/bucket-00000/part-{'ab' * 16}.parquet", f"{loc}/bucket-00000/backup.parquet"):
        uploads[key] = client.create_multipart_upload(Bucket=lake.bucket, Key=key)["UploadId"]
    neighbour = {k for k in lake.objects() if k.startswith(object_key(t, cat.table("f.t2").location) + "/")}
    time.sleep(1.1)
    before = set(lake.objects())

    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    r = t.rollback(t.history()[-2].version)  # back over the delete
    states[r.version] = states[r.version - 2]
    t.compact()
    states[t.version] = states[r.version]
    t.expire(older_than=dt.timedelta(0), dry_run=False)
    time.sleep(1.1)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    check(cat, "f.t", states)
    now = set(lake.objects())
    assert set(beside + inside) <= now, sorted(set(beside + inside) - now)
    assert neighbour <= now
    assert set(uploads) <= set(lake.uploads())
    assert before - now <= {k for k in before if k.startswith(loc + "/") and k not in inside}

    cat.drop_table("f.t", purge=True)
    now = set(lake.objects())
    assert set(beside + inside) <= now, sorted(set(beside + inside) - now)
    assert neighbour <= now
    assert set(uploads) <= set(lake.uploads())
    assert not [k for k in now if k.startswith(loc + "/") and k not in inside and not k.endswith("/")]
    for key, upload in uploads.items():
        client.abort_multipart_upload(Bucket=lake.bucket, Key=key, UploadId=upload)


def test_purge_keeps_a_foreign_object_written_while_it_runs(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    cat = lake.connect()
    t, _ = _prepared(lake, "p.t")
    loc = object_key(t, t.location)
    late = f"{loc}/exports/report.csv"
    real = mere.io.storage.Storage.list_files

    def list_then_someone_writes(self: Any, rel_dir: str) -> Any:
        out = real(self, rel_dir)
        lake.put(late, b"written by another tool just now")
        return out

    monkeypatch.setattr(mere.io.storage.Storage, "list_files", list_then_someone_writes)
    cat.drop_table("p.t", purge=True)
    monkeypatch.undo()
    assert late in lake.objects()


def test_purge_keeps_a_foreign_object_whose_key_ends_in_a_slash(lake: Lake) -> None:
    """A key ending in ``/`` with a body is an object someone stored (not an empty folder marker)."""
    cat = lake.connect()
    t, _ = _prepared(lake, "q.t")
    loc = object_key(t, t.location)
    theirs = lake.put(f"{loc}/notes/", b"someone's notes, stored under a key that ends in a slash")
    time.sleep(1.1)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert theirs in lake.objects()
    cat.drop_table("q.t", purge=True)
    assert theirs in lake.objects()


# -- two writer processes, maintenance and a reader over slow, flaky S3, with kills -------------------------

CHAOS = "c.t"


def _chaos_rows(key: str) -> pa.Table:
    rng = random.Random(key)
    return rows(sorted(rng.sample(range(300), 25)), int(key.split("-")[2]) + 1000 * int(key.split("-")[1]))


def _chaos_apply(state: dict[int, int], key: str) -> None:
    if key.startswith("d-"):
        n = int(key.split("-")[3])
        for k in [k for k in state if k % n == 0]:
            del state[k]
    else:
        state.update(content(_chaos_rows(key)))


def _chaos_run(t: mere.Table, key: str) -> Any:
    if key.startswith("d-"):
        return t.delete(f"id % {int(key.split('-')[3])} = 0", idempotency_key=key)
    return t.upsert(_chaos_rows(key), idempotency_key=key)


def _chaos_keys(w: int, count: int) -> list[str]:
    rng = random.Random(50 + w)
    return [
        f"d-{w}-{i}-{rng.randrange(5, 12)}" if rng.random() < 0.25 else f"u-{w}-{i}" for i in range(count)
    ]


def _log(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _chaos_writer(args: tuple[str, str, dict[str, str]], keys: list[str], log: str) -> None:
    done: set[str] = set()
    with contextlib.suppress(FileNotFoundError), open(log) as f:
        done = {ln.split()[1] for ln in f if ln.startswith("ack ")}
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    for key in keys:
        if key in done:
            continue
        for attempt in range(100):
            try:
                r = _chaos_run(cat.table(CHAOS), key)
                _log(log, f"ack {key} {r.version} {int(r.no_change)}")
                break
            except MereError as e:
                _log(log, f"err {key} {type(e).__name__} {attempt}")
            except Exception as e:
                _log(log, f"raw {key} {type(e).__name__}: {str(e)[:200]!r}")
            time.sleep(0.05)


def _chaos_maintenance(args: tuple[str, str, dict[str, str]], seconds: float, log: str) -> None:
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    rng = random.Random(os.getpid())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        op = rng.choice(["compact", "compact", "expire", "cleanup", "rollback"])
        try:
            t = cat.table(CHAOS)
            if op == "compact":
                t.compact()
            elif op == "expire":
                t.expire(older_than=dt.timedelta(seconds=4), dry_run=False)
            elif op == "cleanup":
                t.cleanup(older_than=dt.timedelta(0), dry_run=False)  # while writes upload
            elif t.version > 3:
                t.rollback(t.version - 1)
            _log(log, f"ok {op}")
        except MereError as e:
            _log(log, f"err {op} {type(e).__name__} {str(e)[:200]!r}")
        except Exception as e:
            _log(log, f"raw {op} {type(e).__name__}: {str(e)[:200]!r}")
        time.sleep(0.3)


def _chaos_reader(args: tuple[str, str, dict[str, str]], seconds: float, log: str) -> None:
    cat = mere.connect(args[0], catalog=args[1], storage_options=args[2])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            t = cat.table(CHAOS)
            v = t.version
            got = content(t.scan(version=v).to_arrow())
            _log(log, f"read {v} {sorted(got.items())!r}")
        except MereError as e:
            _log(log, f"err read {type(e).__name__} {str(e)[:200]!r}")
        except Exception as e:
            _log(log, f"raw read {type(e).__name__}: {str(e)[:200]!r}")
        time.sleep(0.1)


def _chaos_model(t: mere.Table) -> dict[int, dict[int, int]]:
    states: dict[int, dict[int, int]] = {0: {}}
    for snap in t.history():
        if snap.version == 0:
            continue
        state = dict(states[snap.version - 1])
        if snap.operation == "rollback":
            state = dict(states[int(snap.summary["rollback_to"])])
        elif snap.operation not in ("compact", "set_properties"):
            assert snap.idempotency_key, (snap.version, snap.operation, snap.summary)
            _chaos_apply(state, snap.idempotency_key)
        states[snap.version] = state
    return states


def test_two_writer_processes_maintenance_and_a_reader_over_flaky_slow_s3_with_kills(
    lake: Lake, proxy: LatencyProxy, tmp_path: Path
) -> None:
    lake.connect().create_table(CHAOS, SCHEMA, primary_key="id", buckets=2, properties=MANUAL)
    proxy.rtt_ms = 30
    proxy.faults = FaultPlan("error", probability=0.04, seed=50)  # 503s: retried by the client
    args = (lake.warehouse, lake.catalog, lake.options(proxy))
    keys = {w: _chaos_keys(w, 10) for w in range(2)}
    logs = {name: str(tmp_path / f"{name}.log") for name in ("w0", "w1", "maint", "reader")}
    seconds = 20.0
    ctx = mp.get_context("spawn")
    procs: dict[str, Any] = {}

    def start(name: str) -> None:
        if name.startswith("w"):
            p = ctx.Process(target=_chaos_writer, args=(args, keys[int(name[1])], logs[name]))
        elif name == "maint":
            p = ctx.Process(target=_chaos_maintenance, args=(args, seconds, logs[name]))
        else:
            p = ctx.Process(target=_chaos_reader, args=(args, seconds, logs[name]))
        p.start()
        procs[name] = p

    rng = random.Random(50)
    kills = 0
    try:
        for name in logs:
            start(name)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds + 90:
            time.sleep(rng.uniform(1.5, 3.0))
            alive = [n for n, p in procs.items() if p.is_alive()]
            if not any(n.startswith("w") for n in alive):
                break
            if time.monotonic() - t0 < seconds and alive:
                victim = rng.choice([n for n in alive if n != "reader"] or alive)
                os.kill(procs[victim].pid, signal.SIGKILL)  # mid-upload, mid-commit, mid-cleanup: wherever
                procs[victim].join()
                kills += 1
                if victim != "maint" or time.monotonic() - t0 < seconds - 3:
                    start(victim)
        for p in procs.values():
            p.join(60)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join()
        proxy.faults = None
    assert kills >= 3

    cat = lake.connect()
    t = cat.table(CHAOS)
    landed = [s.idempotency_key for s in t.history() if s.idempotency_key]
    assert len(landed) == len(set(landed)), f"an operation landed twice: {landed}"
    states = _chaos_model(t)
    t = check(cat, CHAOS, states)
    history = {s.idempotency_key: s.version for s in t.history() if s.idempotency_key}
    text = {name: Path(path).read_text() if Path(path).exists() else "" for name, path in logs.items()}
    raw = [ln for body in text.values() for ln in body.splitlines() if ln.startswith("raw ")]
    assert raw == [], raw[:5]
    for w in range(2):
        acks = [ln.split() for ln in text[f"w{w}"].splitlines() if ln.startswith("ack ")]
        assert {a[1] for a in acks} == set(keys[w]), "a writer never finished its work"
        for _, key, version, no_change in acks:
            if no_change == "1":
                assert key not in history
            else:
                assert history.get(key) == int(version), (key, version, history.get(key))
    reads = [ln.split(" ", 2) for ln in text["reader"].splitlines() if ln.startswith("read ")]
    assert reads, text["reader"][-1000:]
    for _, v, got in reads:
        assert got == repr(sorted(states[int(v)].items())), f"the reader saw version {v} wrong"
    assert "StorageError" not in text["maint"], text["maint"][-2000:]
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    time.sleep(1.1)
    t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    check(cat, CHAOS, states)
    no_strays(lake, t)


# -- readers while maintenance runs ---------------------------------------------------------------------------


def test_a_reader_mid_scan_while_compact_expire_and_cleanup_run_gets_its_rows_or_a_typed_error(
    lake: Lake,
) -> None:
    cat = lake.connect()
    t = cat.create_table(
        "r.t", SCHEMA, primary_key="id", buckets=8, properties={**MANUAL, "read.window-bytes": "1KiB"}
    )
    state: dict[int, int] = {}
    for i in range(4):
        batch = rows(range(i * 500, i * 500 + 2000), i)
        state.update(content(batch))
        t.upsert(batch)
    pinned = t.version
    planned = cat.table("r.t").scan(version=pinned)  # planned, not yet read
    streaming = cat.table("r.t").scan(version=pinned).to_batches()
    first = next(streaming)  # a reader half-way through its stream

    other = lake.connect().table("r.t")
    other.compact()
    other.upsert(rows(range(9000, 9010), 9))
    other.expire(older_than=dt.timedelta(0), dry_run=False)  # the pinned version's files go
    time.sleep(1.1)
    other.cleanup(older_than=dt.timedelta(0), dry_run=False)

    outcomes = []
    for read in (lambda: pa.Table.from_batches([first, *streaming]), planned.to_arrow):
        try:
            got = content(read())
        except MereError as e:  # StorageError or NoSuchVersion: typed, nothing partial
            outcomes.append(type(e).__name__)
        else:
            assert got == state, "a reader got rows of no version"
            outcomes.append("rows")
    # The table itself lost nothing.
    final = dict(state)
    final.update(content(rows(range(9000, 9010), 9)))
    assert content(lake.connect().table("r.t").to_arrow()) == final
    assert all(o in ("rows", "StorageError", "NoSuchVersion") for o in outcomes), outcomes


def test_a_commit_of_staged_files_whose_existence_check_fails_is_refused_and_lands_once_later(
    lake: Lake, proxy: LatencyProxy
) -> None:
    t = lake.connect(proxy, retries="0").create_table(
        "s.t", SCHEMA, primary_key="id", buckets=2, properties=MANUAL
    )
    t.upsert(rows(range(10), 1))
    staged = t.stage(rows(range(5, 15), 2), "upsert")
    proxy.faults = FaultPlan("error", every=1, methods=["HEAD", "GET"])
    with pytest.raises(MereError):
        t.commit([staged], idempotency_key="staged-1")
    proxy.faults = None
    direct = lake.connect().table("s.t")
    assert (direct.version, content(direct.to_arrow())) == (1, dict.fromkeys(range(10), 1))
    r = t.commit([staged], idempotency_key="staged-1")
    assert not r.already_committed and r.version == 2
    assert t.commit([staged], idempotency_key="staged-1").already_committed
    want = {**dict.fromkeys(range(10), 1), **dict.fromkeys(range(5, 15), 2)}
    assert content(lake.connect().table("s.t").to_arrow()) == want


STALLS = [
    ("upsert", ["PUT", "POST"]),
    ("expire", ["DELETE", "POST"]),
    ("cleanup", ["GET"]),  # the listing (and nothing else cleanup does is a GET)
]


@pytest.mark.parametrize(("op", "methods"), STALLS, ids=[o for o, _ in STALLS])
def test_a_request_that_is_never_answered_times_out_and_loses_nothing(
    lake: Lake, proxy: LatencyProxy, op: str, methods: list[str]
) -> None:
    import threading

    name = "st.t"
    t, states = _prepared(lake, name)
    time.sleep(1.1)
    before = t.version
    flaky = lake.connect(proxy, retries="1", request_timeout="1s", connect_timeout="1s").table(name)
    proxy.faults = FaultPlan("stall", every=1, methods=methods, limit=2)  # then the retries get through
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(_op(flaky, op))
        except MereError as e:
            outcome.append(e)
        except Exception as e:
            outcome.append(("raw", e))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    proxy.faults = None
    assert not worker.is_alive(), f"{op} hung on a request that is never answered"
    assert proxy.stats.faults["stall"] == 2
    assert not isinstance(outcome[0], (tuple, MereError)), outcome  # retried: the command succeeded
    direct = lake.connect()
    now = direct.table(name).version
    assert now == before + (op in ("compact", "upsert"))
    if now > before:
        states[now] = _expect(op, states, before)
    check(direct, name, states)
    if op in ("expire", "cleanup"):
        time.sleep(1.1)
        direct.table(name).cleanup(older_than=dt.timedelta(0), dry_run=False)
        no_strays(lake, direct.table(name))


def test_a_failed_write_whose_undo_also_fails_stays_invisible_and_cleanup_takes_its_files(
    lake: Lake, proxy: LatencyProxy
) -> None:
    name = "u.t"
    t, states = _prepared(lake, name)
    before = t.version
    flaky = lake.connect(proxy, retries="0").table(name)
    # Bucket 1's upload fails; the other buckets' files land, and deleting them again fails too.
    proxy.faults = FaultPlan(
        decide=lambda i: (
            "error"
            if (i.method == "PUT" and "bucket-00001/" in i.target) or i.method in ("DELETE", "POST")
            else None
        )
    )
    with pytest.raises(MereError):
        flaky.upsert(rows(range(0, 300), 42), idempotency_key="doomed")
    proxy.faults = None
    direct = lake.connect()
    assert direct.table(name).version == before
    check(direct, name, states)
    assert "doomed" not in [s.idempotency_key for s in direct.table(name).history()]
    time.sleep(1.1)
    direct.table(name).cleanup(older_than=dt.timedelta(0), dry_run=False)
    check(direct, name, states)
    no_strays(lake, direct.table(name))
    r = direct.table(name).upsert(rows(range(0, 300), 42), idempotency_key="doomed")
    assert not r.already_committed
    states[r.version] = {**states[before], **dict.fromkeys(range(300), 42)}
    check(direct, name, states)


def test_a_purge_whose_deletes_fail_can_be_retried_until_the_files_are_gone(
    lake: Lake, proxy: LatencyProxy
) -> None:
    t, _ = _prepared(lake, "g.t")
    loc = object_key(t, t.location)
    flaky = lake.connect(proxy, retries="0")
    proxy.faults = FaultPlan("error", every=1, methods=["DELETE", "POST"])
    with pytest.raises(MereError):
        flaky.drop_table("g.t", purge=True)
    proxy.faults = None
    with contextlib.suppress(mere.errors.NoSuchTable):  # the retry a job makes after the error
        lake.connect().drop_table("g.t", purge=True)
    left = sorted(k for k in lake.objects() if k.startswith(loc + "/") and not k.endswith("/"))
    assert left == [], f"files of the dropped table no command can remove: {left}"
