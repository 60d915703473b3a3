"""Idle keep-alive connections: the server waits longer than the clients that pool them, so a client's reuse of an
idle connection never meets a close it has not seen yet (a pooled client's request on such a connection fails
before the server reads it)."""

from __future__ import annotations

import socket
import time

from tests.http.http_helpers import toy_plan

from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.server import DEFAULT_KEEP_ALIVE_S
from cascadeserve.profile import Profile

REQUEST = b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n"


def _server(profile: Profile, **kw: float) -> Server:
    app = build_app(profile, toy_plan(profile), emulate=True, server_options=ServerOptions(stop_grace_s=1.0))
    return Server(app, "127.0.0.1", 0, grace_s=1.0, **kw).start()


def _answer(sock: socket.socket) -> bytes:
    """One whole response (headers, then Content-Length bytes of body); what came, if the server closed first."""
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            lines = head.lower().split(b"\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length:"))
            if len(body) >= length:
                return data
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk


def test_an_idle_connection_outlives_the_pooled_clients_idle_timeouts(toy_profile: Profile) -> None:
    # uvicorn's own default would close this connection after 5 s idle; aiohttp pools idle ones for 15 s
    assert DEFAULT_KEEP_ALIVE_S > 60.0
    server = _server(toy_profile)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
            sock.sendall(REQUEST)
            assert _answer(sock).startswith(b"HTTP/1.1 200")
            time.sleep(6.0)  # idle past uvicorn's default
            sock.sendall(REQUEST)
            assert _answer(sock).startswith(b"HTTP/1.1 200")  # the same connection still answers
    finally:
        server.stop()


def test_keep_alive_s_closes_idle_connections(toy_profile: Profile) -> None:
    keep_alive_s = 1.0
    server = _server(toy_profile, keep_alive_s=keep_alive_s)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
            sock.sendall(REQUEST)
            assert _answer(sock).startswith(b"HTTP/1.1 200")
            t0 = time.monotonic()
            assert sock.recv(1) == b""  # the server closes it (bounded by the socket's 120 s timeout)
            assert time.monotonic() - t0 >= keep_alive_s - 0.1
    finally:
        server.stop()
