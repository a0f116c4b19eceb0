"""The throwaway PostgreSQL server used by the test session: start, use, stop, leave nothing behind."""

from __future__ import annotations

import atexit
import os
import socket
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

import services
from services import PostgresServer, find_postgres_bindir


def _processes_under(root: Path) -> list[int]:
    """Live (non-zombie) processes whose working directory is inside ``root``.

    Every PostgreSQL process (postmaster and all its children) runs with the data directory as its cwd,
    so this finds leftovers even if the postmaster died and its children were reparented.
    """
    found = []
    prefix = str(root)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # exited meanwhile, or not ours to inspect
        if (cwd == prefix or cwd.startswith(prefix + "/")) and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture
def busy_port():
    """A loopback port that is bound and listening, so PostgreSQL cannot bind it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield int(sock.getsockname()[1])
    sock.close()


def test_find_postgres_bindir():
    bindir = find_postgres_bindir()
    assert bindir is not None, "PostgreSQL binaries must be installed for the test suite"
    for tool in ("initdb", "pg_ctl", "postgres"):
        assert os.access(os.path.join(bindir, tool), os.X_OK)


def test_missing_binaries_fail_loudly(monkeypatch):
    monkeypatch.setattr(services, "find_postgres_bindir", lambda: None)
    server = PostgresServer()
    with pytest.raises(RuntimeError, match=r"apt-get install -y postgresql"):
        server.start()
    assert server.root is None  # nothing was created
    server.stop()  # harmless


def test_lifecycle(monkeypatch, busy_port):
    # The first port handed out is taken: start() must notice and retry on another one.
    real_free_port = services._free_port
    ports = iter([busy_port])
    monkeypatch.setattr(services, "_free_port", lambda: next(ports, None) or real_free_port())
    registered: list[object] = []
    real_register, real_unregister = atexit.register, atexit.unregister
    monkeypatch.setattr(
        atexit, "register", lambda f, *a, **k: registered.append(f) or real_register(f, *a, **k)
    )
    monkeypatch.setattr(atexit, "unregister", lambda f: registered.remove(f) or real_unregister(f))

    server = PostgresServer().start()
    try:
        assert server.port is not None and server.port != busy_port
        root, data_dir, pid, port = server.root, server.data_dir, server.pid, server.port
        assert root is not None and data_dir.is_dir() and pid is not None
        assert not str(root).startswith("/root")
        assert server.stop in registered  # a crashed session still stops the server
        assert server.url == f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        assert pid in _processes_under(root)  # the leftover check below can see the server

        url_a = server.create_database("mere_a")
        url_b = server.create_database("mere_b")
        assert url_a.endswith(f":{port}/mere_a") and url_b.endswith(f":{port}/mere_b")

        engines = [sa.create_engine(u) for u in (server.url, url_a, url_b)]
        try:
            for engine, name in zip(engines, ("postgres", "mere_a", "mere_b")):
                with engine.connect() as conn:
                    assert conn.scalar(sa.text("SELECT version()")).startswith("PostgreSQL ")
                    assert conn.scalar(sa.text("SELECT current_database()")) == name
            with engines[0].connect() as conn:
                assert conn.scalar(sa.text("SHOW max_connections")) == "200"
                assert conn.scalar(sa.text("SHOW fsync")) == "off"
            _check_serializable_conflict(sa.create_engine(url_a, isolation_level="SERIALIZABLE"))
        finally:
            for engine in engines:
                engine.dispose()
    finally:
        server.stop()

    print(f"timings: {server.timings}")
    assert not root.exists()
    assert not _accepts_connections(port)
    assert not services._pid_alive(pid)
    assert _processes_under(root) == []
    assert server.stop not in registered
    server.stop()  # idempotent


def _check_serializable_conflict(engine: sa.Engine) -> None:
    """Classic write skew: each transaction reads what the other writes; the second commit must fail."""
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE doctors (name text PRIMARY KEY, on_call boolean NOT NULL)"))
            conn.execute(sa.text("INSERT INTO doctors VALUES ('alice', true), ('bob', true)"))
        with engine.connect() as c1, engine.connect() as c2:
            t1, t2 = c1.begin(), c2.begin()
            count = "SELECT count(*) FROM doctors WHERE on_call"
            assert c1.scalar(sa.text(count)) == 2
            assert c2.scalar(sa.text(count)) == 2
            c1.execute(sa.text("UPDATE doctors SET on_call = false WHERE name = 'alice'"))
            c2.execute(sa.text("UPDATE doctors SET on_call = false WHERE name = 'bob'"))
            t1.commit()
            with pytest.raises(OperationalError) as info:
                t2.commit()
            assert info.value.orig.sqlstate == "40001"
        with engine.connect() as conn:
            assert conn.scalar(sa.text("SELECT count(*) FROM doctors WHERE on_call")) == 1
    finally:
        engine.dispose()


def test_start_failure_reports_server_log(monkeypatch, busy_port):
    monkeypatch.setattr(services, "_free_port", lambda: busy_port)
    monkeypatch.setattr(services, "_START_ATTEMPTS", 2)
    server = PostgresServer()
    with pytest.raises(RuntimeError, match=r"(?s)server log tail.*already in use"), server:
        pass
    assert server.root is not None and not server.root.exists()
    assert _processes_under(server.root) == []


def test_seaweed_retries_when_its_s3_port_is_taken(monkeypatch, busy_port):
    # weed refuses a taken port by its own check ("Port allocation failed"), not only by a bind error;
    # either is a lost race that start() must answer with other ports (CI lost one this way).
    real_free_ports = services._free_ports
    calls = iter([0])

    def first_s3_port_busy(count: int) -> list[int]:
        ports = real_free_ports(count)
        if next(calls, None) is not None:
            ports[services._WEED_PORTS.index("s3.port")] = busy_port
        return ports

    monkeypatch.setattr(services, "_free_ports", first_s3_port_busy)
    with services.SeaweedServer() as server:
        assert server.port != busy_port
        log = server.log_path.read_text(errors="replace")
        assert "Port allocation failed" in log or "address already in use" in log  # the lost first try
        server.create_bucket("after-a-retry")
        assert server.filesystem().get_file_info("after-a-retry").type.name == "Directory"
