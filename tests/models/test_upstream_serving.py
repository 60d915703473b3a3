"""A served cascade with an upstream stage, over real servers on 127.0.0.1: the front cascadeserve runs SmolLM2
locally as its first stage and sends what it is unsure of to an upstream stage, a second cascadeserve serving
SmolLM2 behind its OpenAI API (or a server that never answers). The official ``openai`` client gets the upstream's
answers (streaming and not); when the upstream is killed or too slow, the local stage's answer comes back flagged
``fallback``; an upstream-only cascade answers 502 (down) or 504 (timed out), naming the upstream and never its key;
and no request is left in flight."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from tests.http.http_helpers import metric
from tests.models.upstream_helpers import LOCAL, REMOTE, FakeUpstream, cascade_server, fake_upstream, free_port

from cascadeserve.http import Server
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.models.upstream import UpstreamAdapter

openai = pytest.importorskip("openai")
SECRET = "sk-test-2b9d4e61-never-shown"
KEY_ENV = "CASCADESERVE_TEST_UPSTREAM_KEY"
REVIEW = "Review: a warm, funny and moving film.\nSentiment:"
OPTIONS = [" negative", " positive"]


@pytest.fixture(scope="module")
def upstream(smollm: LLMAdapter) -> Iterator[Server]:
    with cascade_server({LOCAL: smollm}, (LOCAL,), name="up") as s:
        yield s


def _remote(url: str, **options: Any) -> UpstreamAdapter:
    return UpstreamAdapter(REMOTE, url, "up", **{"max_new_tokens": 4, "retries": 1, "backoff_s": 0.01, **options})


def _client(server: Server) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def _score(server: Server) -> httpx.Response:
    body = {"model": "front", "messages": [{"role": "user", "content": REVIEW}], "options": OPTIONS}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300)


def _settled(server: Server) -> None:
    """Every accepted request was answered exactly once and nothing is left in flight."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    assert server.app.runtime.in_flight == 0
    assert metric(text, "cascadeserve_admitted_total") == metric(text, "cascadeserve_answered_total")


def test_the_openai_client_gets_the_upstreams_answer(upstream: Server, smollm: LLMAdapter) -> None:
    remote = _remote(upstream.url)
    with cascade_server({LOCAL: smollm, REMOTE: remote}, (LOCAL, REMOTE)) as front:
        client = _client(front)
        ask = [{"role": "user", "content": "The capital of France is"}]
        raw = client.chat.completions.with_raw_response.create(model="front", messages=ask, max_tokens=4)
        whole = raw.parse()
        info = whole.model_extra["cascade"]
        assert (info["model"], info["stage"], info["escalations"], info["fallback"]) == (REMOTE, 1, 1, False)
        assert raw.headers["x-cascade-model"] == REMOTE and whole.choices[0].message.content
        assert whole.usage is not None and 1 <= whole.usage.completion_tokens <= 4
        chunks = list(client.chat.completions.create(model="front", messages=ask, max_tokens=4, stream=True))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == whole.choices[0].message.content
        scored = client.chat.completions.create(
            model="front", messages=[{"role": "user", "content": REVIEW}], extra_body={"options": OPTIONS}
        )
        assert scored.choices[0].message.content == " positive" and scored.model_extra["cascade"]["model"] == REMOTE
        text = httpx.get(f"{front.url}/metrics", timeout=30).text
        ok = f'cascadeserve_upstream_requests_total{{model="{REMOTE}",outcome="ok"}}'
        assert metric(text, ok) == 4  # two generations, and one echo per option
        assert metric(text, f'cascadeserve_upstream_request_seconds_count{{model="{REMOTE}"}}') == 4
        assert metric(text, f'cascadeserve_escalations_total{{model="{LOCAL}"}}') == 3
        assert metric(text, f'cascadeserve_time_to_first_token_seconds_count{{model="{REMOTE}"}}') == 2
        assert metric(text, f'cascadeserve_output_tokens_per_second_count{{model="{REMOTE}"}}') == 2
        _settled(front)
    remote.close()


def test_a_killed_upstream_falls_back_to_the_local_answer(smollm: LLMAdapter) -> None:
    with ExitStack() as stack:
        up = stack.enter_context(cascade_server({LOCAL: smollm}, (LOCAL,), name="up"))
        remote = _remote(up.url)
        stack.callback(remote.close)
        front = stack.enter_context(cascade_server({LOCAL: smollm, REMOTE: remote}, (LOCAL, REMOTE)))
        first = _score(front)
        assert first.status_code == 200 and first.json()["cascade"]["model"] == REMOTE
        up.stop()  # the upstream goes away while the front keeps serving
        r = _score(front)
        assert r.status_code == 200 and r.headers["x-cascade-fallback"] == "true"
        info = r.json()["cascade"]
        assert (info["model"], info["stage"], info["fallback"]) == (LOCAL, 0, True)
        assert r.json()["choices"][0]["message"]["content"] in OPTIONS
        text = httpx.get(f"{front.url}/metrics", timeout=30).text
        assert metric(text, f'cascadeserve_upstream_requests_total{{model="{REMOTE}",outcome="connect_error"}}') >= 2
        assert metric(text, 'cascadeserve_answered_total{outcome="fallback"}') == 1
        _settled(front)


def test_an_upstream_only_cascade_answers_502_when_down_without_the_key(
    smollm: LLMAdapter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(KEY_ENV, SECRET)
    remote = _remote(f"http://127.0.0.1:{free_port()}", api_key_env=KEY_ENV)
    try:
        with cascade_server({REMOTE: remote}, (REMOTE,)) as front:
            r = _score(front)
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert REMOTE in message and "cannot connect" in message and remote.options.base_url in message
            assert SECRET not in r.text and SECRET not in caplog.text and SECRET not in repr(remote)
            _settled(front)
    finally:
        remote.close()


def test_a_slow_upstream_times_out_504_or_falls_back(smollm: LLMAdapter) -> None:
    silent = FakeUpstream(hold=True)  # a real server that never answers
    with ExitStack() as stack:
        url = stack.enter_context(fake_upstream(silent))
        alone = _remote(url, read_timeout_s=0.5, retries=3)
        stack.callback(alone.close)
        front = stack.enter_context(cascade_server({REMOTE: alone}, (REMOTE,)))
        r = _score(front)
        assert r.status_code == 504 and "no answer within 0.5 s" in r.json()["error"]["message"]
        _settled(front)
        sent = silent.calls
        assert sent == 2  # one request per option, none repeated after the timeout
        behind = _remote(url, read_timeout_s=0.5)
        stack.callback(behind.close)
        front2 = stack.enter_context(cascade_server({LOCAL: smollm, REMOTE: behind}, (LOCAL, REMOTE)))
        r = _score(front2)
        assert r.status_code == 200 and r.json()["cascade"]["fallback"] is True
        assert r.json()["cascade"]["model"] == LOCAL and silent.calls == sent + 2
        _settled(front2)
