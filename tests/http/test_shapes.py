"""Triton's shape conventions, on HTTP and gRPC, for every kind of cascade served.

A served cascade's ``max_batch_size`` is positive, so by Triton's rule its model config's ``dims`` leave the batch
dimension out and its metadata gives ``[-1] + dims``: a per-row scalar input (an emulated cascade's ``sample_id``,
a text cascade's ``BYTES`` text, an LLM scoring item) is dims ``[1]``, metadata ``[-1, 1]``; an input with a feature
dimension (``[-1, 4]``) is dims ``[4]``. Every output is dims ``[1]``, metadata ``[-1, 1]``. Requests shaped
``[N] + dims`` are accepted, and a per-row scalar input also as ``[N]`` (what clients sent before); the answer's
outputs are ``[N, 1]`` to a request that sent a per-row scalar as ``[N, 1]``, and ``[N]`` otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.grpc.grpc_helpers import client, grpc_serving

from cascadeserve.http import Server
from cascadeserve.profile import Profile
from cascadeserve.runtime import InputSpec, LocalBackend, ModelConfig

ROWS = 3
TEXTS = ["a fine day", "awful", json.dumps({"prompt": "Which is heavier?", "options": ["a feather", "a brick"]})]
FEATURES = np.array([[1, 2, 3, 4], [0, 0, 0, 1], [2.5, 0, 0, 0]], dtype=np.float32)


def _one_hot(labels: list[int]) -> np.ndarray:
    return np.eye(3)[labels]


def _text_label(text: str) -> int:
    return len(text) % 3


def _text_model(batch: np.ndarray) -> np.ndarray:
    return _one_hot([_text_label(str(t)) for t in batch])


def _feature_model(batch: np.ndarray) -> np.ndarray:
    return _one_hot([int(r.sum()) % 3 for r in batch])


def _several_model(batch: Mapping[str, np.ndarray]) -> np.ndarray:
    return _one_hot([(_text_label(str(t)) + int(r.sum())) % 3 for t, r in zip(batch["text"], batch["x"], strict=True)])


def _models(kind: str) -> ModelConfig | None:
    if kind == "emulated":
        return None
    fn: Any = {"text": _text_model, "features": _feature_model, "several": _several_model}[kind]
    spec = {
        "text": InputSpec("text", "BYTES", (-1,)),
        "features": InputSpec("x", "FP32", (-1, 4)),
        "several": InputSpec("text", "BYTES", (-1,)),
    }[kind]
    more = (InputSpec("x", "FP32", (-1, 4)),) if kind == "several" else ()
    return ModelConfig({"m0": fn, "m1": fn}, spec, more_inputs=more)


KINDS = ["emulated", "text", "features", "several"]


@pytest.fixture(scope="module")
def servers(toy_profile: Profile) -> Iterator[dict[str, Server]]:
    """A server (HTTP and gRPC) for each kind, over the toy profile's plan (``m0`` answers every row here)."""
    with ExitStack() as stack:
        out = {}
        for kind in KINDS:
            models = _models(kind)
            backend = None if models is None else LocalBackend()
            out[kind] = stack.enter_context(grpc_serving(toy_profile, models=models, backend=backend))
        yield out


def _expected(kind: str) -> list[int]:
    text = [_text_label(t) for t in TEXTS]
    feats = [int(r.sum()) % 3 for r in FEATURES]
    if kind == "text":
        return text
    if kind == "features":
        return feats
    if kind == "several":
        return [(a + b) % 3 for a, b in zip(text, feats, strict=True)]
    return []  # emulated: the profile's recorded answers (compared across forms instead)


def _arrays(kind: str, column: bool) -> dict[str, tuple[np.ndarray, str]]:
    """Each input's rows and datatype; ``column``: a per-row scalar input in Triton's ``[N, 1]``."""

    def scalar(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1, 1) if column else a

    ids = (np.arange(ROWS, dtype=np.int64), "INT64")
    text = (scalar(np.array(TEXTS, dtype=object)), "BYTES")
    x = (FEATURES, "FP32")
    if kind == "emulated":
        return {"sample_id": (scalar(ids[0]), "INT64")}
    if kind == "text":
        return {"text": text}
    if kind == "features":
        return {"x": x}
    return {"text": text, "x": x}


def _http(server: Server, kind: str, column: bool, binary: bool = True) -> th.InferResult:
    c = th.InferenceServerClient(server.url.removeprefix("http://"))
    ins = []
    for name, (arr, dt) in _arrays(kind, column).items():
        i = th.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr, binary_data=binary)
        ins.append(i)
    return c.infer("toy", ins)


def _grpc(server: Server, kind: str, column: bool) -> tg.InferResult:
    ins = []
    for name, (arr, dt) in _arrays(kind, column).items():
        i = tg.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr)
        ins.append(i)
    return client(server).infer("toy", ins)


def _scalar_inputs(kind: str) -> set[str]:
    return {"emulated": {"sample_id"}, "text": {"text"}, "features": set(), "several": {"text"}}[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_metadata_and_config_agree_under_tritons_batching_rule(servers: dict[str, Server], kind: str) -> None:
    server = servers[kind]
    meta = th.InferenceServerClient(server.url.removeprefix("http://")).get_model_metadata("toy")
    config = th.InferenceServerClient(server.url.removeprefix("http://")).get_model_config("toy")
    gmeta = client(server).get_model_metadata("toy", as_json=True)
    gconfig = client(server).get_model_config("toy", as_json=True)["config"]
    assert config["max_batch_size"] > 0 and int(gconfig["max_batch_size"]) == config["max_batch_size"]
    for side in ("inputs", "outputs"):
        tensors = config["input" if side == "inputs" else "output"]
        assert [t["name"] for t in meta[side]] == [t["name"] for t in tensors]
        for m, t in zip(meta[side], tensors, strict=True):
            assert m["shape"] == [-1, *t["dims"]], (side, m, t)  # Triton: metadata = [-1] + config dims
        # gRPC says the same (int64 as JSON text)
        assert [(t["name"], t["datatype"], [int(s) for s in t["shape"]]) for t in gmeta[side]] == [
            (t["name"], t["datatype"], t["shape"]) for t in meta[side]
        ]
        assert [[int(d) for d in t["dims"]] for t in gconfig["input" if side == "inputs" else "output"]] == [
            t["dims"] for t in tensors
        ]
    for m in meta["inputs"]:
        assert m["shape"] == ([-1, 1] if m["name"] in _scalar_inputs(kind) else [-1, 4])
    assert all(m["shape"] == [-1, 1] for m in meta["outputs"])


@pytest.mark.parametrize("kind", KINDS)
def test_both_forms_answer_the_same_rows_on_http_and_grpc(servers: dict[str, Server], kind: str) -> None:
    server = servers[kind]
    scalar = bool(_scalar_inputs(kind))
    answers: dict[tuple[str, bool], list[int]] = {}
    for column in (True, False) if scalar else (False,):
        for proto, res in (
            ("http", _http(server, kind, column)),
            ("json", _http(server, kind, column, binary=False)),
            ("grpc", _grpc(server, kind, column)),
        ):
            label = res.as_numpy("label")
            want = (ROWS, 1) if column else (ROWS,)
            assert label.shape == want, (proto, column)
            for name in ("certainty", "model"):
                assert res.as_numpy(name).shape == want, (proto, column, name)
            answers[proto, column] = label.reshape(-1).tolist()
    first = next(iter(answers.values()))
    assert all(a == first for a in answers.values()), answers
    if kind != "emulated":
        assert first == _expected(kind)


def test_json_per_row_scalars_nested_or_flat(servers: dict[str, Server]) -> None:
    server = servers["emulated"]  # its sample_id stands for every per-row scalar here
    url = f"{server.url}/v2/models/toy/infer"
    flat = httpx.post(
        url, json={"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [2, 1], "data": [4, 5]}]}
    )
    nested = httpx.post(
        url, json={"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [2, 1], "data": [[4], [5]]}]}
    )
    legacy = httpx.post(
        url, json={"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [2], "data": [4, 5]}]}
    )
    for r in (flat, nested, legacy):
        assert r.status_code == 200, r.text
    shapes = [{o["name"]: o["shape"] for o in r.json()["outputs"]} for r in (flat, nested, legacy)]
    assert shapes[0] == shapes[1] == {"label": [2, 1], "certainty": [2, 1], "model": [2, 1]}
    assert shapes[2] == {"label": [2], "certainty": [2], "model": [2]}
    labels = [next(o["data"] for o in r.json()["outputs"] if o["name"] == "label") for r in (flat, nested, legacy)]
    assert labels[0] == labels[1] == labels[2]


@pytest.mark.parametrize(
    ("shape", "needle"),
    [([1, 2], "shape [1, 2] does not match [-1, 1] (or [-1])"), ([1, 1, 1], "does not match"), ([], "does not")],
)
def test_other_shapes_are_refused_naming_both_forms(servers: dict[str, Server], shape: list[int], needle: str) -> None:
    server = servers["emulated"]  # one kind suffices: the check is the inference core's, for every input
    data = list(range(int(np.prod(shape))))
    body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": shape, "data": data}]}
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json=body)
    assert r.status_code == 400 and needle in r.json()["error"], r.text
    with pytest.raises(tg.InferenceServerException) as e:
        i = tg.InferInput("sample_id", shape, "INT64")
        i.set_data_from_numpy(np.array(data, dtype=np.int64).reshape(shape))
        client(server).infer("toy", [i])
    assert needle in str(e.value.message())


def test_a_feature_input_keeps_its_one_form(servers: dict[str, Server]) -> None:
    server = servers["features"]
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4, 1], "data": FEATURES.ravel().tolist()}]}
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json=body)
    assert r.status_code == 400 and "shape [3, 4, 1] does not match [-1, 4]" in r.json()["error"], r.text
