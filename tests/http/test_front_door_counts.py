"""The front door's cheap per-request paths, kept exact: metrics folded at scrape time after a burst over real HTTP,
the histogram fold against prometheus-client's own ``observe``, and the disconnect watch's counted cancel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from tests.http.http_helpers import metric, serving

from cascadeserve.http.fastpath import answered_or_gone
from cascadeserve.http.metrics import _LATENCY_BUCKETS, _observe_all
from cascadeserve.profile import Profile

_BODY = json.dumps({"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [0]}]}).encode()


async def _burst(url: str, n: int, connections: int) -> list[int]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        rs = await asyncio.gather(*(client.post(f"{url}/v2/models/toy/infer", content=_BODY) for _ in range(n)))
    return [r.status_code for r in rs]


def test_metrics_counts_are_exact_at_scrape_time_after_a_burst(toy_profile: Profile) -> None:
    n = 300
    with serving(toy_profile) as server:
        statuses = asyncio.run(_burst(server.url, n, 32))
        assert statuses == [200] * n
        text = httpx.get(f"{server.url}/metrics").text
        assert metric(text, "cascadeserve_admitted_total") == n
        assert metric(text, "cascadeserve_answered_total") == n
        assert metric(text, "cascadeserve_exits_total") == n
        assert metric(text, "cascadeserve_request_latency_seconds_count") == n
        assert metric(text, "cascadeserve_shed_total") == 0
        assert f'cascadeserve_request_latency_seconds_bucket{{le="+Inf"}} {float(n)}' in text
        # a second burst: the fold adds to what the first scrape read, nothing counted twice
        assert asyncio.run(_burst(server.url, n, 8)) == [200] * n
        text = httpx.get(f"{server.url}/metrics").text
        assert metric(text, "cascadeserve_admitted_total") == 2 * n
        assert metric(text, "cascadeserve_answered_total") == 2 * n
        assert metric(text, "cascadeserve_request_latency_seconds_count") == 2 * n
        stats = httpx.get(f"{server.url}/v2/models/toy/stats").json()["model_stats"][0]
        assert stats["inference_count"] == 2 * n
        assert server.app.runtime.in_flight == 0


def test_the_histogram_fold_exports_what_observe_would() -> None:
    values = [0.0004, 0.001, 0.0031, 0.02, 0.5, 7.0, 30.0, math.inf, math.nan, 0.001 + 1e-12, 1e-9, 0.25]
    values += [i * 0.000137 for i in range(500)]

    def text(fold: bool) -> str:
        registry = CollectorRegistry()
        h = Histogram("lat", "Latency.", buckets=_LATENCY_BUCKETS, registry=registry)
        h.observe(0.003)  # something already there
        if fold:
            _observe_all(h, values[:100])
            _observe_all(h, values[100:])
        else:
            for v in values:
                h.observe(v)
        return "\n".join(line for line in generate_latest(registry).decode().splitlines() if "_created" not in line)

    assert text(fold=True) == text(fold=False)


class _Receive:
    """An ASGI ``receive`` after the body was read: blocks until the test sets the disconnect (as uvicorn's does)."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def __call__(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def _watch_cases() -> None:
    loop = asyncio.get_running_loop()
    # answered: True, and the task holds no cancellation of ours afterwards (its next await is a plain one)
    futures = [loop.create_future() for _ in range(3)]
    for i, f in enumerate(futures):
        loop.call_later(0.001 * (i + 1), f.set_result, i)
    assert await answered_or_gone(futures, _Receive()) is True
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0.001)
    # the client goes away first: False, and answers that come later cancel nothing
    receive = _Receive()
    late = [loop.create_future()]
    loop.call_later(0.001, receive.gone.set)
    assert await answered_or_gone(late, receive) is False
    late[0].set_result(0)
    await asyncio.sleep(0.002)
    assert task.cancelling() == 0
    # the disconnect and the last answer in the same loop turn: answered (the answer is ready to send)
    receive = _Receive()
    same = [loop.create_future()]

    def both() -> None:
        receive.gone.set()
        same[0].set_result(0)

    loop.call_later(0.001, both)
    assert await answered_or_gone(same, receive) is True
    assert task.cancelling() == 0


def test_the_disconnect_watch_wakes_on_answers_and_on_a_disconnect() -> None:
    asyncio.run(_watch_cases())


def test_a_cancellation_from_outside_still_cancels_the_watch() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future()]
        watch = asyncio.ensure_future(answered_or_gone(futures, _Receive()))
        await asyncio.sleep(0.001)

        def both() -> None:  # the answer and a shutdown's cancel in the same turn: the cancel wins
            futures[0].set_result(0)
            watch.cancel()

        loop.call_soon(both)
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        assert watch.cancelled()
        # an outside cancel alone, answers still pending
        pending = [loop.create_future()]
        watch = asyncio.ensure_future(answered_or_gone(pending, _Receive()))
        await asyncio.sleep(0.001)
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        assert watch.cancelled()

    asyncio.run(main())
