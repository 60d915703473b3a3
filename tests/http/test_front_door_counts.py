"""The front door's cheap per-request paths, kept exact: metrics folded at scrape time after a burst over real HTTP
and when another thread collects, the histogram fold against prometheus-client's own ``observe``, and the disconnect
watch's counted cancel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from tests.http.http_helpers import metric, serving

from cascadeserve.http import metrics as metrics_module
from cascadeserve.http.fastpath import answered_or_gone
from cascadeserve.http.metrics import _LATENCY_BUCKETS, PrometheusObserver, _observe_all
from cascadeserve.policy.gears import GearDecision
from cascadeserve.profile import Profile
from cascadeserve.runtime import TickEvent

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


def test_a_collection_from_another_thread_folds_on_the_loop() -> None:
    """The loop counts while another thread collects the registry (``prometheus_client.start_http_server``): each
    collection's fold runs on the loop (a fold run elsewhere could drop the counts the loop adds between its read
    and its reset), the scrapes only grow, and every count arrives."""
    folded_on: set[int] = set()

    class Watched(PrometheusObserver):
        def _fold(self) -> None:
            folded_on.add(threading.get_ident())
            super()._fold()

    observer = Watched()
    rounds, per_round = 400, 250
    scrapes: list[float] = []
    stop = threading.Event()
    loop_thread: list[int] = []

    def scrape() -> None:
        while not stop.is_set():
            scrapes.append(metric(generate_latest(observer.registry).decode(), "cascadeserve_admitted_total"))

    async def count() -> None:
        loop_thread.append(threading.get_ident())
        observer.admitted(0)  # binds the loop (before it, a collection anywhere folds where it runs)
        scraper.start()
        for _ in range(rounds):
            for _ in range(per_round):
                observer.admitted(1)
                observer.shed(1)
            await asyncio.sleep(0)  # the foreign collection's fold runs here
        while len(scrapes) < 3:  # a slow scraper still gets its collections in while the loop runs
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.to_thread(scraper.join)  # the loop runs on: a collection in flight folds here

    scraper = threading.Thread(target=scrape)
    try:
        asyncio.run(count())
    finally:
        stop.set()
    assert folded_on == set(loop_thread)
    assert scrapes == sorted(scrapes)
    text = generate_latest(observer.registry).decode()  # the loop is gone: this thread folds the rest itself
    assert metric(text, "cascadeserve_admitted_total") == rounds * per_round
    assert metric(text, "cascadeserve_shed_total") == rounds * per_round


def test_a_foreign_collection_while_the_loop_is_stuck_reads_stale_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_module, "_FOREIGN_FOLD_S", 0.2)
    observer = PrometheusObserver()
    seen: list[float] = []

    async def run() -> None:
        observer.admitted(2)
        observer.tick(TickEvent(0.0, GearDecision(0, 0, 1.0, 0, False), False, 0))  # folded on the loop: 2
        observer.admitted(3)  # pending
        registry = observer.registry
        collected = threading.Thread(
            target=lambda: seen.append(metric(generate_latest(registry).decode(), "cascadeserve_admitted_total"))
        )
        collected.start()
        time.sleep(1.0)  # the loop is stuck past the wait: the foreign collection reads what was folded
        collected.join()
        await asyncio.sleep(0)  # the fold it asked for runs now, on the loop

    asyncio.run(run())
    assert seen == [2]
    assert observer._admitted == 0
    assert metric(generate_latest(observer.registry).decode(), "cascadeserve_admitted_total") == 5
