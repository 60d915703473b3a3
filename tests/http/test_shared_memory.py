"""System shared memory over a real server, with tritonclient's own shared-memory utilities (POSIX objects made
with shm_open): inputs read from a registered region and outputs written into one, over HTTP and gRPC, give the
answers the same rows give in the request; the registry's calls need the admin token, open existing objects only and
refuse what does not fit, naming it; CUDA shared memory is refused (no GPU); the regions go when the server stops."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
import tritonclient.utils.shared_memory as shm
from tests.grpc.grpc_helpers import client as grpc_client
from tests.grpc.grpc_helpers import grpc_serving
from tests.http.http_helpers import ADMIN, ADMIN_TOKEN, serving

from cascadeserve.http import Server
from cascadeserve.profile import Profile

GRPC_ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
IDS = np.array([3, 1, 4, 1, 5], dtype=np.int64)


@pytest.fixture(scope="module")
def server(toy_profile: Profile) -> Iterator[Server]:
    with grpc_serving(toy_profile) as s:
        yield s


@pytest.fixture()
def region() -> Iterator[tuple[str, shm.SharedMemoryRegion]]:
    """A POSIX shared-memory object of 1 KiB, made as a client makes it (tritonclient), removed afterwards."""
    key = f"/cascadeserve-test-{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region("made", key, 1024)
    try:
        yield key, handle
    finally:
        shm.destroy_shared_memory_region(handle)


def _http(server: Server) -> th.InferenceServerClient:
    return th.InferenceServerClient(server.url.removeprefix("http://"))


def _plain(server: Server, ids: np.ndarray) -> dict[str, np.ndarray]:
    inp = th.InferInput("sample_id", [len(ids)], "INT64")
    inp.set_data_from_numpy(ids)
    res = _http(server).infer("toy", [inp])
    return {n: res.as_numpy(n) for n in ("label", "certainty", "model")}


def test_inputs_and_outputs_in_shared_memory_over_http(server: Server, region: tuple[str, object]) -> None:
    key, handle = region
    http = _http(server)
    http.register_system_shared_memory("io", key, 1024, headers=ADMIN)
    try:
        shm.set_shared_memory_region(handle, [IDS], offset=16)  # the input at byte 16 of the region
        inp = th.InferInput("sample_id", [len(IDS)], "INT64").set_shared_memory("io", IDS.nbytes, offset=16)
        label = th.InferRequestedOutput("label")
        label.set_shared_memory("io", 8 * len(IDS), offset=256)
        model = th.InferRequestedOutput("model")
        model.set_shared_memory("io", 512, offset=512)  # BYTES: each element behind its 4-byte length
        res = http.infer("toy", [inp], outputs=[label, model, th.InferRequestedOutput("certainty")])
        expected = _plain(server, IDS)
        out = res.get_output("label")
        assert (out["datatype"], out["shape"]) == ("INT64", [5]) and "data" not in out
        got = shm.get_contents_as_numpy(handle, np.int64, [5], offset=256)
        assert got.tolist() == expected["label"].tolist()
        names = shm.get_contents_as_numpy(handle, np.object_, [5], offset=512)
        assert names.tolist() == expected["model"].tolist()
        assert res.as_numpy("certainty").tolist() == expected["certainty"].tolist()  # the others as ever
        status = http.get_system_shared_memory_status(region_name="io")
        assert status == [{"name": "io", "key": key, "offset": 0, "byte_size": 1024}]
    finally:
        http.unregister_system_shared_memory("io", headers=ADMIN)
    assert http.get_system_shared_memory_status() == []


def test_inputs_and_outputs_in_shared_memory_over_grpc(server: Server, region: tuple[str, object]) -> None:
    key, handle = region
    client = grpc_client(server)
    client.register_system_shared_memory("in", key, 64, headers=GRPC_ADMIN)  # two regions of one object
    client.register_system_shared_memory("out", key, 512, offset=512, headers=GRPC_ADMIN)
    try:
        shm.set_shared_memory_region(handle, [IDS.reshape(-1, 1)])
        inp = tg.InferInput("sample_id", [len(IDS), 1], "INT64")
        inp.set_shared_memory("in", IDS.nbytes)
        label = tg.InferRequestedOutput("label")
        label.set_shared_memory("out", 8 * len(IDS))
        res = client.infer("toy", [inp], outputs=[label, tg.InferRequestedOutput("certainty")])
        assert [o.shape for o in res.get_response().outputs] == [[5, 1], [5, 1]]
        got = shm.get_contents_as_numpy(handle, np.int64, [5, 1], offset=512)
        expected = _plain(server, IDS)
        assert got.ravel().tolist() == expected["label"].tolist()
        assert res.as_numpy("certainty").ravel().tolist() == expected["certainty"].tolist()  # its index kept
        status = client.get_system_shared_memory_status(as_json=True)["regions"]
        assert status["out"] == {"name": "out", "key": key, "offset": "512", "byte_size": "512"}
    finally:
        client.unregister_system_shared_memory(headers=GRPC_ADMIN)  # every region
    assert client.get_system_shared_memory_status(as_json=True) == {}


def _infer(
    server: Server, inputs: list[dict[str, object]], outputs: list[dict[str, object]] | None = None
) -> httpx.Response:
    body: dict[str, object] = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return httpx.post(f"{server.url}/v2/models/toy/infer", json=body)


def _in(region: str, size: int, **more: object) -> dict[str, object]:
    params = {"shared_memory_region": region, "shared_memory_byte_size": size, **more}
    return {"name": "sample_id", "datatype": "INT64", "shape": [5], "parameters": params}


def _out(name: str, size: int, **more: object) -> list[dict[str, object]]:
    return [{"name": name, "parameters": {"shared_memory_region": "small", "shared_memory_byte_size": size, **more}}]


def test_what_does_not_fit_is_refused_naming_it(server: Server, region: tuple[str, object]) -> None:
    key, handle = region
    http = _http(server)
    http.register_system_shared_memory("small", key, 64, offset=64, headers=ADMIN)
    shm.set_shared_memory_region(handle, [IDS], offset=64)
    plain = [{"name": "sample_id", "datatype": "INT64", "shape": [5], "data": IDS.tolist()}]
    where = "inputs[0].parameters"
    try:
        cases = [
            ([_in("nope", 40)], None, f"{where}.shared_memory_region: unknown shared memory region 'nope'"),
            (
                [_in("small", 40, shared_memory_offset=32)],
                None,
                f"{where}: shared_memory_offset 32 + shared_memory_byte_size 40 runs past the end of region 'small' "
                "(64 bytes)",
            ),
            (
                [_in("small", 32)],
                None,
                "input 'sample_id': shared_memory_byte_size 32 does not match shape [5] of INT64 (40 bytes)",
            ),
            ([{**_in("small", 40), "parameters": {"shared_memory_region": "small"}}], None, f"{where}: shared_memory_"),
            (plain, _out("label", 16), "output 'label': shared_memory_byte_size 16 is too small for the 40 bytes"),
            (
                plain,
                _out("certainty", 64, classification=1),
                "outputs[0].parameters: classification and shared_memory_region cannot go together",
            ),
            (
                plain,
                _out("label", 64, binary_data=True),
                "outputs[0].parameters: binary_data and shared_memory_region cannot go together",
            ),
        ]
        for inputs, outputs, says in cases:
            r = _infer(server, inputs, outputs)
            assert r.status_code == 400 and r.json()["error"].startswith(says), (says, r.text)
        assert _infer(server, [_in("small", 40)]).status_code == 200  # the same region, used right
    finally:
        http.unregister_system_shared_memory("small", headers=ADMIN)


def test_register_opens_existing_objects_only_with_the_admin_token(server: Server, region: tuple[str, object]) -> None:
    key, _ = region
    url = f"{server.url}/v2/systemsharedmemory/region/r/register"
    body = {"key": key, "offset": 0, "byte_size": 64}
    assert httpx.post(url, json=body).status_code == 401
    assert httpx.post(url, json=body, headers={"Authorization": "Bearer nope"}).status_code == 403
    missing = f"/cascadeserve-test-missing-{uuid.uuid4().hex[:8]}"
    cases = [
        ({**body, "key": missing}, f"key: {missing!r} is not a shared-memory object this server can open in /dev/shm"),
        ({**body, "key": "/../etc/passwd"}, "key: expected the name of a shared-memory object"),
        ({**body, "key": "/.."}, "key: expected the name of a shared-memory object"),
        ({**body, "byte_size": 4096}, f"offset, byte_size: 0 + 4096 bytes runs past the end of {key!r} (1024 bytes)"),
        ({**body, "byte_size": 0}, "byte_size: a region holds at least one byte"),
        ({**body, "offset": -1}, "offset: expected a non-negative integer, got -1"),
        ({"key": key}, "body: byte_size is missing"),
    ]
    for sent, says in cases:
        r = httpx.post(url, json=sent, headers=ADMIN)
        assert r.status_code == 400 and r.json()["error"].startswith(says), (says, r.text)
    assert not os.path.exists(f"/dev/shm{missing}")  # never created
    assert httpx.post(url, json=body, headers=ADMIN).status_code == 200
    try:
        again = httpx.post(url, json=body, headers=ADMIN)
        assert again.status_code == 409 and "registered already" in again.json()["error"]
    finally:
        assert httpx.post(f"{server.url}/v2/systemsharedmemory/region/r/unregister", headers=ADMIN).status_code == 200
    gone = httpx.get(f"{server.url}/v2/systemsharedmemory/region/r/status")
    assert gone.status_code == 400 and gone.json()["error"].startswith("unknown shared memory region 'r'")
    with pytest.raises(tg.InferenceServerException) as e:
        grpc_client(server).register_system_shared_memory("g", key, 64)
    assert e.value.status() == str(grpc.StatusCode.UNAUTHENTICATED)


def test_cuda_shared_memory_is_refused(server: Server) -> None:
    r = httpx.post(f"{server.url}/v2/cudasharedmemory/region/c/register", json={"raw_handle": {"b64": ""}})
    assert r.status_code == 400 and "no GPU" in r.json()["error"]
    assert httpx.get(f"{server.url}/v2/cudasharedmemory/status").json() == []  # none, as Triton without a GPU
    assert httpx.post(f"{server.url}/v2/cudasharedmemory/unregister").status_code == 200  # none to unregister
    client = grpc_client(server)
    with pytest.raises(tg.InferenceServerException) as e:
        client.register_cuda_shared_memory("c", b"\0" * 64, 0, 64)
    assert e.value.status() == str(grpc.StatusCode.UNIMPLEMENTED) and "no GPU" in e.value.message()
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    client.unregister_cuda_shared_memory()


def test_the_regions_go_when_the_server_stops(toy_profile: Profile, region: tuple[str, object]) -> None:
    key, _ = region
    with serving(toy_profile) as s:
        _http(s).register_system_shared_memory("kept", key, 128, headers=ADMIN)
        memory = s.app.asgi.api.shared.shm  # type: ignore[attr-defined]
        view = memory.regions["kept"].view
    assert memory.regions == {} and view.closed


def test_a_server_without_an_admin_token_registers_nothing(toy_profile: Profile, region: tuple[str, object]) -> None:
    key, _ = region
    with serving(toy_profile, admin_token=None) as s:
        body = {"key": key, "byte_size": 64}
        r = httpx.post(f"{s.url}/v2/systemsharedmemory/region/r/register", json=body)
        assert r.status_code == 403 and "--allow-client-shm" in r.json()["error"]
        assert httpx.get(f"{s.url}/v2/systemsharedmemory/status").json() == []


def test_allow_client_shm_lets_any_client_that_may_infer_register(
    toy_profile: Profile, region: tuple[str, object]
) -> None:
    key, handle = region
    infer = {"Authorization": "Bearer infer-token"}
    with grpc_serving(toy_profile, admin_token=None, auth_token="infer-token", allow_client_shm=True) as s:
        url = f"{s.url}/v2/systemsharedmemory/region/r/register"
        assert httpx.post(url, json={"key": key, "byte_size": 64}).status_code == 401  # the inference token still
        assert httpx.post(url, json={"key": key, "byte_size": 64}, headers=infer).status_code == 200
        shm.set_shared_memory_region(handle, [IDS])
        r = httpx.post(f"{s.url}/v2/models/toy/infer", json={"inputs": [_in("r", 40)]}, headers=infer)
        assert r.status_code == 200, r.text
        client = grpc_client(s)
        metadata = {"authorization": "Bearer infer-token"}
        client.register_system_shared_memory("g", key, 64, offset=64, headers=metadata)
        assert sorted(client.get_system_shared_memory_status(headers=metadata, as_json=True)["regions"]) == ["g", "r"]
        client.unregister_system_shared_memory(headers=metadata)
        assert httpx.get(f"{s.url}/v2/systemsharedmemory/status", headers=infer).json() == []
