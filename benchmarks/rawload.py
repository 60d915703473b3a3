"""A lean HTTP/1.1 load generator for loopback benchmarks: wrk's shape, open or closed loop, each request kept.

    from rawload import closed_loop, open_loop
    res = closed_loop("127.0.0.1", port, "/v2/models/m/infer", bodies, connections=32, duration_s=12)
    res = open_loop("127.0.0.1", port, "/v2/models/m/infer", bodies, arrivals)  # send times, s from the start

Keep-alive connections, requests pre-built as bytes, responses parsed by their Content-Length on one asyncio
protocol per connection (uvloop when installed), one request in flight per connection. Each request's status, its
latency, the body's ``"server_ms"`` (cascadeserve's own admission-to-answer time) and whether a 503 carried
``Retry-After`` are kept, so that accepted and refused requests are summarised apart.

Why not the project's load generator (``eval/loadgen.py``, aiohttp): a request costs it ~150 µs of client CPU, so on a
2-core machine it cannot offer more than ~4,000 req/s, and it measures latency from the actual send. Why not wrk or
autocannon: wrk is not installable from the package registries here, and neither reports latency by status.

Open loop measures each latency from the request's *scheduled* time (wrk2's correction for coordinated omission): a
request that waited for a free connection, or for the client itself, counts that wait. Connections grow on demand up
to ``max_connections``; past it, due requests wait for the first free one. A request unanswered ``grace_s`` after the
last send is counted as timed out (status -2); a connection that fails fails its request (status -1, the error's type
and time kept).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import uvloop

    _new_loop: Any = uvloop.new_event_loop
except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
    _new_loop = asyncio.new_event_loop

_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_SERVER_MS = re.compile(rb'"server_ms":[ ]*([0-9.eE+-]+)')


@dataclass
class Result:
    """Per request (index = send order): scheduled time, latency, status, server_ms; plus the run's span."""

    sched_s: np.ndarray
    latency_s: np.ndarray
    status: np.ndarray  # HTTP status; -1 connection error; -2 unanswered (timed out); 0 never sent
    server_ms: np.ndarray  # NaN where the body had none
    retry_after: np.ndarray  # a 503 that carried Retry-After
    span_s: float
    errors: list[tuple[float, str]] = field(default_factory=list)
    connections: int = 0
    closed_idle: int = 0

    def summary(self, ok: int = 200) -> dict[str, Any]:
        sel = self.status == ok
        lat = self.latency_s[sel] * 1000.0
        srv = self.server_ms[sel]
        srv = srv[np.isfinite(srv)]
        counts = {int(k): int(v) for k, v in zip(*np.unique(self.status, return_counts=True), strict=True)}

        def pct(a: np.ndarray, q: float) -> float | None:
            return round(float(np.percentile(a, q)), 3) if len(a) else None

        return {
            "sent": int((self.status != 0).sum()),
            "status_counts": counts,
            "ok_per_s": round(int(sel.sum()) / self.span_s, 1) if self.span_s > 0 else 0.0,
            "ok_p50_ms": pct(lat, 50),
            "ok_p99_ms": pct(lat, 99),
            "server_p99_ms": pct(srv, 99),
            "refused_503": int((self.status == 503).sum()),
            "refused_with_retry_after": int(self.retry_after.sum()),
            "refused_p99_ms": pct(self.latency_s[self.status == 503] * 1000.0, 99),
            "connection_errors": self.errors[:20],
            "connections": self.connections,
            "closed_idle_by_server": self.closed_idle,
            "span_s": round(self.span_s, 3),
        }


def _requests(host: str, port: int, path: str, bodies: Sequence[bytes]) -> list[bytes]:
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    return [head.encode() + b"Content-Length: %d\r\n\r\n" % len(b) + b for b in bodies]


class _Run:
    """The shared state of one run: records, idle connections, the requests waiting for one."""

    def __init__(self, n: int, requests: list[bytes]) -> None:
        self.requests = requests
        self.sched = np.zeros(n)
        self.lat = np.full(n, np.nan)
        self.status = np.zeros(n, dtype=np.int64)
        self.server_ms = np.full(n, np.nan)
        self.retry_after = np.zeros(n, dtype=bool)
        self.errors: list[tuple[float, str]] = []
        self.idle: deque[_Conn] = deque()
        self.waiting: deque[int] = deque()
        self.t0 = time.perf_counter()
        self.done = 0
        self.live = 0  # connections open
        self.closed_idle = 0  # connections the server closed while no request was on them (not an error)
        self.on_free: Any = None  # closed loop: what a connection does once its answer came
        self.on_lost: Any = None  # closed loop: how a lost connection is replaced

    def send(self, conn: _Conn, i: int) -> None:
        conn.i = i
        conn.transport.write(self.requests[i % len(self.requests)])

    def answered(self, conn: _Conn, i: int, status: int, head: bytes, body: bytes) -> None:
        self.lat[i] = time.perf_counter() - self.t0 - self.sched[i]
        self.status[i] = status
        self.done += 1
        if status == 200:
            m = _SERVER_MS.search(body)
            if m is not None:
                self.server_ms[i] = float(m.group(1))
        elif status == 503:
            self.retry_after[i] = b"\r\nretry-after:" in head.lower()
        self.free(conn)

    def free(self, conn: _Conn) -> None:
        if self.on_free is not None:
            self.on_free(conn)
        elif self.waiting:
            self.send(conn, self.waiting.popleft())
        else:
            self.idle.append(conn)

    def failed(self, conn: _Conn, exc: BaseException | None) -> None:
        self.live -= 1
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.i < 0:
            self.closed_idle += 1
        else:
            self.status[conn.i] = -1
            self.done += 1
            self.errors.append((round(time.perf_counter() - self.t0, 3), type(exc).__name__ if exc else "closed"))
            conn.i = -1
        if self.on_lost is not None:
            self.on_lost(conn)


class _Conn(asyncio.Protocol):
    """One keep-alive connection, at most one request in flight."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses
        self.buf = bytearray()
        self.i = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.run.live += 1

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.i >= 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end])
            m = _LENGTH.search(head)
            total = end + 4 + (int(m.group(1)) if m else 0)
            if len(self.buf) < total:
                return
            body = bytes(self.buf[end + 4 : total])
            del self.buf[:total]
            i, self.i = self.i, -1
            self.run.answered(self, i, int(head[9:12]), head, body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.run.failed(self, exc)


async def _connect(loop: asyncio.AbstractEventLoop, run: _Run, host: str, port: int) -> _Conn:
    _, conn = await loop.create_connection(lambda: _Conn(run), host, port)
    return conn


async def _closed(host: str, port: int, requests: list[bytes], connections: int, duration_s: float) -> Result:
    loop = asyncio.get_running_loop()
    cap = int(duration_s * 100_000) + connections  # far above what one core of Python can send
    run = _Run(cap, requests)
    conns = [await _connect(loop, run, host, port) for _ in range(connections)]
    nxt = 0
    stop_at = 0.0

    def next_request(conn: _Conn) -> None:
        nonlocal nxt
        now = time.perf_counter() - run.t0
        if now < stop_at and nxt < cap:
            run.sched[nxt] = now
            run.send(conn, nxt)
            nxt += 1

    def replace(lost: _Conn) -> None:  # as wrk does: a lost connection is reopened, and its loop goes on
        async def reopen() -> None:
            try:
                conn = await _connect(loop, run, host, port)
            except OSError as e:
                run.errors.append((round(time.perf_counter() - run.t0, 3), f"connect: {type(e).__name__}"))
                return
            conns[conns.index(lost)] = conn
            next_request(conn)

        if lost in conns and time.perf_counter() - run.t0 < stop_at:
            task = loop.create_task(reopen())
            pending.add(task)
            task.add_done_callback(pending.discard)

    pending: set[asyncio.Task[None]] = set()
    run.on_free = next_request
    run.on_lost = replace
    run.t0 = time.perf_counter()
    stop_at = duration_s
    for c in conns:
        next_request(c)
    while time.perf_counter() - run.t0 < duration_s + 30.0:  # the last answers, bounded
        await asyncio.sleep(0.05)
        if time.perf_counter() - run.t0 >= duration_s and not pending and all(c.i < 0 for c in conns):
            break
    span = time.perf_counter() - run.t0
    closed_idle = run.closed_idle  # before our own closes below
    run.on_lost = None
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    sel = slice(0, nxt)
    res = Result(run.sched[sel], run.lat[sel], run.status[sel], run.server_ms[sel], run.retry_after[sel], 0.0)
    res.status[(res.status == 0)] = -2
    res.span_s = min(span, duration_s)
    res.errors, res.connections, res.closed_idle = run.errors, connections, closed_idle
    return res


async def _open(
    host: str, port: int, requests: list[bytes], arrivals: np.ndarray, max_connections: int, grace_s: float
) -> Result:
    loop = asyncio.get_running_loop()
    n = len(arrivals)
    run = _Run(n, requests)
    run.sched[:] = arrivals
    opened: list[_Conn] = []
    connecting = 0

    async def grow() -> None:
        nonlocal connecting
        try:
            conn = await _connect(loop, run, host, port)
        except OSError as e:
            run.errors.append((round(time.perf_counter() - run.t0, 3), f"connect: {type(e).__name__}"))
            return
        finally:
            connecting -= 1
        opened.append(conn)
        run.free(conn)

    for _ in range(min(8, max_connections)):  # a few warm connections before the clock starts
        opened.append(await _connect(loop, run, host, port))
        run.idle.append(opened[-1])
    run.t0 = time.perf_counter()
    i = 0
    tasks: set[asyncio.Task[None]] = set()
    while i < n:
        now = time.perf_counter() - run.t0
        while i < n and arrivals[i] <= now:
            if run.idle:
                run.send(run.idle.popleft(), i)
            else:
                run.waiting.append(i)
            i += 1
        short = len(run.waiting) - connecting
        while short > 0 and run.live + connecting < max_connections:
            connecting += 1
            short -= 1
            t = loop.create_task(grow())
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        wait = (arrivals[i] - now) if i < n else 0.0
        await asyncio.sleep(min(max(wait, 0.0), 0.001))
    last = time.perf_counter() - run.t0
    while run.done < n and time.perf_counter() - run.t0 < last + grace_s:
        await asyncio.sleep(0.01)
    span = time.perf_counter() - run.t0
    closed_idle = run.closed_idle  # before our own closes below
    for c in opened:
        if c.transport is not None:
            c.transport.close()
    res = Result(run.sched, run.lat, run.status, run.server_ms, run.retry_after, min(span, float(arrivals[-1])))
    res.status[res.status == 0] = -2  # unanswered by the end of the grace period, or never given a connection
    res.errors, res.connections, res.closed_idle = run.errors, len(opened), closed_idle
    return res


def closed_loop(
    host: str, port: int, path: str, bodies: Sequence[bytes], *, connections: int, duration_s: float
) -> Result:
    """``connections`` keep-alive connections, each sending its next request as soon as its answer came (wrk)."""
    loop = _new_loop()
    try:
        reqs = _requests(host, port, path, bodies)
        return loop.run_until_complete(_closed(host, port, reqs, connections, duration_s))
    finally:
        loop.close()


def open_loop(
    host: str,
    port: int,
    path: str,
    bodies: Sequence[bytes],
    arrivals: np.ndarray,
    *,
    max_connections: int = 1024,
    grace_s: float = 30.0,
) -> Result:
    """One request per arrival time (s from the start), whatever the answers do (wrk2)."""
    loop = _new_loop()
    try:
        reqs = _requests(host, port, path, bodies)
        return loop.run_until_complete(_open(host, port, reqs, np.asarray(arrivals, float), max_connections, grace_s))
    finally:
        loop.close()
