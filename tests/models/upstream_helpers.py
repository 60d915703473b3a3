"""Real servers for the upstream-stage tests: a cascadeserve server serving one local LLM behind its OpenAI API (the
upstream), a front cascadeserve whose cascade holds a local stage and an upstream stage, and a tiny Starlette app on
127.0.0.1 that answers OpenAI completions slowly, never, or with errors, and counts what it was sent."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tests.http.http_helpers import serving

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import InputSpec, ModelConfig, RuntimeOptions

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "llm-sst2"
LOCAL, REMOTE = "smollm2-135m", "remote"
ITEM = InputSpec(name="item", datatype="BYTES", shape=(-1,))


def profile() -> Profile:
    """The SST-2 LLM profile with its second model renamed ``remote``: the front's upstream stage."""
    base = load_profile(PROFILE)
    return dataclasses.replace(base, models=(base.models[0], dataclasses.replace(base.models[1], name=REMOTE)))


@contextmanager
def cascade_server(
    models: Mapping[str, Any], stages: tuple[str, ...], *, threshold: float = 1.0, name: str = "front"
) -> Iterator[Server]:
    """A cascadeserve server of ``stages`` (``threshold``: 1.0 sends every generated answer on, since a token
    log-prob certainty is below 1) with ``models`` (adapters by name), on 127.0.0.1."""
    prof = profile()
    plan = fixed_plan(
        prof,
        Cascade(stages, (threshold,) * (len(stages) - 1)),
        (Device(name="cpu0", memory_mb=8192),),
        slo=SLO(kind="p95_ms", value=60_000),
    )
    config = ModelConfig(dict(models), ITEM, "option-margin")
    options = RuntimeOptions(max_in_flight=64, default_timeout_s=120.0)
    with serving(prof, plan, models=config, runtime_options=options, name=name) as s:
        yield s


def free_port() -> int:
    """A port that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeUpstream:
    """An OpenAI-compatible completions endpoint that waits ``delay_s`` (or, with ``hold``, until :meth:`release`),
    answers ``fail`` statuses first, and records the requests in flight at most and the Authorization headers."""

    def __init__(self, *, delay_s: float = 0.0, hold: bool = False, fail: tuple[int, ...] = ()) -> None:
        self.delay_s, self.hold, self.fail = delay_s, hold, list(fail)
        self.calls = self.in_flight = self.max_in_flight = 0
        self.auth: list[str | None] = []
        self.released = False
        self.lock = threading.Lock()

    def release(self) -> None:
        self.released = True

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.auth.append(request.headers.get("authorization"))
            status = self.fail.pop(0) if self.fail else 200
        try:
            if status != 200:
                return JSONResponse({"error": {"message": f"busy ({status})"}}, status_code=status)
            await asyncio.sleep(self.delay_s)
            while self.hold and not self.released:  # a server that never answers until the test ends
                await asyncio.sleep(0.05)
            text = f"ok {body.get('max_tokens')}"
            logprobs = {
                "tokens": ["ok"],
                "token_logprobs": [-0.25],
                "top_logprobs": [{"ok": -0.25, "no": -1.75}],
                "text_offset": [0],
            }
            usage = {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}
            return JSONResponse({"choices": [{"text": text, "logprobs": logprobs, "index": 0}], "usage": usage})
        finally:
            with self.lock:
                self.in_flight -= 1


@contextmanager
def fake_upstream(fake: FakeUpstream) -> Iterator[str]:
    """Serve ``fake`` with uvicorn on 127.0.0.1; yields its base URL."""
    app = Starlette(routes=[Route("/v1/completions", fake.completions, methods=["POST"])])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    t0 = time.monotonic()
    while not server.started:
        if time.monotonic() - t0 > 30 or not thread.is_alive():
            raise RuntimeError("the fake upstream did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        fake.release()
        server.should_exit = True
        thread.join(30)
