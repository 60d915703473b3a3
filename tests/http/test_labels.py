"""Class names in answers: a models config with ``labels`` makes every answer carry ``class_name`` beside ``label``
(V2 JSON, binary and gRPC alike, from one place; Clipper's REST answers too), and the model's metadata and config
list that output; a server without names answers as before. Real models (a callable whose class is its input modulo
3) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.grpc.grpc_helpers import client, grpc_serving
from tests.http.http_helpers import serving, toy_plan

from cascadeserve.http import Server, build_app
from cascadeserve.http.clipper import ClipperOptions
from cascadeserve.profile import Profile
from cascadeserve.runtime import load_model_config

NAMES = ["negative", "neutral", "positive"]
MODELS_YAML = """
input: {name: x, datatype: FP32, shape: [-1, 1]}
labels: [negative, neutral, positive]
models:
  - {name: m0, adapter: callable, ref: "tests.http.label_models:class_of_input"}
  - {name: m1, adapter: callable, ref: "tests.http.label_models:class_of_input"}
"""
OUTPUTS = ["label", "certainty", "model"]


@pytest.fixture(scope="module")
def server(toy_profile: Profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = tmp_path_factory.mktemp("labels") / "models.yaml"
    path.write_text(MODELS_YAML)
    models = load_model_config(path)
    assert models.labels == {0: "negative", 1: "neutral", 2: "positive"}
    with grpc_serving(toy_profile, models=models) as s:
        yield s


def _infer(server: Server, xs: list[float], **extra: object) -> dict[str, list[object]]:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [len(xs), 1], "data": xs}], **extra}
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return {o["name"]: o["data"] for o in r.json()["outputs"]}


def test_each_answer_carries_the_class_name_of_its_label(server: Server) -> None:
    for xs in ([0.0], [1.0], [2.0], [5.0, 4.0, 3.0, 7.0]):
        out = _infer(server, xs)
        assert out["label"] == [int(x) % 3 for x in xs]
        assert out["class_name"] == [NAMES[int(x) % 3] for x in xs]
    # asked for by name alone, it comes alone
    assert _infer(server, [8.0], outputs=[{"name": "class_name"}]) == {"class_name": ["positive"]}


def test_binary_and_grpc_answers_carry_it_too(server: Server) -> None:
    http = th.InferenceServerClient(server.url.removeprefix("http://"))
    x = th.InferInput("x", [3, 1], "FP32")
    x.set_data_from_numpy(np.array([[1.0], [2.0], [3.0]], dtype=np.float32), binary_data=True)
    res = http.infer("toy", [x])  # tritonclient's default: binary outputs
    assert res.as_numpy("label").tolist() == [1, 2, 0]
    assert res.as_numpy("class_name").tolist() == [b"neutral", b"positive", b"negative"]
    g = tg.InferInput("x", [2, 1], "FP32")
    g.set_data_from_numpy(np.array([[4.0], [6.0]], dtype=np.float32))
    gres = client(server).infer("toy", [g])
    assert gres.as_numpy("label").tolist() == [1, 0]
    assert gres.as_numpy("class_name").tolist() == [b"neutral", b"negative"]
    outputs = [o.name for o in client(server).get_model_metadata("toy").outputs]
    assert outputs == [*OUTPUTS, "class_name"]


def test_metadata_and_config_list_the_output(server: Server) -> None:
    meta = httpx.get(f"{server.url}/v2/models/toy").json()
    assert meta["outputs"][-1] == {"name": "class_name", "datatype": "BYTES", "shape": [-1, 1]}  # [-1] + dims
    assert [o["name"] for o in meta["outputs"]] == [*OUTPUTS, "class_name"]
    config = httpx.get(f"{server.url}/v2/models/toy/config").json()
    assert config["output"][-1] == {"name": "class_name", "data_type": "TYPE_STRING", "dims": [1], "reshape": {}}


def test_without_names_there_is_no_class_name(toy_profile: Profile) -> None:
    with serving(toy_profile) as s:
        meta = httpx.get(f"{s.url}/v2/models/toy").json()
        assert [o["name"] for o in meta["outputs"]] == OUTPUTS
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [2], "data": [0, 1]}]}
        r = httpx.post(f"{s.url}/v2/models/toy/infer", json=body, timeout=30)
        assert [o["name"] for o in r.json()["outputs"]] == OUTPUTS
        asked = {**body, "outputs": [{"name": "class_name"}]}
        refused = httpx.post(f"{s.url}/v2/models/toy/infer", json=asked, timeout=30)
        says = "outputs: unknown output 'class_name'; this model has certainty, label, model"
        assert (refused.status_code, refused.json()) == (400, {"error": says})


def test_names_that_miss_a_class_of_the_profile_are_refused(toy_profile: Profile) -> None:
    with pytest.raises(ValueError) as e:
        build_app(toy_profile, toy_plan(toy_profile), emulate=True, labels={0: "negative", 1: "neutral"})
    assert str(e.value) == (
        "labels: no class name for label 2 (the profile's labels and predictions hold 3 classes, 0..2: give a name "
        "to each)"
    )


def test_clipper_rest_answers_carry_the_class_name(toy_profile: Profile, tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(MODELS_YAML)
    app = build_app(
        toy_profile, toy_plan(toy_profile), models=load_model_config(path), name="toy", clipper=ClipperOptions()
    )
    with Server(app, "127.0.0.1", 0, grace_s=2.0) as s:
        one = httpx.post(f"{s.url}/toy/predict", json={"input": [2.0]}, timeout=30).json()
        assert (one["output"], one["class_name"]) == (2, "positive")
        batch = httpx.post(f"{s.url}/toy/predict", json={"input_batch": [[1.0], [3.0]]}, timeout=30).json()
        assert [(b["output"], b["class_name"]) for b in batch["batch_predictions"]] == [(1, "neutral"), (0, "negative")]
