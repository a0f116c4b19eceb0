"""Object-store IO against the real SeaweedFS server, through the latency/fault proxy where it matters.

- ``storage_options``: documented keys, aliases, ``AWS_*`` environment fallback, strict validation, and
  secrets that never reach a repr, an error message or a log record.
- Requests: no HEAD (the catalog knows sizes), one GET per footer, no listing, no copy/rename in commits.
- Concurrency at WAN latency: a scan of 40 files at 100 ms RTT takes a few round trips, not 40+; the
  bucket files of one write upload concurrently; files from 10 MiB go up as multipart uploads.
- Faults: reads retry 503s, resets (also mid-body) and stalls, and return the right rows; writes retry
  transient faults, and a write that still fails leaves the table, the bucket and pending multipart
  uploads as they were (a failure while encoding publishes nothing at all).
- Backpressure: the read-ahead budget bounds what a scan holds ahead of the merge.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from latency_proxy import FaultPlan, LatencyProxy, RequestInfo

import mere
from maintenance import MANUAL
from mere import errors
from mere.io import options as O
from mere.io.storage import Storage
from services import SeaweedServer

pytestmark = pytest.mark.timeout(180)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


def rows(ids: Any, v: int = 0) -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({"id": ids, "v": ids * 10 + v, "s": pa.array([f"s{i % 97}" for i in ids])}, schema=SCHEMA)


def sorted_rows(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


def objects(seaweed: SeaweedServer, prefix: str) -> set[str]:
    import pyarrow.fs as pafs

    infos = seaweed.filesystem().get_file_info(
        pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
    )
    return {i.path for i in infos if i.type == pafs.FileType.File}


def pending_uploads(seaweed: SeaweedServer, bucket: str) -> list[dict[str, Any]]:
    client = boto3.client(
        "s3",
        endpoint_url=seaweed.endpoint,
        aws_access_key_id=seaweed.access_key,
        aws_secret_access_key=seaweed.secret_key,
        region_name=seaweed.region,
    )
    return list(client.list_multipart_uploads(Bucket=bucket).get("Uploads", []))


def state(t: mere.Table) -> dict[str, Any]:
    return {
        "version": t.version,
        "history": [(c.version, c.operation) for c in t.history()],
        "files": sorted(t.files().column("path").to_pylist()),
        "rows": sorted_rows(t.to_arrow()),
    }


def is_list(info: RequestInfo) -> bool:
    return info.method == "GET" and bool(
        re.search(r"[?&](list-type|prefix|delimiter|uploads)\b", info.target)
    )


# -- storage_options -----------------------------------------------------------------------------------


def test_storage_options_canonical_names_aliases_and_environment() -> None:
    given = {"aws_access_key_id": "AK", "SECRET": "SK", "aws_endpoint": "http://h:1", "Timeout": "2s"}
    assert O.canonical(given) == {
        "access_key_id": "AK",
        "secret_access_key": "SK",
        "endpoint": "http://h:1",
        "request_timeout": "2s",
    }
    env = {
        "AWS_ACCESS_KEY_ID": "EAK",
        "AWS_SECRET_ACCESS_KEY": "ESK",
        "AWS_ENDPOINT_URL": "http://e:2",
        "AWS_REGION": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
    }
    resolved = O.resolve_options({"access_key_id": "AK", "secret_access_key": "SK"}, environ=env)
    assert resolved["access_key_id"] == "AK" and resolved["secret_access_key"] == "SK"  # explicit wins
    assert resolved["endpoint"] == "http://e:2" and resolved["region"] == "eu-west-1"  # env fills the rest
    assert resolved["retries"] == "5" and resolved["max_connections"] == "64"  # then defaults
    assert O.as_seconds("t", "500ms") == 0.5 and O.as_bytes("b", "2MiB") == 2 << 20
    with pytest.raises(errors.InvalidInput, match="unknown storage option 'endpiont'"):
        O.canonical({"endpiont": "x"})
    with pytest.raises(errors.InvalidInput, match="'retries' must be an integer"):
        mere.connect("s3://bkt/wh", catalog="sqlite://", storage_options={"retries": "many"})
    with pytest.raises(errors.InvalidInput, match="go together"):
        mere.connect("s3://bkt/wh", catalog="sqlite://", storage_options={"access_key_id": "AK"})


def test_docs_table_lists_every_storage_option() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "storage.md").read_text()
    documented = set(re.findall(r"^\|\s*`([a-z_]+)`", doc, re.M))
    assert {o.name for o in O.OPTIONS} <= documented, "docs/storage.md must list every storage option"


def test_environment_fallback_reaches_the_server(
    seaweed: SeaweedServer, s3_warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweed.endpoint)
    monkeypatch.setenv("AWS_REGION", seaweed.region)
    cat = mere.connect(s3_warehouse, catalog=f"sqlite:///{tmp_path / 'c.db'}")
    t = cat.create_table("env.t", SCHEMA, primary_key=["id"], buckets=2)
    t.upsert(rows(range(10)))
    assert t.scan().count() == 10


def test_secrets_never_appear_in_reprs_errors_or_logs(
    seaweed: SeaweedServer, s3_warehouse: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    good = seaweed.storage_options()
    cat = mere.connect(s3_warehouse, catalog=f"sqlite:///{tmp_path / 'c.db'}", storage_options=good)
    t = cat.create_table("sec.t", SCHEMA, primary_key=["id"], buckets=2)
    t.upsert(rows(range(5)))
    wrong_secret = "wrong-" + seaweed.secret_key[::-1]
    secrets = [seaweed.secret_key, wrong_secret]
    texts = [repr(cat), repr(cat.storage), repr(t), str(O.redact(good)), repr(t.scan())]

    bad = mere.connect(
        s3_warehouse,
        catalog=f"sqlite:///{tmp_path / 'c.db'}",
        storage_options={**good, "secret_access_key": wrong_secret, "retries": "0"},
    )
    texts.append(repr(bad))
    bt = bad.table("sec.t")
    for action in (lambda: bt.upsert(rows([7])), lambda: bt.scan().to_arrow()):
        with pytest.raises(errors.StorageError) as info:
            action()
        err: BaseException | None = info.value
        while err is not None:  # the whole cause chain
            texts += [str(err), repr(err)]
            err = err.__cause__ or err.__context__
    with pytest.raises(errors.InvalidInput) as bad_value:
        mere.connect(
            s3_warehouse,
            catalog="sqlite://",
            storage_options={**good, "secret_access_key": wrong_secret, "anonymous": "perhaps"},
        )
    texts.append(str(bad_value.value))
    texts += [r.getMessage() for r in caplog.records]
    assert any("SIGNATURE_DOES_NOT_MATCH" in x or "SignatureDoesNotMatch" in x for x in texts)
    for secret in secrets:
        assert not [x for x in texts if secret in x], "a secret leaked into a repr, error or log record"
    assert "***" in repr(cat) and O.redact_url("http://u:pw@h:1/x") == "http://***@h:1/x"


# -- requests and concurrency --------------------------------------------------------------------------


def test_reads_need_no_head_no_listing_and_one_get_per_footer(
    cat_direct: mere.Catalog, proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy
) -> None:
    t = cat_direct.create_table("req.t", SCHEMA, primary_key=["id"], buckets=2)
    for i in range(3):
        t.upsert(rows(range(i * 100, i * 100 + 150), v=i))
    files = t.files().num_rows
    expected = sorted_rows(t.to_arrow())
    pt = proxied_catalog().table("req.t")
    proxy.stats.reset()
    assert sorted_rows(pt.to_arrow()) == expected
    methods = dict(proxy.stats.by_method)
    assert set(methods) == {"GET"}, methods  # no HEAD: sizes come from the catalog
    assert not [i for i in proxy.stats.log if is_list(i)]
    assert pt.storage.stats.footers_read == files
    assert methods["GET"] <= 2 * files  # one footer GET and one coalesced data GET per file
    proxy.stats.reset()
    assert sorted_rows(pt.to_arrow()) == expected  # footers cached now: data GETs only
    assert proxy.stats.by_method["GET"] <= files


def test_commits_neither_list_nor_copy_nor_delete(
    proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy
) -> None:
    t = proxied_catalog().create_table("req.w", SCHEMA, primary_key=["id"], buckets=4)
    proxy.stats.reset()
    t.upsert(rows(range(1000)))
    t.delete("id < 10")
    # One PutObject per file; the delete reads keys (GET), never lists, copies, renames or deletes.
    assert set(proxy.stats.by_method) <= {"PUT", "GET"}, dict(proxy.stats.by_method)
    assert not [i for i in proxy.stats.log if "x-amz-copy-source" in i.headers or is_list(i)]
    assert t.scan().count() == 990


def test_scan_of_40_files_at_100ms_rtt_takes_a_few_round_trips(
    cat_direct: mere.Catalog, proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy
) -> None:
    t = cat_direct.create_table("conc.t", SCHEMA, primary_key=["id"], buckets=4, properties=MANUAL)
    for i in range(10):
        t.upsert(rows(range(i * 50, i * 50 + 400), v=i))
    assert t.files().num_rows == 40
    expected = sorted_rows(t.to_arrow())
    pt = proxied_catalog().table("conc.t")
    proxy.rtt_ms = 100
    sorted_rows(pt.to_arrow())  # connections up (each new one costs a round trip), footers cached
    pt.storage.clear_cache()
    proxy.stats.reset()
    t0 = time.perf_counter()
    got = pt.to_arrow()
    elapsed = time.perf_counter() - t0
    print(f"40 files at 100 ms RTT: {elapsed:.3f} s, {proxy.stats.max_in_flight} requests in flight at most")
    assert sorted_rows(got) == expected
    # One after another: 40 footers + 40 data reads = 80 round trips (8 s). Concurrently: ~3-6.
    assert elapsed < 1.5, f"40 files at 100 ms RTT took {elapsed:.2f} s"
    assert proxy.stats.max_in_flight >= 10
    assert proxy.stats.by_method["GET"] >= 80


def test_bucket_files_of_one_write_upload_concurrently(
    proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy
) -> None:
    t = proxied_catalog().create_table("conc.w", SCHEMA, primary_key=["id"], buckets=8)
    t.upsert(rows(range(100)))  # connections up
    proxy.rtt_ms = 100
    proxy.stats.reset()
    t0 = time.perf_counter()
    t.upsert(rows(range(5000)))
    elapsed = time.perf_counter() - t0
    print(f"8 bucket files at 100 ms RTT: {elapsed:.3f} s")
    assert proxy.stats.by_method["PUT"] == 8
    assert proxy.stats.max_in_flight >= 4
    # One after another: >= 8 x 2 round trips (each PUT waits for "100 Continue") = 1.6 s; the margin absorbs
    # a loaded machine, max_in_flight above is the structural proof.
    assert elapsed < 1.2, f"8 uploads at 100 ms RTT took {elapsed:.2f} s (one after another: >= 1.6 s)"


def test_large_files_upload_as_multipart_with_parallel_parts(
    proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy, seaweed: SeaweedServer, s3_bucket: str
) -> None:
    t = proxied_catalog().create_table("big.t", SCHEMA, primary_key=["id"], buckets=1)
    rng = np.random.default_rng(3)
    ids = rng.permutation(1_500_000)
    data = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array(rng.integers(0, 1 << 62, len(ids))),
            "s": pa.array(rng.integers(0, 1 << 62, len(ids)).astype(str)),
        },
        schema=SCHEMA,
    )
    proxy.stats.reset()
    proxy.rtt_ms = 40  # each part takes a round trip at least: parts sent one after another cannot overlap
    t.upsert(data)
    proxy.rtt_ms = 0
    size = t.files().column("size_bytes")[0].as_py()
    assert size > 20 * 1024 * 1024
    parts = [i for i in proxy.stats.log if i.method == "PUT" and "partNumber=" in i.target]
    assert len(parts) == -(-size // (10 * 1024 * 1024))  # 10 MiB parts
    assert proxy.stats.by_method["POST"] == 2  # create + complete
    assert proxy.stats.max_in_flight >= 2
    assert (
        t.scan(filter="id = 123").to_arrow().column("v").to_pylist()
        == data.filter(pa.compute.equal(data["id"], 123)).column("v").to_pylist()
    )
    assert not pending_uploads(seaweed, s3_bucket)


def test_read_ahead_budget_bounds_what_a_scan_holds(
    cat_direct: mere.Catalog, proxied_catalog: Callable[..., mere.Catalog]
) -> None:
    t = cat_direct.create_table(
        "mem.t",
        SCHEMA,
        primary_key=["id"],
        buckets=2,
        properties={"read.window-bytes": str(64 * 1024), "write.row-group-rows": "2000"},
    )
    for i in range(4):
        t.upsert(rows(range(i * 7000, i * 7000 + 20000), v=i))
    expected = sorted_rows(t.to_arrow())
    for budget in ("0", "200KiB", "64MiB"):
        pt = proxied_catalog(read_ahead_bytes=budget).table("mem.t")
        assert sorted_rows(pt.to_arrow()) == expected
        used = pt.storage.read_ahead
        assert used.used == 0 and used.peak <= used.limit
        if budget == "0":
            assert used.peak == 0
        else:
            assert used.peak > 0  # windows were fetched ahead of the merge
    batches = proxied_catalog(read_ahead_bytes="200KiB").table("mem.t").scan().to_batches()
    next(batches)
    batches.close()  # abandoning a scan releases its budget


# -- faults --------------------------------------------------------------------------------------------


def _cycle(
    kinds: list[str | None], methods: tuple[str, ...] = ("GET",)
) -> Callable[[RequestInfo], str | None]:
    count = [0]

    def decide(info: RequestInfo) -> str | None:
        if info.method not in methods:
            return None
        count[0] += 1
        return kinds[count[0] % len(kinds)]

    return decide


def test_reads_retry_errors_and_resets_and_return_correct_rows(
    cat_direct: mere.Catalog, proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy
) -> None:
    t = cat_direct.create_table("fault.r", SCHEMA, primary_key=["id"], buckets=4)
    for i in range(4):
        t.upsert(rows(range(i * 300, i * 300 + 1000), v=i))
    t.delete("id < 100")
    expected = sorted_rows(t.to_arrow())
    pt = proxied_catalog().table("fault.r")
    # 503 SlowDown and resets before any response byte: the client backs off (long for throttling) and
    # retries. Then resets in the middle of responses: a cut body must never decode into wrong rows.
    proxy.faults = FaultPlan(decide=_cycle(["error", None, "reset", None, None]), limit=8)
    assert sorted_rows(pt.to_arrow()) == expected
    assert proxy.stats.faults["error"] >= 2 and proxy.stats.faults["reset"] >= 2
    for cut in (700, 5000):
        proxy.faults = FaultPlan("reset", every=3, methods=["GET"], reset_after_bytes=cut, limit=6)
        pt.storage.clear_cache()
        assert sorted_rows(pt.to_arrow()) == expected
        assert sorted_rows(pt.scan(filter="id in (150, 2000)").to_arrow()) == [
            r for r in expected if r["id"] in (150, 2000)
        ]
    assert proxy.stats.faults["reset"] >= 10


def test_stalled_requests_time_out_and_are_retried(
    cat_direct: mere.Catalog, proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy
) -> None:
    t = cat_direct.create_table("fault.s", SCHEMA, primary_key=["id"], buckets=2)
    t.upsert(rows(range(500)))
    pt = proxied_catalog(request_timeout="1s").table("fault.s")
    proxy.faults = FaultPlan("stall", every=1, limit=2, methods=["GET"])
    t0 = time.perf_counter()
    assert pt.scan().count() == 500
    assert time.perf_counter() - t0 >= 0.9
    assert proxy.stats.faults["stall"] == 2


def test_a_read_that_keeps_failing_raises_a_storage_error(
    cat_direct: mere.Catalog, proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy
) -> None:
    t = cat_direct.create_table("fault.f", SCHEMA, primary_key=["id"], buckets=2)
    t.upsert(rows(range(100)))
    pt = proxied_catalog(retries="1").table("fault.f")
    proxy.faults = FaultPlan("error", every=1, methods=["GET"])
    with pytest.raises(errors.StorageError, match=r"reading .*fault/f-.*part-"):
        pt.to_arrow()


def test_writes_retry_transient_faults(
    proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy, seaweed: SeaweedServer, s3_bucket: str
) -> None:
    t = proxied_catalog().create_table("fault.w", SCHEMA, primary_key=["id"], buckets=4)
    proxy.faults = FaultPlan(decide=_cycle(["error", None, "reset", None], methods=("PUT", "POST")))
    t.upsert(rows(range(2000)))
    t.upsert(rows(range(1000, 3000), v=1))
    proxy.faults = None
    assert proxy.stats.faults["error"] + proxy.stats.faults["reset"] >= 4
    assert sorted_rows(t.to_arrow()) == sorted_rows(
        pa.concat_tables([rows(range(1000)), rows(range(1000, 3000), v=1)])
    )
    assert len(objects(seaweed, f"{t.storage.root}/{t.location}")) == t.files().num_rows


@pytest.mark.parametrize("catalog_url", ["sqlite", "postgres"], indirect=True)
def test_a_write_that_still_fails_changes_nothing(
    catalog_url: str, seaweed: SeaweedServer, proxy: LatencyProxy, s3_warehouse: str, s3_bucket: str
) -> None:
    opts = seaweed.storage_options(proxy.endpoint, retries="1")
    t = mere.connect(s3_warehouse, catalog=catalog_url, storage_options=opts).create_table(
        "fault.x", SCHEMA, primary_key=["id"], buckets=4
    )
    t.upsert(rows(range(100)))
    before = state(t)
    before_objects = objects(seaweed, f"{t.storage.root}/{t.location}")
    # Every upload to bucket 2 fails; the other buckets' files upload fine (and must be cleaned up).
    proxy.faults = FaultPlan(
        decide=lambda i: "error" if i.method == "PUT" and "bucket-00002" in i.target else None
    )
    with pytest.raises(errors.StorageError, match="bucket-00002"):
        t.upsert(rows(range(50, 5000), v=9))
    proxy.faults = None
    assert state(t) == before
    assert objects(seaweed, f"{t.storage.root}/{t.location}") == before_objects
    assert not pending_uploads(seaweed, s3_bucket)


def test_a_failed_multipart_upload_is_aborted_and_never_visible(
    proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy, seaweed: SeaweedServer, s3_bucket: str
) -> None:
    t = proxied_catalog(retries="1").create_table("fault.mp", SCHEMA, primary_key=["id"], buckets=1)
    t.upsert(rows(range(10)))
    before = state(t)
    before_objects = objects(seaweed, f"{t.storage.root}/{t.location}")
    rng = np.random.default_rng(5)
    big = pa.table(
        {
            "id": pa.array(rng.permutation(1_500_000), pa.int64()),
            "v": pa.array(rng.integers(0, 1 << 62, 1_500_000)),
            "s": pa.nulls(1_500_000, pa.string()),
        }
    )
    # The second part never gets through: the upload is created, part 1 lands, completion never happens.
    proxy.faults = FaultPlan(decide=lambda i: "error" if "partNumber=2" in i.target else None)
    with pytest.raises(errors.StorageError):
        t.upsert(big)
    proxy.faults = None
    assert proxy.stats.faults["error"] >= 2
    assert [i for i in proxy.stats.log if i.method == "POST" and "uploads" in i.target]  # multipart was used
    assert state(t) == before
    assert objects(seaweed, f"{t.storage.root}/{t.location}") == before_objects
    assert not pending_uploads(seaweed, s3_bucket), "the incomplete multipart upload must be aborted"


def test_cleanup_aborts_the_stale_multipart_uploads_of_its_table_only(
    cat_direct: mere.Catalog, seaweed: SeaweedServer, s3_bucket: str
) -> None:
    t = cat_direct.create_table("gc.t", SCHEMA, primary_key=["id"], buckets=1)
    other = cat_direct.create_table("gc.other", SCHEMA, primary_key=["id"], buckets=1)
    t.upsert(rows(range(10)))
    client = boto3.client(
        "s3",
        endpoint_url=seaweed.endpoint,
        aws_access_key_id=seaweed.access_key,
        aws_secret_access_key=seaweed.secret_key,
        region_name=seaweed.region,
    )
    prefix = t.storage.root.partition("/")[2]

    killed = f"part-{'0f' * 16}.parquet"

    def start_upload(location: str, name: str = killed) -> str:  # what a writer killed mid-upload leaves
        key = f"{prefix}/{location}/bucket-00000/{name}".lstrip("/")
        upload = client.create_multipart_upload(Bucket=s3_bucket, Key=key)
        client.upload_part(
            Bucket=s3_bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1024
        )
        return key

    mine, theirs = start_upload(t.location), start_upload(other.location)
    not_mere = start_upload(t.location, "backup.parquet")  # someone else's upload under the table
    pending = {u["Key"] for u in pending_uploads(seaweed, s3_bucket)}
    assert {mine, theirs, not_mere} <= pending
    before = (t.version, sorted(t.files().column("path").to_pylist()), sorted_rows(t.to_arrow()))
    assert t.cleanup(dry_run=False) == []  # an hour's grace: uploads still in flight keep going
    time.sleep(1.1)  # the store's times are whole seconds: cleanup counts them a second late
    removed = t.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert [p for p in removed if p.endswith(killed)] == [f"{t.location}/bucket-00000/{killed}"]
    pending = {u["Key"] for u in pending_uploads(seaweed, s3_bucket)}
    assert mine not in pending and theirs in pending and not_mere in pending
    assert (t.version, sorted(t.files().column("path").to_pylist()), sorted_rows(t.to_arrow())) == before
    assert other.cleanup(older_than=dt.timedelta(0), dry_run=False)
    assert [u["Key"] for u in pending_uploads(seaweed, s3_bucket)] == [not_mere]
    client.abort_multipart_upload(
        Bucket=s3_bucket, Key=not_mere, UploadId=pending_uploads(seaweed, s3_bucket)[0]["UploadId"]
    )


def test_purge_and_cleanup_on_an_object_store_leave_objects_mere_did_not_write(
    cat_direct: mere.Catalog, seaweed: SeaweedServer
) -> None:
    t = cat_direct.create_table("gc.purged", SCHEMA, primary_key=["id"], buckets=2)
    t.upsert(rows(range(10)))
    fs, base = seaweed.filesystem(), f"{t.storage.root}/{t.location}"
    theirs = {f"{base}/_SUCCESS", f"{base}/bucket-00001/part-{'ab' * 16}.parquet.crc"}
    killed = f"{base}/bucket-00000/part-{'cd' * 16}.parquet"  # what a killed write of mere leaves
    for path in [*theirs, killed]:
        with fs.open_output_stream(path) as out:
            out.write(b"x")
    time.sleep(1.1)  # the store's times are whole seconds: cleanup counts them a second late
    assert t.cleanup(older_than=dt.timedelta(0), dry_run=False) == [killed[len(t.storage.root) + 1 :]]
    assert objects(seaweed, base) == theirs | {
        f"{t.storage.root}/{p}" for p in t.files().column("path").to_pylist()
    }
    cat_direct.drop_table(t.name, purge=True)
    assert objects(seaweed, base) == theirs


def test_listed_times_are_never_before_the_write_on_an_object_store(
    cat_direct: mere.Catalog, seaweed: SeaweedServer, s3_bucket: str
) -> None:
    """A cleanup's cutoff never takes a file whose write began after it (that write's commit passes the
    cleanup's fence). AWS gives LastModified in whole seconds, so listings count them a second late;
    SeaweedFS gives finer times and never failed this, so here it guards the property only."""
    t = cat_direct.create_table("gc.times", SCHEMA, primary_key=["id"], buckets=1)
    for i in range(3):
        began = time.time()
        staged = t.stage(rows(range(i * 10, i * 10 + 10)))
        listed = {p: m for p, _size, m in t.storage.list_files(t.location)}
        assert all(listed[f.path] >= began for f in staged.files), (began, listed)
        t.commit([staged])


def test_a_failure_while_encoding_publishes_nothing(
    proxied_catalog: Callable[..., mere.Catalog],
    proxy: LatencyProxy,
    seaweed: SeaweedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyarrow's S3 stream completes whatever was written when it is closed or collected, so a file is
    encoded completely before any byte is sent: a failure half-way through uploads nothing."""
    t = proxied_catalog().create_table(
        "fault.enc", SCHEMA, primary_key=["id"], buckets=2, properties={"write.row-group-rows": "1000"}
    )
    t.upsert(rows(range(10)))
    before = state(t)
    before_objects = objects(seaweed, f"{t.storage.root}/{t.location}")
    real = pq.ParquetWriter.write_table

    def half_then_fail(self: pq.ParquetWriter, table: pa.Table, row_group_size: int | None = None) -> None:
        real(self, table.slice(0, table.num_rows // 2), row_group_size=row_group_size)
        raise OSError("encoder died half-way")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", half_then_fail)
    proxy.stats.reset()
    with pytest.raises(OSError, match="half-way"):
        t.upsert(rows(range(20_000)))
    monkeypatch.undo()
    assert not [i for i in proxy.stats.log if i.method in ("PUT", "POST")]
    assert state(t) == before
    assert objects(seaweed, f"{t.storage.root}/{t.location}") == before_objects


def test_random_write_faults_commit_all_or_nothing(
    proxied_catalog: Callable[..., mere.Catalog], proxy: LatencyProxy, seaweed: SeaweedServer, s3_bucket: str
) -> None:
    t = proxied_catalog(retries="0").create_table(
        "fault.rnd", SCHEMA, primary_key=["id"], buckets=4, properties=MANUAL
    )  # counts versions
    model: dict[int, dict[str, Any]] = {}
    proxy.faults = FaultPlan("reset", methods=["PUT"], probability=0.5, seed=11)
    failed = landed = 0
    for step in range(12):
        batch = rows(range(step * 40, step * 40 + 120), v=step)
        version = t.version
        try:
            t.upsert(batch)
        except errors.StorageError:
            failed += 1
            assert t.version == version
        else:
            landed += 1
            assert t.version == version + 1
            model.update({r["id"]: r for r in batch.to_pylist()})
    proxy.faults = None
    assert failed and landed, (failed, landed)
    assert sorted_rows(t.to_arrow()) == [model[k] for k in sorted(model)]
    referenced = {f"{t.storage.root}/{p}" for p in t.files().column("path").to_pylist()}
    assert objects(seaweed, f"{t.storage.root}/{t.location}") == referenced
    assert not pending_uploads(seaweed, s3_bucket)


def test_storage_survives_pickling_without_exposing_secrets_in_its_repr(
    s3_options: dict[str, str], s3_warehouse: str
) -> None:
    import pickle

    s = Storage(s3_warehouse, s3_options)
    clone = pickle.loads(pickle.dumps(s))
    assert clone.root == s.root and clone.storage_options == s.storage_options
    assert s3_options["secret_access_key"] not in repr(clone)


def test_a_commit_of_staged_objects_a_cleanup_took_is_refused(cat_direct: mere.Catalog) -> None:
    """The object-store side of Table.commit's check that staged files still exist (HEAD requests)."""
    t = cat_direct.create_table("s3.staged", SCHEMA, primary_key=["id"], buckets=2)
    t.upsert(rows(range(4)))
    staged = t.stage(rows(range(10, 20), v=1))
    t.storage.delete(staged.files[0].path)
    before = (t.version, sorted_rows(t.to_arrow()))
    with pytest.raises(errors.CommitFailed, match="no longer exist"):
        t.commit([staged])
    assert (t.version, sorted_rows(t.to_arrow())) == before
    t.commit([t.stage(rows(range(10, 20), v=1))])
    assert len(t.to_arrow()) == 14
