"""Connection limits uvicorn does not set: a deadline for the request head, an idle deadline for the body, a cap on
open connections and on the size of a head.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``), but a connection that never sends a byte,
or sends its head a byte every few seconds (slowloris), or stops halfway through its body, stays open for as long
as the client likes: 200 such connections held a server's sockets for as long as they ran. :func:`protocol_class`
gives uvicorn its own HTTP protocol (httptools' or h11's, as uvicorn would pick) with a watch per connection
(:class:`ConnectionLimits` holds the bounds; ``serve`` sets them with ``--header-timeout-s``, ``--body-timeout-s``
and ``--max-connections``):

* **head**: a request head must be whole within ``header_timeout_s`` (default 10 s) of its first byte (of the
  connection, for its first request: a connection that sends nothing is closed too); else ``408`` and the
  connection closes. A head past ``max_head_bytes`` (64 KiB) gets ``431`` (h11 has its own bound, set the same);
* **body**: while a body is coming, at most ``body_timeout_s`` (default 30 s) may pass without a byte of it (time
  during which the server itself paused reading, its buffer full, does not count); else ``408`` (when no answer has
  begun) and the connection closes; the handler waiting on the body sees the client go (499, logged nowhere);
* **connections**: past ``max_connections`` (default 1000) open at once, a new one gets ``503`` with
  ``Retry-After: 1`` and is closed at once, before its request is read.

No timer runs for a request whose head and body arrive in one read (the common case): the watch arms one only when
a read leaves a head or a body unfinished, and a keep-alive connection between requests is uvicorn's
(``--keep-alive-s``). The watch decides nothing about serving; it refuses a connection that is not sending one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ConnectionLimits", "protocol_class"]

LOG = logging.getLogger("cascadeserve.http")

_HEAD, _BODY, _IDLE = "head", "body", "idle"
LINGER_S = 2.0  # how long a refused connection is read (and dropped) at most, waiting for the client to close
_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True)
class ConnectionLimits:
    """The bounds on each HTTP connection (module docstring); ``http``: uvicorn's protocol to guard (``auto``:
    httptools where it is installed, else h11, as uvicorn picks)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000
    max_head_bytes: int = 64 * 1024
    http: Literal["auto", "httptools", "h11"] = "auto"

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < float("inf")):
                raise ValueError(f"{name}: {value!r} must be a positive number of seconds")
        for name in ("max_connections", "max_head_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r} must be a positive integer")


class _Watch:
    """One connection's deadlines, driven by its protocol: :meth:`head`, :meth:`body` and :meth:`idle` as the
    request goes, :meth:`before` and :meth:`after` around each read."""

    def __init__(self, proto: Any, limits: ConnectionLimits) -> None:
        self.proto = proto
        self.limits = limits
        self.loop: asyncio.AbstractEventLoop = proto.loop
        self.phase = _HEAD  # a fresh connection owes its first head from now on
        self.since = self.loop.time()  # the head's start, or the body's last bytes
        self.head_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.lingering = False  # refused: what the client still sends is read and dropped until it closes
        if len(proto.connections) > limits.max_connections:
            self.refuse(503, f"this server holds its limit of {limits.max_connections} connections; retry")
        else:
            self.arm()

    # -- the request's progress, as the parser reports it --------------------------------------------------------
    def head(self) -> None:
        if self.phase == _IDLE:  # the first byte of the next request on a kept-alive connection
            self.phase, self.since, self.head_bytes = _HEAD, self.loop.time(), 0

    def body(self) -> None:
        if self.phase != _BODY:
            self.phase, self.since = _BODY, self.loop.time()

    def idle(self) -> None:
        self.phase = _IDLE
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def before(self, size: int) -> None:
        if self.phase == _BODY:
            self.since = self.loop.time()
        elif self.phase == _HEAD:
            self.head_bytes += size

    def after(self) -> None:
        if self.phase == _HEAD and self.head_bytes > self.limits.max_head_bytes:
            self.refuse(431, f"the request head is over this server's limit of {self.limits.max_head_bytes} bytes")
        elif self.phase != _IDLE and self.timer is None and not self.lingering:
            self.arm()

    def lost(self) -> None:
        self.phase = _IDLE
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    # -- deadlines ---------------------------------------------------------------------------------------------
    def _timeout(self) -> float:
        return self.limits.header_timeout_s if self.phase == _HEAD else self.limits.body_timeout_s

    def arm(self) -> None:
        self.timer = self.loop.call_at(self.since + self._timeout(), self.check)

    def check(self) -> None:
        self.timer = None
        if self.phase == _IDLE or self.lingering or self.proto.transport.is_closing():
            return
        now = self.loop.time()
        if self.phase == _BODY and self.proto.flow.read_paused:  # the server stopped reading, not the client
            self.since = now
        if now < self.since + self._timeout():
            self.arm()
            return
        what = "head" if self.phase == _HEAD else "body"
        self.refuse(408, f"the request {what} did not arrive within {self._timeout():g} s")

    def refuse(self, status: int, message: str) -> None:
        """Answer ``status`` where no answer has begun on the connection, and close it: the sending side at once,
        the connection once the client closes its side or :data:`LINGER_S` later. Meanwhile what the client still
        sends is read and dropped (a lingering close, as nginx's): closed with unread bytes, the socket would
        reset the connection, and the client's kernel drop the answer before the client read it."""
        self.lost()
        proto = self.proto
        cycle = getattr(proto, "cycle", None)
        answering = cycle is not None and cycle.response_started and not cycle.response_complete
        if not answering:
            body = json.dumps({"error": message}).encode()
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n"
            )
            if status == 503:
                head += "retry-after: 1\r\n"
            proto.transport.write(head.encode() + b"\r\n" + body)
        if cycle is not None and not cycle.response_complete:  # the handler sees the client go; its answer is dropped
            cycle.disconnected = True
            cycle.message_event.set()
        transport = proto.transport
        self.lingering = True
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_S, transport.close)
        else:  # TLS: no half close
            transport.close()
        LOG.info("connection from %s closed: %s %s", proto.client, status, message)


class _GuardedH11(H11Protocol):
    limits: ClassVar[ConnectionLimits]
    watch: _Watch

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.watch = _Watch(self, self.limits)

    def connection_lost(self, exc: Exception | None) -> None:
        self.watch.lost()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.watch.lingering:
            return
        self.watch.before(len(data))
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self.watch.body()
        elif state is h11.IDLE:
            if self.conn.trailing_data[0]:  # part of a head, waiting for the rest
                self.watch.head()
        else:  # the request is whole (DONE), or the connection is closing
            self.watch.idle()
        self.watch.after()


def _httptools_class() -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class _GuardedHttpTools(HttpToolsProtocol):
        limits: ClassVar[ConnectionLimits]
        watch: _Watch

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.watch = _Watch(self, self.limits)

        def connection_lost(self, exc: Exception | None) -> None:
            self.watch.lost()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.watch.lingering:
                return
            self.watch.before(len(data))
            super().data_received(data)
            self.watch.after()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.watch.head()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self.watch.body()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self.watch.idle()

    return _GuardedHttpTools


def protocol_class(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (``Config(http=...)``) with ``limits`` on every connection."""
    impl = limits.http
    if impl == "auto":
        try:
            import httptools  # noqa: F401  (uvicorn's "auto" takes it where it is installed)

            impl = "httptools"
        except ImportError:
            impl = "h11"
    base = _httptools_class() if impl == "httptools" else _GuardedH11
    return type(f"Limited{base.__name__}", (base,), {"limits": limits})
