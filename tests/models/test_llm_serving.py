"""The real local LLMs served as a cascade behind the OpenAI API, over a real uvicorn server on 127.0.0.1, with the
official ``openai`` client: generation (streaming and not) and scoring (options), the stage that answered in the
response. The models are the session's (tests/models/conftest.py), loaded once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.http.http_helpers import serving

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.plan import SLO, Device, fixed_plan
from cascadeserve.profile import load_profile
from cascadeserve.runtime import InputSpec, ModelConfig, RuntimeOptions

openai = pytest.importorskip("openai")
PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "llm-sst2"


@pytest.fixture(scope="module")
def server(smollm: LLMAdapter, gemma: LLMAdapter) -> Iterator[Server]:
    profile = load_profile(PROFILE)
    devices = (Device(name="cpu0", memory_mb=4096),)
    # SmolLM2 first; an answer it is less than 0.5 sure of goes to Gemma (the profile's order is the test's choice)
    plan = fixed_plan(
        profile, Cascade(("smollm2-135m", "gemma3-270m"), (0.5,)), devices, slo=SLO(kind="p95_ms", value=60_000)
    )
    config = ModelConfig(
        {"smollm2-135m": smollm, "gemma3-270m": gemma},
        InputSpec(name="item", datatype="BYTES", shape=(-1,)),
        "option-margin",
    )
    options = RuntimeOptions(max_in_flight=16, default_timeout_s=300.0)
    with serving(profile, plan, models=config, runtime_options=options, name="llm") as s:
        yield s


def _client(server: Server) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def test_generation_answers_with_the_stage_that_was_sure(server: Server) -> None:
    client = _client(server)
    raw = client.chat.completions.with_raw_response.create(
        model="llm", messages=[{"role": "user", "content": "The capital of France is"}], max_tokens=3
    )
    r = raw.parse()
    text = r.choices[0].message.content
    assert isinstance(text, str) and text.strip()
    info = r.model_extra["cascade"]
    assert info["model"] in ("smollm2-135m", "gemma3-270m") and 0.0 <= info["certainty"] <= 1.0
    # the stage that answered is the first one sure enough under the plan's threshold, or the last
    assert (info["model"] == "smollm2-135m") == (info["certainty"] >= 0.5 and info["stage"] == 0)
    assert raw.headers["x-cascade-model"] == info["model"]  # and max_tokens (3) lowered the stage's cap (8):
    assert r.usage is not None and r.usage.prompt_tokens > 3 and 1 <= r.usage.completion_tokens <= 3


def test_streaming_and_scoring(server: Server) -> None:
    client = _client(server)
    ask = [{"role": "user", "content": "The capital of France is"}]
    whole = client.chat.completions.create(model="llm", messages=ask, max_tokens=8)
    chunks = list(client.chat.completions.create(model="llm", messages=ask, max_tokens=8, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # greedy and one request at a time: the stream releases exactly the answer the plain call gets
    assert streamed == whole.choices[0].message.content and streamed.strip()
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    review = "Review: a warm, funny and moving film.\nSentiment:"
    scored = client.chat.completions.create(
        model="llm", messages=[{"role": "user", "content": review}], extra_body={"options": [" negative", " positive"]}
    )
    assert scored.choices[0].message.content == " positive"
    assert scored.model_extra["cascade"]["model"] in ("smollm2-135m", "gemma3-270m")
