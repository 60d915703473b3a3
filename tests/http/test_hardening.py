"""Hardened serving over real HTTP on loopback: the control plane's tokens and plan checks, Triton's statistics,
the small protocol holes (each with its status), admission by time with a Retry-After from the backlog, readiness
that tells the truth, and clients that disconnect.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tests.http.http_helpers import ADMIN, serving, toy_plan

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile
from cascadeserve.runtime import LocalBackend, RuntimeOptions


def _ids(ids: list[object], **extra: object) -> dict[str, object]:
    return {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [len(ids)], "data": ids, **extra}]}


def test_control_plane_is_off_by_default_and_needs_the_admin_token(toy_profile: Profile) -> None:
    new = toy_plan(toy_profile, min_queue=2).to_json().encode()
    with serving(toy_profile, backend=LocalBackend(), admin_token=None) as server:
        r = httpx.put(f"{server.url}/v2/cascade/plan", content=new, headers=ADMIN, timeout=10)
        assert r.status_code == 403 and "--admin-token" in r.json()["error"]
    with serving(toy_profile, backend=LocalBackend()) as server:
        url = f"{server.url}/v2/cascade/plan"
        none = httpx.put(url, content=new, timeout=10)
        assert none.status_code == 401 and none.headers["www-authenticate"] == "Bearer"
        wrong = httpx.put(url, content=new, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 403
        assert server.app.runtime.current.number == 0  # nothing was swapped
        # invalid plans: 422 naming the field
        cases = {
            b'{"gears": 1}': "plan:",
            toy_plan(toy_profile).to_json().replace('"d1"', '"d9"').encode(): "devices.1.name: device 'd9'",
            toy_plan(toy_profile).to_json().replace('"memory_mb": 1000.0', '"memory_mb": 5000.0', 1).encode(): (
                "devices.0.memory_mb"
            ),
            toy_plan(toy_profile, min_queue=1_000_000).to_json().encode(): "gears.0.replicas.0.min_queue: 1000000",
            toy_plan(toy_profile, max_wait_ms=60_000.0).to_json().encode(): "max_wait_ms",
            b"[" * 100_000: "nested too deeply",
        }
        for body, named in cases.items():
            r = httpx.put(url, content=body, headers=ADMIN, timeout=10)
            assert r.status_code == 422, (named, r.text)
            assert named in r.json()["error"], r.json()["error"]
        ok = httpx.put(url, content=new, headers=ADMIN, timeout=10)
        assert ok.status_code == 200 and ok.json()["generation"] == 1


def test_auth_token_guards_inference_but_not_the_probes(toy_profile: Profile) -> None:
    with serving(toy_profile, backend=LocalBackend(), auth_token="infer-secret") as server:
        url = f"{server.url}/v2/models/toy/infer"
        assert httpx.post(url, json=_ids([1]), timeout=10).status_code == 401
        assert httpx.post(url, json=_ids([1]), headers={"Authorization": "Bearer x"}, timeout=10).status_code == 403
        good = httpx.post(url, json=_ids([1]), headers={"Authorization": "Bearer infer-secret"}, timeout=10)
        assert good.status_code == 200
        assert httpx.post(url, json=_ids([1]), headers=ADMIN, timeout=10).status_code == 200  # admin may infer
        assert httpx.get(f"{server.url}/v2/models/toy", timeout=10).status_code == 401
        assert httpx.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200
        assert httpx.get(f"{server.url}/openapi.json", timeout=10).status_code == 200


def test_model_statistics_as_tritonclient_reads_them_and_unknown_versions_404(toy_profile: Profile) -> None:
    with serving(toy_profile, backend=LocalBackend()) as server:
        client = triton.InferenceServerClient(server.url.removeprefix("http://"))
        inp = triton.InferInput("sample_id", [3], "INT64")
        inp.set_data_from_numpy(np.array([0, 1, 2], dtype=np.int64))
        client.infer("toy", [inp])
        stats = client.get_inference_statistics("toy")
        (s,) = stats["model_stats"]
        assert s["name"] == "toy" and s["version"] == "1" and s["inference_count"] == 3
        assert s["inference_stats"]["success"]["count"] == 3 and s["inference_stats"]["success"]["ns"] > 0
        assert s["execution_count"] >= 1 and s["batch_stats"]
        assert client.get_inference_statistics("toy", "1")["model_stats"][0]["inference_count"] == 3
        assert client.get_inference_statistics()["model_stats"][0]["name"] == "toy"
        for path in ("/versions/2", "/versions/2/ready", "/versions/2/stats", "/versions/abc/infer"):
            r = httpx.request(
                "POST" if path.endswith("infer") else "GET", f"{server.url}/v2/models/toy{path}", json=_ids([1])
            )
            assert r.status_code == 404 and "no version" in r.json()["error"], path
        with pytest.raises(triton.InferenceServerException):
            client.get_inference_statistics("toy", "7")


# The table of bad inputs from the issue (and a few more), each with the status it gets.
BAD_INPUTS: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("shape [true, 64]", json.dumps(_ids([1], shape=[True, 64])).encode(), {}, 400, "shape"),
    ("100k nested [", b"[" * 100_000, {}, 400, "nested too deeply"),
    (
        "nested data",
        json.dumps(
            {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [[[[[1]]]]]}]}
        ).encode(),
        {},
        200,
        "",
    ),
    ("INT64 1.5", json.dumps(_ids([1.5])).encode(), {}, 400, "expected integers"),
    ("INT64 true", json.dumps(_ids([True])).encode(), {}, 400, "does not fit datatype INT64"),
    ("INT64 2**63", json.dumps(_ids([2**63])).encode(), {}, 400, "outside"),
    ("INT64 string", json.dumps(_ids(["7"])).encode(), {}, 400, "expected numbers"),
    (
        "BYTES to an INT64 model",
        json.dumps({"inputs": [{"name": "sample_id", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}).encode(),
        {},
        400,
        "datatype BYTES",
    ),
    (
        "binary size past the end",
        json.dumps(_ids([1], parameters={"binary_data_size": 80})).encode() + b"\0" * 8,
        {"Inference-Header-Content-Length": "0"},
        400,
        "binary_data_size 80",
    ),
    ("not JSON", b"{nope", {}, 400, "malformed JSON"),
    ("unknown output", json.dumps({**_ids([1]), "outputs": [{"name": "zzz"}]}).encode(), {}, 400, "zzz"),
    ("timeout_ms -1", json.dumps({**_ids([1]), "parameters": {"timeout_ms": -1}}).encode(), {}, 400, "timeout_ms"),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_get_a_4xx_naming_the_field(
    toy_profile: Profile, case: tuple[str, bytes, dict[str, str], int, str], request: pytest.FixtureRequest
) -> None:
    _, body, headers, status, named = case
    server = request.getfixturevalue("shared_server")
    hdrs = dict(headers)
    if "Inference-Header-Content-Length" in hdrs:
        hdrs["Inference-Header-Content-Length"] = str(len(body) - 8)
    r = httpx.post(f"{server.url}/v2/models/toy/infer", content=body, headers=hdrs, timeout=10)
    assert r.status_code == status, r.text
    if named:
        assert named in r.json()["error"]
    assert server.app.runtime.in_flight == 0


@pytest.fixture(scope="module")
def shared_server(toy_profile: Profile):  # type: ignore[no-untyped-def]
    with serving(toy_profile, backend=LocalBackend()) as server:
        yield server


def _slow_plan(profile: Profile, max_qps: float) -> object:
    """One device, m0 only, batches of 64 (or after 300 ms): a backlog builds at once."""
    return fixed_plan(
        profile,
        Cascade(("m0",), ()),
        (Device(name="d0", memory_mb=1000),),
        min_queue=64,
        max_wait_ms=300.0,
        max_qps=max_qps,
    )


def test_admission_by_time_sheds_with_retry_after_from_the_backlog(toy_profile: Profile) -> None:
    # capacity 10 QPS, SLO 1 s, 2 SLOs of wait: 20 requests may be in flight; a call of 25 can never fit (413).
    opts = RuntimeOptions(max_in_flight=4096, max_wait_slos=2.0, slo_ms=1000.0, default_timeout_s=10.0)
    plan = _slow_plan(toy_profile, 10.0)
    with serving(toy_profile, plan, backend=LocalBackend(), runtime_options=opts) as server:  # type: ignore[arg-type]
        url = f"{server.url}/v2/models/toy/infer"
        assert server.app.runtime.admission_policy.limit == 20
        big = httpx.post(url, json=_ids(list(range(25))), timeout=10)
        assert big.status_code == 413 and "retry-after" not in big.headers

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=20) as client:
                first = asyncio.ensure_future(client.post(url, json=_ids(list(range(18)))))
                await asyncio.sleep(0.05)  # 18 in flight now, waiting for their batches
                return [await client.post(url, json=_ids(list(range(12)))), await first]

        shed, served = asyncio.run(burst())
        assert served.status_code == 200
        assert shed.status_code == 503
        # 18 + 12 - 20 = 10 over the bound, draining at 10 QPS: retry in 1 s
        assert shed.headers["retry-after"] == "1" and "admission" in shed.json()["error"]
        assert server.app.runtime.in_flight == 0


def test_readiness_turns_false_while_admission_stays_full_and_when_a_device_stalls(toy_profile: Profile) -> None:
    opts = RuntimeOptions(max_in_flight=4, stall_after_s=0.5)
    plan = fixed_plan(
        toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), min_queue=8, max_wait_ms=1500.0
    )
    with serving(toy_profile, plan, backend=LocalBackend(), runtime_options=opts) as server:
        url = f"{server.url}/v2/models/toy/infer"
        ready = f"{server.url}/v2/health/ready"
        assert httpx.get(ready).json() == {"ready": True}

        async def watch(rows: list[int], shed_too: bool) -> tuple[list[int], str]:
            async with httpx.AsyncClient(timeout=20) as client:
                held = asyncio.ensure_future(client.post(url, json=_ids(rows)))
                await asyncio.sleep(0.1)
                codes = [(await client.post(url, json=_ids([5]))).status_code] if shed_too else []
                seen = []
                for _ in range(10):  # over a tick (100 ms), and past stall_after_s (0.5 s)
                    await asyncio.sleep(0.1)
                    seen.append((await client.get(ready)).json())
                codes.append((await held).status_code)
                return codes, " | ".join(str(s.get("reason")) for s in seen)

        codes, reasons = asyncio.run(watch([0, 1, 2, 3], True))  # admission full (4 of 4) for over a tick
        assert codes == [503, 200] and "admission has been full" in reasons
        codes, reasons = asyncio.run(watch([0], False))  # room left, but the trigger holds a request 1.5 s
        assert codes == [200] and "has waited" in reasons and "admission" not in reasons
        deadline = time.monotonic() + 10
        while httpx.get(ready).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(ready).json() == {"ready": True}


def test_a_client_that_disconnects_has_its_waiting_rows_dropped(toy_profile: Profile) -> None:
    plan = fixed_plan(
        toy_profile, Cascade(("m0",), ()), (Device(name="d0", memory_mb=1000),), min_queue=64, max_wait_ms=3000.0
    )
    with serving(toy_profile, plan, backend=LocalBackend()) as server:
        body = json.dumps(_ids([0, 1, 2])).encode()
        head = (
            f"POST /v2/models/toy/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(head + body)
            t0 = time.monotonic()
            while server.app.runtime.in_flight < 3 and time.monotonic() - t0 < 5:
                time.sleep(0.01)
            assert server.app.runtime.in_flight == 3
        t0 = time.monotonic()
        while server.app.runtime.in_flight and time.monotonic() - t0 < 2.0:  # well before the 3 s max wait
            time.sleep(0.01)
        assert server.app.runtime.in_flight == 0
        text = httpx.get(f"{server.url}/metrics").text
        assert 'cascadeserve_answered_total{outcome="client_gone"} 3.0' in text
