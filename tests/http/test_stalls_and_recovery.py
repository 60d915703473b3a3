"""A server that survives: a cheap model that stalls holds only its own requests (probes answer, the stalled call
gets its deadline status at its deadline), and admission recovers once an overload ends.

Real server on 127.0.0.1, real HTTP clients, bounded in count and time.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import numpy as np
from tests.http.http_helpers import serving, toy_plan

from cascadeserve.profile import Profile
from cascadeserve.runtime import InputSpec, ModelConfig, RuntimeOptions


def _rows(xs: list[list[float]], **params: object) -> dict[str, object]:
    body: dict[str, object] = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [len(xs), 2], "data": xs}]}
    if params:
        body["parameters"] = params
    return body


def test_a_stalled_cheap_model_fails_only_its_request_at_its_deadline(toy_profile: Profile) -> None:
    release = threading.Event()
    stall = threading.Event()

    def m0(batch: np.ndarray) -> np.ndarray:  # cheap (waited for in place), until it stalls
        if stall.is_set() and np.any(batch[:, 0] < 0):
            release.wait(timeout=60.0)
        return np.column_stack([batch[:, 0].clip(0, 1), 1 - batch[:, 0].clip(0, 1), np.zeros(len(batch))])

    def m1(batch: np.ndarray) -> np.ndarray:
        return np.tile([0.1, 0.2, 0.7], (len(batch), 1))

    models = ModelConfig({"m0": m0, "m1": m1}, InputSpec("input", "FP32", (-1, 2)))
    options = RuntimeOptions(max_in_flight=4096, stall_after_s=1.0)
    with serving(toy_profile, models=models, runtime_options=options) as server:
        url = f"{server.url}/v2/models/toy/infer"
        with httpx.Client(timeout=30) as client:
            for _ in range(20):  # m0 shows itself cheap
                assert client.post(url, json=_rows([[0.9, 0.0]])).status_code == 200
            stall.set()
            outcome: list[tuple[int, float]] = []

            def stalled_call() -> None:
                t0 = time.monotonic()
                r = httpx.post(url, json=_rows([[-1.0, 0.0]], timeout_ms=1000), timeout=60)
                outcome.append((r.status_code, time.monotonic() - t0))

            caller = threading.Thread(target=stalled_call)
            caller.start()
            probes: list[float] = []
            ready_reasons: list[str] = []
            deadline = time.monotonic() + 30.0
            while (not outcome or not ready_reasons) and time.monotonic() < deadline:
                t0 = time.monotonic()
                assert client.get(f"{server.url}/v2/health/live").status_code == 200
                probes.append(time.monotonic() - t0)
                ready = client.get(f"{server.url}/v2/health/ready")
                if ready.status_code != 200:
                    ready_reasons.append(ready.text)
                time.sleep(0.05)
            caller.join(timeout=60)
            release.set()
            status, took = outcome[0]
            assert status == 504  # no stage ran: the deadline fails it (a 200 fallback after the stall, before)
            assert took < 10.0  # at its 1 s deadline (the model stalls for up to 60 s)
            assert len(probes) >= 3 and max(probes) < 2.0
            assert any("d0" in r or "d1" in r for r in ready_reasons)  # readiness names the stalled device
            # once the model returns, the device serves again
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline:
                r = client.post(url, json=_rows([[0.9, 0.0]]))
                if r.status_code == 200:
                    break
                time.sleep(0.1)
            assert r.status_code == 200


def test_admission_recovers_after_an_overload_that_drained_slowly(toy_profile: Profile) -> None:
    """Overload while every batch of the first model takes 0.6 s (a host taken by neighbours): windows close with
    few answers, the drain rate reads a few a second and the time bound falls to 1 ("0 of 1 in flight": every call
    of 2 rows shed, for good, before recovery). Once the model is fast again and the load falls to a quarter of the
    capacity, the bound climbs back: calls of 2 rows are admitted and (almost) nothing is shed."""
    slow = threading.Event()
    slow.set()

    def m0(batch: np.ndarray) -> np.ndarray:
        if slow.is_set():
            time.sleep(0.6)
        return np.column_stack([batch[:, 0].clip(0, 1), 1 - batch[:, 0].clip(0, 1), np.zeros(len(batch))])

    def m1(batch: np.ndarray) -> np.ndarray:
        return np.tile([0.1, 0.2, 0.7], (len(batch), 1))

    models = ModelConfig({"m0": m0, "m1": m1}, InputSpec("input", "FP32", (-1, 2)))
    # the time bound: 200/s x 2 x 50 ms = 20 in flight
    options = RuntimeOptions(max_in_flight=None, max_wait_slos=2.0, slo_ms=50.0, capacity_qps=200.0)
    with serving(toy_profile, toy_plan(toy_profile), models=models, runtime_options=options) as server:
        url = f"{server.url}/v2/models/toy/infer"
        one, two = _rows([[0.9, 0.0]]), _rows([[0.9, 0.0], [0.8, 0.0]])

        async def overload() -> list[int]:
            stop = time.monotonic() + 4.0
            codes: list[int] = []
            async with httpx.AsyncClient(timeout=60) as client:

                async def loop() -> None:
                    while time.monotonic() < stop:
                        codes.append((await client.post(url, json=one)).status_code)
                        await asyncio.sleep(0.02)

                await asyncio.gather(*(loop() for _ in range(32)))
            return codes

        codes = asyncio.run(overload())
        slow.clear()
        assert 503 in codes and 200 in codes and set(codes) <= {200, 503}
        with httpx.Client(timeout=60) as client:
            time.sleep(10.0)  # quiet, as a load balancer would wait before sending traffic back
            calm = []
            for _ in range(150):  # a quarter of the 200/s capacity for 3 s
                t0 = time.monotonic()
                calm.append(client.post(url, json=one).status_code)
                time.sleep(max(0.0, 0.02 - (time.monotonic() - t0)))
            assert calm.count(503) <= 1, calm.count(503)
            answer = client.post(url, json=two)
            assert answer.status_code == 200, answer.text
