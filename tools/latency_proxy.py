"""A TCP proxy that adds network round-trip latency (and, on request, faults) between a client and a server.

Every chunk read from one side is delivered to the other side ``rtt/2`` later, in each direction, without
waiting for the chunks before it to be delivered first: requests and responses stay pipelined and
bandwidth is not throttled, so one HTTP request costs one round trip, like a WAN link. Opening an
upstream connection costs one more round trip (the TCP handshake) unless ``handshake=False``.

The client-to-server byte stream is framed as HTTP/1.1 requests (``Content-Length`` and chunked bodies),
which makes two things possible:

- statistics: requests by method, and the most requests ever in flight at once (sent upstream, no
  response byte back yet), which shows whether a client really issues its requests concurrently;
- faults: a :class:`FaultPlan` picks requests to fail, either with an HTTP error answered by the proxy
  itself (``503 SlowDown`` by default, the request never reaches the server) or by resetting the
  connection after the request was forwarded (the server may have acted on it, the client sees no
  complete response). Both are the transient failures an object-store client must retry.

Use it as a library (``with LatencyProxy(host, port, rtt_ms=40) as proxy: ... proxy.port``: an asyncio
loop in a background thread) or as a program that runs in its own process and so never competes with the
measured client for the GIL::

    python tools/latency_proxy.py --upstream 127.0.0.1:8333 --rtt-ms 40 [--listen 127.0.0.1:0]

The program prints ``LISTENING <host> <port>`` once it accepts connections; :func:`spawn` starts it and
returns the process and its port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import NamedTuple

__all__ = ["FaultPlan", "LatencyProxy", "ProxyStats", "RequestInfo", "spawn"]

CHUNK = 256 * 1024
FAULT_KINDS = ("error", "reset", "stall")

ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate (injected by latency_proxy).</Message></Error>"
)


@dataclass(frozen=True)
class RequestInfo:
    """One HTTP request seen by the proxy."""

    index: int  # 0-based, across all connections, in arrival order
    connection: int
    method: str
    target: str
    headers: dict[str, str]  # lower-cased names


@dataclass
class FaultPlan:
    """Which requests fail, and how.

    ``kind`` is ``"error"`` (the proxy answers ``status`` and closes the connection), ``"reset"`` (the
    request is forwarded, then the connection is cut before its response reaches the client, or after
    ``reset_after_bytes`` bytes of it) or ``"stall"`` (the request is swallowed and never answered: the
    client must time out). A request fails when it matches ``methods`` / ``target_contains``
    (when given), it is the ``every``-th matching request (counting from ``offset``), and fewer than
    ``limit`` faults were injected so far. ``probability`` replaces ``every`` with a seeded coin flip.
    A custom ``decide(info) -> kind | None`` overrides all of that.
    """

    kind: str = "error"
    every: int = 3
    offset: int = 0
    methods: Sequence[str] | None = None
    target_contains: str | None = None
    limit: int | None = None
    status: int = 503
    reset_after_bytes: int = 0
    probability: float | None = None
    seed: int = 0
    decide: Callable[[RequestInfo], str | None] | None = None
    injected: int = 0
    _matching: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}, not {self.kind!r}")
        self._rng.seed(self.seed)

    def pick(self, info: RequestInfo) -> str | None:
        if self.limit is not None and self.injected >= self.limit:
            return None
        if self.decide is not None:
            kind = self.decide(info)
        else:
            if self.methods is not None and info.method not in self.methods:
                return None
            if self.target_contains is not None and self.target_contains not in info.target:
                return None
            n = self._matching
            self._matching += 1
            if self.probability is not None:
                hit = self._rng.random() < self.probability
            else:
                hit = n >= self.offset and (n - self.offset) % max(1, self.every) == 0
            kind = self.kind if hit else None
        if kind is not None:
            self.injected += 1
        return kind


@dataclass
class ProxyStats:
    connections: int = 0
    requests: int = 0
    by_method: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    bytes_up: int = 0
    bytes_down: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    log: deque[RequestInfo] = field(default_factory=lambda: deque(maxlen=100_000))  # the latest requests

    def reset(self) -> None:
        self.connections = self.requests = self.bytes_up = self.bytes_down = 0
        self.in_flight = self.max_in_flight = 0
        self.by_method.clear()
        self.faults.clear()
        self.log.clear()


class _Cut(Exception):
    """Abort this connection now (fault injection)."""


class _Closed(Exception):
    """The proxy answered the client itself and closed the connection (fault injection)."""


class _Head(NamedTuple):
    raw: bytes
    method: str
    target: str
    headers: dict[str, str]


class _RequestFramer:
    """Splits a client byte stream into HTTP/1.1 requests, incrementally, without buffering bodies."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.state = "head"  # head | body | chunk-size | chunk-data | trailer
        self.remaining = 0

    def feed(self, data: bytes) -> list[_Head | bytes]:
        """Request heads and body bytes, in stream order."""
        self.buf += data
        events: list[_Head | bytes] = []
        while self.buf:
            if self.state == "head":
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self.buf) > 1 << 20:
                        raise _Cut("request head too long")
                    break
                raw = bytes(self.buf[: end + 4])
                del self.buf[: end + 4]
                lines = raw[:-4].decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                method, target = (parts[0], parts[1]) if len(parts) >= 2 else (parts[0], "")
                headers: dict[str, str] = {}
                for header in lines[1:]:
                    name, _, value = header.partition(":")
                    headers[name.strip().lower()] = value.strip()
                events.append(_Head(raw, method, target, headers))
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    self.state = "chunk-size"
                else:
                    self.remaining = int(headers.get("content-length", "0") or 0)
                    self.state = "body" if self.remaining else "head"
            elif self.state in ("body", "chunk-data"):
                n = min(self.remaining, len(self.buf))
                events.append(bytes(self.buf[:n]))
                del self.buf[:n]
                self.remaining -= n
                if self.remaining == 0:
                    self.state = "head" if self.state == "body" else "chunk-size"
            elif self.state == "chunk-size":
                line = self._line()
                if line is None:
                    break
                events.append(line)
                text = line[:-2].split(b";")[0].strip()
                if not text:
                    continue  # the CRLF closing a chunk's data
                size = int(text, 16)
                if size == 0:
                    self.state = "trailer"
                else:
                    self.remaining = size
                    self.state = "chunk-data"
            elif self.state == "trailer":
                line = self._line()
                if line is None:
                    break
                events.append(line)
                if line == b"\r\n":
                    self.state = "head"
        return events

    def _line(self) -> bytes | None:
        """The next CRLF-terminated line, taken off the buffer (None until it is complete)."""
        end = self.buf.find(b"\r\n")
        if end < 0:
            return None
        line = bytes(self.buf[: end + 2])
        del self.buf[: end + 2]
        return line


class LatencyProxy:
    """Forwards ``listen_host:listen_port`` (0 = a free port) to ``upstream``, adding ``rtt_ms`` per round trip.

    ``rtt_ms`` and ``faults`` may be changed while the proxy runs; they apply to bytes read afterwards.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        rtt_ms: float = 0.0,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        handshake: bool = True,
        faults: FaultPlan | None = None,
    ) -> None:
        self.upstream = (upstream_host, int(upstream_port))
        self.rtt_ms = float(rtt_ms)
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.handshake = handshake
        self.faults = faults
        self.stats = ProxyStats()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._request_ids = itertools.count()
        self._conn_ids = itertools.count()

    # -- lifecycle (library use: a loop in a background thread) -------------------------------------
    def start(self) -> LatencyProxy:
        self._thread = threading.Thread(target=self._run_thread, name="latency-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"latency proxy failed to start: {self._error}") from self._error
        if not self._ready.is_set():
            raise RuntimeError("latency proxy did not start within 30 s")
        return self

    def _run_thread(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self.serve())
            self._ready.set()
            loop.run_forever()
        except BaseException as e:  # report to start()
            self._error = e
            self._ready.set()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(self._close())
            loop.close()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    # -- serving -----------------------------------------------------------------------------------
    async def serve(self) -> asyncio.Server:
        self._server = await asyncio.start_server(
            self._handle, self.listen_host, self.listen_port, limit=CHUNK, backlog=512
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self._server

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        handlers = list(self._handlers)
        for t in handlers:
            t.cancel()
        if handlers:
            await asyncio.gather(*handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    @property
    def _half_rtt(self) -> float:
        return max(0.0, self.rtt_ms) / 2000.0

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._proxy(client_r, client_w)

    async def _proxy(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        conn = next(self._conn_ids)
        self.stats.connections += 1
        self._writers.add(client_w)
        _nodelay(client_w)
        loop = asyncio.get_running_loop()
        upstream_w: asyncio.StreamWriter | None = None
        awaiting = [0]  # requests forwarded whose response has not started yet
        cut = asyncio.Event()
        reset_budget: list[int | None] = [None]  # response bytes still allowed before a reset

        def abort() -> None:
            cut.set()
            client_w.transport.abort()
            if upstream_w is not None:
                upstream_w.transport.abort()

        try:
            if self.handshake and self.rtt_ms > 0:
                await asyncio.sleep(2 * self._half_rtt)
            upstream_r, upstream_w = await asyncio.open_connection(*self.upstream, limit=CHUNK)
        except OSError:
            client_w.transport.abort()
            self._writers.discard(client_w)
            return
        self._writers.add(upstream_w)
        _nodelay(upstream_w)
        up_q: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        down_q: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()

        async def deliver(
            q: asyncio.Queue[tuple[float, bytes | None]],
            w: asyncio.StreamWriter,
            on_write: Callable[[bytes], None] | None = None,
        ) -> None:
            while True:
                at, data = await q.get()
                delay = at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if data is None:
                    with contextlib.suppress(OSError):
                        if w.can_write_eof():
                            w.write_eof()
                    return
                if on_write is not None:
                    on_write(data)
                w.write(data)
                await w.drain()

        def response_bytes(data: bytes) -> None:
            self.stats.bytes_down += len(data)

        async def pump_up() -> None:
            framer = _RequestFramer()
            dropping = False
            while True:
                data = await client_r.read(CHUNK)
                at = loop.time() + self._half_rtt
                if not data:
                    up_q.put_nowait((at, None))
                    return
                self.stats.bytes_up += len(data)
                for event in framer.feed(data):
                    if dropping:
                        continue
                    if isinstance(event, bytes):
                        up_q.put_nowait((at, event))
                        continue
                    raw, method = event.raw, event.method
                    info = RequestInfo(next(self._request_ids), conn, method, event.target, event.headers)
                    self.stats.requests += 1
                    self.stats.by_method[method] += 1
                    self.stats.log.append(info)
                    fault = self.faults.pick(info) if self.faults is not None else None
                    if fault == "stall":
                        self.stats.faults["stall"] += 1
                        dropping = True  # swallow this request (and anything after it) and never answer
                        continue
                    if fault == "error":
                        self.stats.faults["error"] += 1
                        dropping = True
                        status = self.faults.status if self.faults is not None else 503
                        await _answer_error(client_w, status, at - loop.time() + self._half_rtt)
                        raise _Closed("injected error")
                    if fault == "reset":
                        self.stats.faults["reset"] += 1
                        reset_budget[0] = self.faults.reset_after_bytes if self.faults is not None else 0
                    awaiting[0] += 1
                    self.stats.in_flight += 1
                    self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
                    up_q.put_nowait((at, raw))

        async def pump_down() -> None:
            while True:
                data = await upstream_r.read(CHUNK)
                at = loop.time() + self._half_rtt
                if not data:
                    down_q.put_nowait((at, None))
                    return
                if awaiting[0]:
                    self.stats.in_flight -= awaiting[0]
                    awaiting[0] = 0
                budget = reset_budget[0]
                if budget is not None:
                    if len(data) > budget:
                        if budget:
                            down_q.put_nowait((at, data[:budget]))
                        await asyncio.sleep(max(0.0, at - loop.time()) + 0.001)
                        raise _Cut("injected reset")
                    reset_budget[0] = budget - len(data)
                down_q.put_nowait((at, data))

        tasks = [
            asyncio.ensure_future(t)
            for t in (
                pump_up(),
                pump_down(),
                deliver(up_q, upstream_w),
                deliver(down_q, client_w, response_bytes),
            )
        ]
        try:
            pending = set(tasks)
            # Finish when both directions delivered their EOF, or on the first error / cut.
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                errors = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
                if errors:
                    if not all(isinstance(e, _Closed) for e in errors):
                        abort()
                    break
                if tasks[2].done() and tasks[3].done():
                    break
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if awaiting[0]:
                self.stats.in_flight -= awaiting[0]
            for w in (client_w, upstream_w):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.close()


async def _answer_error(w: asyncio.StreamWriter, status: int, delay: float) -> None:
    reason = {500: "Internal Server Error", 503: "Slow Down", 502: "Bad Gateway"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(ERROR_BODY)}"
        f"\r\nConnection: close\r\n\r\n"
    ).encode()
    if delay > 0:
        await asyncio.sleep(delay)
    with contextlib.suppress(OSError):
        w.write(head + ERROR_BODY)
        await w.drain()
        await asyncio.sleep(0.005)


def _nodelay(w: asyncio.StreamWriter) -> None:
    sock = w.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def spawn(
    upstream: str, rtt_ms: float, *, handshake: bool = True, python: str = sys.executable
) -> tuple[subprocess.Popen[str], int]:
    """Run the proxy in its own process; returns the process (stop it with ``terminate()``) and its port."""
    cmd = [python, os.path.abspath(__file__), "--upstream", upstream, "--rtt-ms", str(rtt_ms)]
    if not handshake:
        cmd.append("--no-handshake")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    line = proc.stdout.readline()
    while not line.startswith("LISTENING") and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"latency proxy exited with {proc.returncode}")
        line = proc.stdout.readline()
    if not line.startswith("LISTENING"):
        proc.kill()
        raise RuntimeError("latency proxy did not start")
    return proc, int(line.split()[2])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the server")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to accept on (port 0: a free one)")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="round-trip time to add, in milliseconds")
    parser.add_argument("--no-handshake", action="store_true", help="do not charge a round trip per connect")
    args = parser.parse_args(argv)
    up_host, _, up_port = args.upstream.rpartition(":")
    host, _, port = args.listen.rpartition(":")
    proxy = LatencyProxy(
        up_host,
        int(up_port),
        args.rtt_ms,
        listen_host=host or "127.0.0.1",
        listen_port=int(port or 0),
        handshake=not args.no_handshake,
    )

    async def run() -> None:
        await proxy.serve()
        print(f"LISTENING {proxy.listen_host} {proxy.port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await proxy._close()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
