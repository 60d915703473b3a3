"""Connection limits (http/connections.py) against real clients on loopback, on both of uvicorn's HTTP parsers: a
slowloris crowd (a head byte every 0.2 s) is closed with 408 once its head is late while other clients are served,
a connection that sends nothing or stalls in its body is closed too, one past the cap gets 503 before it sends a
byte, an oversized head is refused, and a kept-alive connection or a slow but steady body is left alone.
Bounded: at most 50 sockets, deadlines of 1 s, each wait on a condition with a ceiling."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import httpx
import pytest
from tests.conftest import make_toy_profile
from tests.http.http_helpers import toy_plan

from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.connections import ConnectionLimits
from cascadeserve.runtime import RuntimeOptions

HTTP = ["httptools", "h11"]
INFER = b'{"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [3]}]}'


@contextmanager
def _serving(**limits: object) -> Iterator[Server]:
    prof = make_toy_profile(n=200)
    app = build_app(
        prof, toy_plan(prof), emulate=True, name="toy", runtime_options=RuntimeOptions(max_in_flight=256),
        server_options=ServerOptions(stop_grace_s=1.0),
    )  # fmt: skip
    server = Server(app, "127.0.0.1", 0, grace_s=1.0, limits=ConnectionLimits(**limits)).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


def _until(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout_s, "condition not met in time"
        time.sleep(0.01)


def _open(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=15)


def _answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _connections(server: Server) -> int:
    return len(server.server.server_state.connections)


@pytest.mark.parametrize("http", HTTP)
def test_a_slowloris_crowd_is_closed_while_others_are_served(http: str) -> None:
    with _serving(http=http, header_timeout_s=1.0) as server:
        crowd = [_open(server) for _ in range(50)]
        for s in crowd:
            s.sendall(b"POST /v2/models/toy/infer HTTP/1.1\r\nhost: x\r\n")
        closed: dict[int, bytes] = {}
        stop = threading.Event()

        def drip() -> None:  # one more header byte on every live socket every 0.2 s, for as long as it is open
            while not stop.is_set():
                for i, s in enumerate(crowd):
                    if i not in closed:
                        with suppress(OSError):
                            s.sendall(b"x")
                stop.wait(0.2)

        dripper = threading.Thread(target=drip)
        dripper.start()
        t0 = time.monotonic()
        try:
            with httpx.Client(timeout=10) as client:  # served meanwhile
                r = client.post(f"{server.url}/v2/models/toy/infer", content=INFER)
                assert r.status_code == 200, r.text
            for i, s in enumerate(crowd):
                closed[i] = _answer(s)
        finally:
            stop.set()
            dripper.join()
            for s in crowd:
                s.close()
        took = time.monotonic() - t0
        assert all(a.startswith(b"HTTP/1.1 408 ") and b"request head did not arrive" in a for a in closed.values())
        assert 0.5 < took < 10.0, took  # the deadline runs from each connection's start
        _until(lambda: _connections(server) == 0)


@pytest.mark.parametrize("http", HTTP)
def test_silent_and_stalled_connections_are_closed(http: str) -> None:
    with _serving(http=http, header_timeout_s=1.0, body_timeout_s=1.0) as server:
        with _open(server) as silent:  # never sends a byte
            assert _answer(silent).startswith(b"HTTP/1.1 408 ")
        with _open(server) as stalled:  # a whole head, a tenth of its body, then nothing
            stalled.sendall(
                b"POST /v2/models/toy/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n" + INFER[:10]
            )
            answer = _answer(stalled)
            assert answer.startswith(b"HTTP/1.1 408 ") and b"request body did not arrive" in answer, answer
        _until(lambda: _connections(server) == 0)
        assert server.app.runtime.in_flight == 0


@pytest.mark.parametrize("http", HTTP)
def test_kept_alive_and_slow_but_steady_clients_are_served(http: str) -> None:
    with _serving(http=http, header_timeout_s=1.0, body_timeout_s=1.0) as server:
        with httpx.Client(timeout=10) as client:
            assert client.post(f"{server.url}/v2/models/toy/infer", content=INFER).status_code == 200
            time.sleep(1.5)  # idle between requests past the head deadline: keep-alive's (75 s), not the head's
            assert client.post(f"{server.url}/v2/models/toy/infer", content=INFER).status_code == 200
        with _open(server) as steady:  # the body a few bytes every 0.3 s: never 1 s without a byte, 2.4 s in all
            steady.sendall(b"POST /v2/models/toy/infer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n")
            steady.sendall(b"content-length: %d\r\n\r\n" % len(INFER))
            for k in range(0, len(INFER), 11):
                steady.sendall(INFER[k : k + 11])
                time.sleep(0.3)
            assert _answer(steady).startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("http", HTTP)
def test_past_the_cap_a_connection_gets_503_and_an_oversized_head_is_refused(http: str) -> None:
    with _serving(http=http, max_connections=4, header_timeout_s=30.0) as server:
        held = [_open(server) for _ in range(4)]
        try:
            _until(lambda: _connections(server) == 4)
            with _open(server) as extra:
                answer = _answer(extra)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in answer, answer
        finally:
            for s in held:
                s.close()
        _until(lambda: _connections(server) == 0)
        assert httpx.post(f"{server.url}/v2/models/toy/infer", content=INFER, timeout=10).status_code == 200
        with _open(server) as big:
            big.sendall(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * (200 << 10))
            answer = _answer(big)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
