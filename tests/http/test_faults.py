"""Faults through real HTTP on loopback: a model that raises, overload shedding, deadlines, hot-swap under load.

Every load here is bounded (a few hundred requests, a few seconds) and targets 127.0.0.1 only. Each test runs on
both backends (``backend``: local, ray).
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
from tests.http.http_helpers import ADMIN, metric, serving, toy_plan

from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.runtime import Backend, InputSpec, ModelConfig


def _body(ids: list[int], **params: object) -> dict[str, object]:
    body: dict[str, object] = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [len(ids)], "data": ids}]}
    if params:
        body["parameters"] = params
    return body


def test_model_that_raises_gives_500_and_server_keeps_serving(toy_profile: Profile, backend: Backend) -> None:
    def make_m0(batch: np.ndarray) -> np.ndarray:
        if np.any(batch[:, 0] < 0):
            raise ValueError("negative feature")
        return np.column_stack([batch[:, 0], 1 - batch[:, 0], np.zeros(len(batch))])

    def make_m1(batch: np.ndarray) -> np.ndarray:
        return np.tile([0.1, 0.2, 0.7], (len(batch), 1))

    models = ModelConfig({"m0": make_m0, "m1": make_m1}, InputSpec("input", "FP32", (-1, 2)))
    with serving(toy_profile, models=models, backend=backend) as server:
        url = f"{server.url}/v2/models/toy/infer"

        def rows(xs: list[list[float]]) -> dict[str, object]:
            return {"inputs": [{"name": "input", "datatype": "FP32", "shape": [len(xs), 2], "data": xs}]}

        ok = httpx.post(url, json=rows([[0.9, 0.0], [0.5, 0.0]]), timeout=10)
        assert ok.status_code == 200, ok.text
        out = {o["name"]: o["data"] for o in ok.json()["outputs"]}
        assert out["model"] == ["m0", "m1"] and out["label"] == [0, 2]
        assert ok.json()["parameters"]["emulated"] is False
        bad = httpx.post(url, json=rows([[-1.0, 0.0]]), timeout=10)
        assert bad.status_code == 500 and "'m0'" in bad.json()["error"]
        assert httpx.post(url, json=rows([[0.8, 0.1]]), timeout=10).status_code == 200
        wrong = httpx.post(url, json=rows([[1.0]]), timeout=10)
        assert wrong.status_code == 400 and "shape" in wrong.json()["error"]


def _burst(url: str, n: int) -> list[httpx.Response]:
    """``n`` one-row infer calls sent at once, their responses in order."""

    async def send() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=10) as client:
            return await asyncio.gather(*(client.post(url, json=_body([i])) for i in range(n)))

    return asyncio.run(send())


def test_overload_sheds_with_503_and_loses_nothing(toy_profile: Profile, backend: Backend) -> None:
    # Batches wait for 16 samples or 200 ms, so requests pile up; only 8 may be in flight.
    plan = toy_plan(toy_profile, min_queue=16, max_wait_ms=200.0)
    with serving(toy_profile, plan, max_in_flight=8, backend=backend) as server:
        url = f"{server.url}/v2/models/toy/infer"

        responses = _burst(url, 40)
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 503}
        shed = [r for r in responses if r.status_code == 503]
        assert shed and all(r.headers["retry-after"] == "1" for r in shed)
        assert all("admission" in r.json()["error"] for r in shed)
        assert codes.count(200) >= 8
        text = httpx.get(f"{server.url}/metrics").text
        assert metric(text, "cascadeserve_shed_total") == len(shed)
        assert metric(text, "cascadeserve_admitted_total") == codes.count(200)
        assert metric(text, "cascadeserve_answered_total") == codes.count(200)
        assert metric(text, "cascadeserve_in_flight") == 0


def test_a_call_larger_than_the_admission_capacity_gets_413_without_retry_after(
    toy_profile: Profile, backend: Backend
) -> None:
    """Shedding it with 503 and Retry-After would send an obedient client into retrying forever."""
    with serving(toy_profile, max_in_flight=4, backend=backend) as server:
        r = httpx.post(f"{server.url}/v2/models/toy/infer", json=_body(list(range(5))), timeout=10)
        assert r.status_code == 413
        assert "retry-after" not in r.headers
        assert "5 rows exceeds the admission capacity of 4" in r.json()["error"]
        ok = httpx.post(f"{server.url}/v2/models/toy/infer", json=_body(list(range(4))), timeout=10)
        assert ok.status_code == 200  # a call that fits is served, and nothing leaked
        assert metric(httpx.get(f"{server.url}/metrics").text, "cascadeserve_in_flight") == 0


def _slow_second_stage_profile(base: Profile) -> Profile:
    models = (
        ModelProfile("m0", 100.0, RuntimeCurve((1,), (2.0,))),
        ModelProfile("m1", 100.0, RuntimeCurve((1,), (5000.0,))),  # busy long after a starved client's next call
    )
    return Profile(
        "slow",
        models,
        base.sample_ids,
        base.labels,
        base.predictions[:2].copy(),
        base.certainties[:2].copy(),
    )


def test_deadline_fallback_over_http(toy_profile: Profile, backend: Backend) -> None:
    prof = _slow_second_stage_profile(toy_profile)
    from cascadeserve.cascade import Cascade
    from cascadeserve.plan import Device, fixed_plan

    plan = fixed_plan(prof, Cascade(("m0", "m1"), (1.0,)), (Device(name="d0", memory_mb=1000),))
    with serving(prof, plan, backend=backend) as server:
        url = f"{server.url}/v2/models/toy/infer"
        # 1 s: far past m0's runtime plus a loaded machine's (or Ray's) overhead, well before m1's 5 s end (250 ms
        # was too short on Ray beside 8 busy loops, load 12: the deadline passed before m0 ran).
        r = httpx.post(url, json=_body([3], timeout_ms=1000), timeout=15)
        assert r.status_code == 200, r.text
        out = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert out["model"] == ["m0"] and out["label"] == [int(prof.predictions[0, 3])]
        assert r.json()["parameters"]["fallback"] is True
        # m1 is busy for 5 s with the abandoned sample (400 ms was too short at load 12: the first answer reached the
        # client after m1 had finished, m0 then ran at once and beat a late-firing 1 ms timer); a 1 ms deadline
        # passes before m0 can run.
        r2 = httpx.post(url, json=_body([4], timeout_ms=1), timeout=10)
        assert r2.status_code == 504 and "deadline" in r2.json()["error"]


def test_hot_swap_under_load_answers_everything_exactly_once(toy_profile: Profile, backend: Backend) -> None:
    plans = [toy_plan(toy_profile, min_queue=q, max_wait_ms=10.0) for q in (1, 4, 2)]
    with serving(toy_profile, plans[0], backend=backend) as server:
        url = f"{server.url}/v2/models/toy/infer"

        async def load() -> tuple[list[httpx.Response], list[int]]:
            async with httpx.AsyncClient(timeout=20) as client:
                tasks = []
                swaps = []
                for i in range(300):
                    tasks.append(asyncio.create_task(client.post(url, json=_body([i % 500]))))
                    if i in (100, 200):
                        p = plans[1 if i == 100 else 2]
                        r = await client.put(
                            f"{server.url}/v2/cascade/plan", content=p.to_json().encode(), headers=ADMIN
                        )
                        swaps.append(r.status_code)
                    await asyncio.sleep(0.002)
                return list(await asyncio.gather(*tasks)), swaps

        responses, swaps = asyncio.run(load())
        assert swaps == [200, 200]
        assert [r.status_code for r in responses] == [200] * 300
        text = httpx.get(f"{server.url}/metrics").text
        assert metric(text, "cascadeserve_admitted_total") == 300
        assert metric(text, "cascadeserve_answered_total") == 300
        assert metric(text, "cascadeserve_duplicate_answers_refused_total") == 0
        assert metric(text, "cascadeserve_plan_swaps_total") == 2
        assert metric(text, "cascadeserve_in_flight") == 0


def test_shed_requests_count_in_the_load_the_gear_is_chosen_for(toy_profile: Profile, backend: Backend) -> None:
    """With 2 slots and batches held for 200 ms, a burst of 40 calls is mostly shed, some before their body is read;
    the QPS meter the gear is chosen by counts every one of them (an overload that admission sheds must still read
    as the overload it is), and ``cascadeserve_qps`` shows its reading."""
    plan = toy_plan(toy_profile, min_queue=16, max_wait_ms=200.0)
    with serving(toy_profile, plan, max_in_flight=2, backend=backend) as server:
        url = f"{server.url}/v2/models/toy/infer"

        codes = [r.status_code for r in _burst(url, 40)]
        assert codes.count(503) >= 30 and codes.count(503) + codes.count(200) == 40
        assert server.app.runtime.producer.meter.total == 40
        text = httpx.get(f"{server.url}/metrics").text
        assert "\ncascadeserve_qps " in text  # the meter's last reading, for a dashboard beside the gear
