"""The shipped LLM cascade (examples/llm/models.yaml: SmolLM2-135M-Instruct, then Gemma 3 270M) served by
``cascadeserve serve`` in a process of its own on 127.0.0.1, asked by the stock clients with their own defaults: the
``openai`` SDK, LangChain's ``ChatOpenAI`` and ``OpenAI``, and litellm; then what lm-eval and guidellm send
(``echo`` with ``max_tokens: 1`` and ``logprobs: 1``, token-id prompts, ``GET /health``, a streamed chat) and what a
cascade refuses. One server for the module, short answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.models.base import MissingExtraError
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.profile import load_profile

openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "profiles" / "llm-sst2"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from cascadeserve.models.families import llm

    try:
        llm.smollm2_135m(), llm.gemma3_270m()
    except MissingExtraError as e:
        pytest.skip(str(e))
    profile = load_profile(PROFILE)
    # SmolLM2 answers what it is at least 0.15 sure of (exp of its tokens' mean log-prob), Gemma the rest: its greedy
    # answers here are 0.5-0.7 sure, its sampled ones 0.2-0.4, so the clients' long caps (256) rarely reach Gemma
    plan = fixed_plan(
        profile,
        Cascade(("smollm2-135m", "gemma3-270m"), (0.15,)),
        (Device(name="cpu0", memory_mb=4096),),
        slo=SLO(kind="p95_ms", value=300_000),
    )
    plan_path = plan.save(tmp_path_factory.mktemp("plan") / "plan.json")
    port = _port()
    cmd = [sys.executable, "-c", "from cascadeserve.cli import main; main()", "serve", "--plan", str(plan_path)]
    cmd += ["--profile", str(PROFILE), "--models", str(ROOT / "examples" / "llm" / "models.yaml"), "--name", "llm"]
    cmd += ["--port", str(port), "--timeout-ms", "300000", "--grace-s", "2"]
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with log.open("wb") as err:
        proc = subprocess.Popen(cmd, stderr=err, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:  # what guidellm probes before it sends anything
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(30)


def _client(url: str) -> Any:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)


def test_a_chat_question_gets_an_answer(url: str) -> None:
    r = _client(url).chat.completions.create(model="llm", messages=QUESTION)
    text = r.choices[0].message.content
    assert "Paris" in text, text  # through SmolLM2's chat template, not read as a prompt to continue
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens > 1 and r.usage.prompt_tokens > 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.model_extra["cascade"]["model"] in ("smollm2-135m", "gemma3-270m")


def test_sampling_seed_stop_and_caps_are_honoured(url: str) -> None:
    client = _client(url)
    ask: dict[str, Any] = {"model": "llm", "messages": QUESTION, "max_tokens": 12}
    drawn = [client.chat.completions.create(**ask, temperature=0.7, seed=7) for _ in range(2)]
    assert drawn[0].choices[0].message.content == drawn[1].choices[0].message.content  # a seed draws the same
    assert drawn[0].choices[0].message.content and 0 <= drawn[0].model_extra["cascade"]["certainty"] <= 1
    count = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    stopped = client.chat.completions.create(model="llm", messages=count, max_tokens=24, stop=["5"])
    assert "5" not in stopped.choices[0].message.content and stopped.choices[0].finish_reason == "stop"
    cut = client.chat.completions.create(model="llm", messages=count, max_tokens=3, frequency_penalty=0.5)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3


def test_langchain_and_litellm_with_their_defaults(url: str) -> None:
    from langchain_openai import ChatOpenAI, OpenAI

    chat = ChatOpenAI(model="llm", base_url=f"{url}/v1", api_key="unused", timeout=600, max_retries=0)
    assert "Paris" in chat.invoke("What is the capital of France?").content
    # the completions client sends temperature 0.7, top_p 1, max_tokens 256, n 1 and both penalties at 0
    llm = OpenAI(model="llm", base_url=f"{url}/v1", api_key="unused", timeout=600, max_retries=0)
    assert llm.invoke("The capital of France is").strip()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price list at import
    import litellm

    r = litellm.completion(
        model="openai/llm", api_base=f"{url}/v1", api_key="unused", messages=QUESTION, temperature=0.7, timeout=600
    )
    assert r.choices[0].message.content.strip()


def test_health_and_model_objects(url: str) -> None:
    assert httpx.get(f"{url}/health").status_code == 200
    r = httpx.get(f"{url}/v1/models/llm")
    assert r.status_code == 200 and r.json()["id"] == "llm" and r.json()["object"] == "model"
    assert _client(url).models.retrieve("llm").id == "llm"
    gone = httpx.get(f"{url}/v1/models/other")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"


def test_what_lm_eval_sends(url: str) -> None:
    from cascadeserve.models.llm import default_cache

    prompt = "The capital of France is Paris"
    body = {"model": "llm", "prompt": prompt, "echo": True, "max_tokens": 1, "logprobs": 1, "temperature": 0}
    choice = httpx.post(f"{url}/v1/completions", json=body, timeout=600).json()["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"].startswith(prompt) and lp["tokens"][:2] == ["The", " capital"]
    assert lp["token_logprobs"][0] is None and all(v < 0 for v in lp["token_logprobs"][1:])
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 7  # 6 of the prompt, 1 more
    assert all(len(t) == 1 for t in lp["top_logprobs"][1:])
    # a prompt in token ids (the first stage's vocabulary) is read as it is, and answers as its text does
    from transformers import AutoTokenizer

    folder = next(default_cache().glob("SmolLM2-135M-Instruct*/"))
    ids = AutoTokenizer.from_pretrained(folder)("The capital of France is")["input_ids"]
    asked = {"model": "llm", "max_tokens": 2, "temperature": 0}
    by_ids = httpx.post(f"{url}/v1/completions", json={**asked, "prompt": [ids]}, timeout=600).json()
    by_text = httpx.post(f"{url}/v1/completions", json={**asked, "prompt": "The capital of France is"}, timeout=600)
    assert by_ids["choices"][0]["text"] == by_text.json()["choices"][0]["text"] != ""
    assert by_ids["usage"]["prompt_tokens"] == len(ids)


def test_refusals_name_the_parameter(url: str) -> None:
    def post(path: str, **body: Any) -> httpx.Response:
        return httpx.post(f"{url}{path}", json={"model": "llm", **body}, timeout=600)

    two = post("/v1/chat/completions", messages=QUESTION, n=2)
    assert two.status_code == 400 and two.json()["error"]["param"] == "n"
    fmt = post("/v1/chat/completions", messages=QUESTION, response_format={"type": "json_object"})
    assert fmt.status_code == 400 and fmt.json()["error"]["param"] == "response_format"
    long = post("/v1/chat/completions", messages=[{"role": "user", "content": "hello " * 3000}], max_tokens=4)
    err = long.json()["error"]
    assert long.status_code == 400 and err["param"] == "messages" and err["code"] == "context_length_exceeded"
    assert err["message"].startswith("This model's maximum context length is 2048 tokens. However, you requested")
    # a scoring request reports what it read, as every answer does
    review = [{"role": "user", "content": "Review: a warm, funny and moving film.\nSentiment:"}]
    scored = post("/v1/chat/completions", messages=review, options=[" negative", " positive"]).json()
    assert scored["choices"][0]["message"]["content"] == " positive"
    assert scored["usage"]["prompt_tokens"] > 10 and scored["usage"]["completion_tokens"] == 0


def test_what_guidellm_sends(url: str) -> None:
    # guidellm 0.8's synthetic run: a streamed chat, the text as content parts, usage after every chunk, a cap in
    # max_completion_tokens that ignore_eos makes the answer's exact length
    text = [{"type": "text", "text": "Finish medical want almost away until. Its culture song reveal return finally."}]
    body = {
        "model": "llm",
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "max_completion_tokens": 8,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": text}],
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] == [
        "length"
    ]
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 8 and usage["prompt_tokens"] > 16
