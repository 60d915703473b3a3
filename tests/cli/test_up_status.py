"""``cascadeserve up``'s status line: the load, the gear, the served p95 over the SLO window against the SLO and the
requests shed, read from the running server, refreshed each second on a terminal and never written to a file or a
pipe; and the library's ``serve(on_serving=...)`` hook it reads the running server through."""

from __future__ import annotations

import gc
import io
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from rich.console import Console
from tests.http.http_helpers import toy_plan

from cascadeserve.api import ServeConfig
from cascadeserve.api.serving import Serving, assemble, serve
from cascadeserve.cli import up
from cascadeserve.profile import Profile
from cascadeserve.runtime.events import ServingStatus

BOUND_S = 60.0


def _wait(done: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + BOUND_S
    while not done():
        assert time.monotonic() < end, f"waited {BOUND_S:g} s for {what}"
        time.sleep(0.02)


def _status(**changes: Any) -> ServingStatus:
    base: dict[str, Any] = {
        "qps": 312.44, "gear": 2, "gears": 8, "p95_ms": 42.07, "slo_ms": 100.0, "window_s": 10.0, "shed": 0,
        "shedding": False, "slo_missed": False,
    }  # fmt: skip
    return ServingStatus(**{**base, **changes})


def test_the_line_says_load_gear_p95_against_the_slo_and_sheds() -> None:
    line = up.status_line(_status())
    assert line.plain == "serving: 312.4 QPS · gear 2 of 8 · p95 42.1 ms over 10 s (SLO 100 ms) · shed 0"
    assert [str(s.style) for s in line.spans] == ["bold"]  # the label only
    bad = up.status_line(_status(p95_ms=142.0, slo_missed=True, shed=4512, shedding=True))
    assert bad.plain == "serving: 312.4 QPS · gear 2 of 8 · p95 142.0 ms over 10 s (SLO 100 ms) · shed 4512 (shedding)"
    assert sum("red" in str(s.style) for s in bad.spans) == 2  # the p95 and the sheds stand out
    assert up.status_line(_status(p95_ms=None, slo_ms=None)).plain.endswith("· p95 - over 10 s · shed 0")
    assert up.status_line(None).plain == "starting"


@pytest.fixture
def running(toy_profile: Profile) -> Iterator[Serving]:
    config = ServeConfig(plan=toy_plan(toy_profile), profile=toy_profile, emulate=True, port=0, measure_overhead=False)
    s = assemble(config, say=lambda _: None)
    s.server.start()
    try:
        yield s
    finally:
        s.server.stop()


def _answer(s: Serving, n: int) -> None:
    body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [n], "data": list(range(n))}]}
    assert httpx.post(f"{s.server.url}/v2/models/toy/infer", json=body, timeout=30).status_code == 200


def test_the_status_line_is_refreshed_from_the_running_server_on_a_terminal(running: Serving) -> None:
    out = io.StringIO()
    status = up.LiveStatus(Console(file=out, force_terminal=True, width=160))
    status.start(running)
    try:
        _answer(running, 5)
        _wait(lambda: re.search(r"gear 0 of 1 · p95 \d", out.getvalue()) is not None, "a p95 on the line")
    finally:
        status.stop()
    assert "QPS" in out.getvalue() and "shed 0" in out.getvalue()


@pytest.mark.parametrize("terminal", [True, False])
def test_up_shows_the_status_line_only_on_a_terminal(
    running: Serving, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    out, stdout = io.StringIO(), io.StringIO()
    monkeypatch.setattr(up, "console", Console(file=stdout, force_terminal=terminal, width=160))
    monkeypatch.setattr(up, "err_console", Console(file=out, force_terminal=True, width=160))
    heard: list[str] = []

    def fake_serve(config: ServeConfig, **hooks: Any) -> None:  # the running server, as serve() hands it over
        hooks["on_listening"](running.server.url)
        if hooks["on_serving"] is not None:
            hooks["on_serving"](running)
            _wait(lambda: "serving: " in out.getvalue(), "the status line")

    monkeypatch.setattr(up, "serve_config", fake_serve)
    up.serve_with_status(running.config, heard.append)
    assert heard == [running.server.url]
    assert ("serving: " in out.getvalue()) is terminal  # drawn on stderr's console, where the server's lines go
    assert stdout.getvalue() == ""
    if not terminal:
        assert out.getvalue() == ""  # stdout is a file or a pipe: nothing of the status line at all


def test_serve_hands_the_running_server_to_on_serving_after_the_banner(toy_profile: Profile) -> None:
    config = ServeConfig(plan=toy_plan(toy_profile), profile=toy_profile, emulate=True, port=0, measure_overhead=False)
    said: list[str] = []
    got: list[Serving] = []
    ready = threading.Event()

    def on_serving(s: Serving) -> None:
        said.append("on_serving")
        got.append(s)
        ready.set()

    thread = threading.Thread(
        target=lambda: serve(config, say=said.append, on_listening=said.append, on_serving=on_serving), daemon=True
    )
    thread.start()
    try:
        assert ready.wait(BOUND_S)
        (s,) = got
        assert said[-3].startswith("serving model 'toy'") and said[-2] == s.server.url and said[-1] == "on_serving"
        events = s.app.events
        assert events is not None
        _answer(s, 3)
        _wait(lambda: (st := events.status()) is not None and st.p95_ms is not None, "a p95")
        st = events.status()
        assert st is not None and (st.gear, st.gears, st.shed) == (0, 1, 0)
    finally:
        if got:
            got[0].server.stop()
        thread.join(BOUND_S)
        gc.unfreeze()  # serve() freezes what it loaded out of the collector's passes: this process goes on
    assert said[-1] == "stopped"
