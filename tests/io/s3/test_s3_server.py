"""The test services themselves: the SeaweedFS server keeps to its own loopback ports and leaves nothing
behind; the latency proxy adds one round trip per request and keeps requests pipelined."""

from __future__ import annotations

import glob
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
from latency_proxy import LatencyProxy

from services import SeaweedServer


def _listening(pid: int) -> set[tuple[str, int]]:
    proc = psutil.Process(pid)
    return {
        (c.laddr.ip, c.laddr.port)
        for c in proc.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def test_server_listens_on_loopback_ports_it_chose(seaweed: SeaweedServer) -> None:
    assert seaweed.pid is not None
    listening = _listening(seaweed.pid)
    assert listening and {ip for ip, _ in listening} == {"127.0.0.1"}
    assert {port for _, port in listening} <= set(seaweed.ports.values())
    assert len(set(seaweed.ports.values())) == len(seaweed.ports)  # every listener has its own port
    assert "s3.port" in seaweed.ports and "admin.port" in seaweed.ports


def test_a_server_starts_and_stops_without_leftovers() -> None:
    server = SeaweedServer().start()
    pid, root, ports = server.pid, server.root, dict(server.ports)
    assert pid is not None and root is not None and root.exists()
    bucket = server.create_bucket("leftover-check")
    with server.filesystem().open_output_stream(f"{bucket}/x") as f:
        f.write(b"data")
    server.stop()
    server.stop()  # idempotent
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not root.exists()
    leftovers = [p for port in ports.values() for p in glob.glob(f"/tmp/seaweedfs-*-{port}.sock")]
    assert not leftovers


def test_proxy_adds_one_round_trip_per_request_and_stays_pipelined(
    seaweed: SeaweedServer, s3_bucket: str
) -> None:
    fs = seaweed.filesystem()
    with fs.open_output_stream(f"{s3_bucket}/rtt-probe") as f:
        f.write(b"x" * 100_000)
    with LatencyProxy("127.0.0.1", seaweed.port, rtt_ms=40) as proxy:
        pfs = seaweed.filesystem(proxy.endpoint)
        handle = pfs.open_input_file(f"{s3_bucket}/rtt-probe")  # HEAD: a connection is up
        times = []
        for i in range(7):
            t0 = time.perf_counter()
            handle.read_at(1000, i * 1000)
            times.append(time.perf_counter() - t0)
        assert 0.038 <= statistics.median(times) <= 0.09, times
        # 16 GETs issued together take about one round trip, not 16.
        proxy.stats.reset()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: handle.read_at(1000, i * 1000), range(16)))  # warm 16 connections
            t0 = time.perf_counter()
            list(pool.map(lambda i: handle.read_at(1000, i * 1000), range(16)))
            elapsed = time.perf_counter() - t0
        assert elapsed < 0.4, elapsed  # one after another: >= 16 x 40 ms = 0.64 s
        assert proxy.stats.max_in_flight >= 8
