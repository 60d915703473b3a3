"""The upstream stage against real servers: a second cascadeserve serving SmolLM2 behind its OpenAI API (the same
answers and certainty as the local stage, through completions and chat; scoring by echoed option log-likelihoods),
and a tiny Starlette server that answers slowly, never, or with errors (retries only where safe, the concurrency
limit, the API key never shown). Also: the models.yaml entry and ``profile measure`` on an upstream stage."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.models.upstream_helpers import LOCAL, REMOTE, FakeUpstream, cascade_server, fake_upstream, free_port

from cascadeserve.errors import UpstreamError
from cascadeserve.http import Server
from cascadeserve.models.base import Generated, ModelLoadError
from cascadeserve.models.config import load_models_config
from cascadeserve.models.llm_adapter import LLMAdapter
from cascadeserve.models.llm_prompts import LLMItem, encode_item, load_jsonl
from cascadeserve.models.profiler import MeasureOptions, measure
from cascadeserve.models.upstream import UpstreamAdapter
from cascadeserve.profile.llm_side import read_calibration

SECRET = "sk-test-5f1e0c7d-never-shown"
ASK = [encode_item(LLMItem("The capital of France is"))]
REVIEW = LLMItem("Review: a warm, funny and moving film.\nSentiment:", (" negative", " positive"))


@pytest.fixture(scope="module")
def upstream(smollm: LLMAdapter) -> Iterator[Server]:
    with cascade_server({LOCAL: smollm}, (LOCAL,), name="up") as s:
        yield s


@pytest.fixture
def adapters() -> Iterator[list[UpstreamAdapter]]:
    made: list[UpstreamAdapter] = []
    yield made
    for a in made:
        a.close()


def _remote(made: list[UpstreamAdapter], url: str, model: str = "up", **options: object) -> UpstreamAdapter:
    a = UpstreamAdapter(REMOTE, url, model, max_new_tokens=4, **options)  # type: ignore[arg-type]
    made.append(a)
    return a


def test_generation_through_the_upstream_is_the_local_stages(
    upstream: Server, smollm: LLMAdapter, adapters: list[UpstreamAdapter]
) -> None:
    want = smollm.answer([LLMItem("The capital of France is")], max_new_tokens=4)
    for endpoint in ("completions", "chat"):  # a single user message: the upstream's stage sees the same prompt
        got = _remote(adapters, upstream.url, endpoint=endpoint)(ASK)
        assert isinstance(got, Generated)
        assert [o.text for o in got.outputs] == [o.text for o in want.outputs] and got.outputs[0].text
        # the certainty (mean token log-prob) is computed from the log-probs the upstream returned
        np.testing.assert_allclose(got.certainties, want.certainties, atol=1e-4)
        assert [o.output_tokens for o in got.outputs] == [o.output_tokens for o in want.outputs]
        assert [o.prompt_tokens for o in got.outputs] == [o.prompt_tokens for o in want.outputs]


def test_scoring_through_the_upstream_echoes_each_option(
    upstream: Server, smollm: LLMAdapter, adapters: list[UpstreamAdapter]
) -> None:
    remote = _remote(adapters, upstream.url)
    got = remote.loglik([encode_item(REVIEW)])[0]
    llm = smollm.model
    chat, llm.chat = llm.chat, False  # the completions API scores the raw text, no chat template
    try:
        want = llm.score([REVIEW.prompt], [REVIEW.options or ()])[0]
    finally:
        llm.chat = chat
    np.testing.assert_allclose(got, want, atol=1e-3)
    scores = remote.predict([encode_item(REVIEW)])
    assert scores.shape == (1, 2) and scores[0].argmax() == int(np.argmax(want))


def test_retries_only_what_is_safe_to_repeat(adapters: list[UpstreamAdapter]) -> None:
    busy = FakeUpstream(fail=(503, 429))
    with fake_upstream(busy) as url:
        out = _remote(adapters, url, "m", retries=2, backoff_s=0.01)(ASK[:1])
    assert isinstance(out, Generated) and out.outputs[0].text == "ok 4" and busy.calls == 3
    np.testing.assert_allclose(out.certainties, [np.exp(-0.25)])
    for fail, retries, calls in (((400,), 3, 1), ((503, 503, 503), 1, 2)):
        fake = FakeUpstream(fail=fail)
        with fake_upstream(fake) as url, pytest.raises(UpstreamError) as e:
            _remote(adapters, url, "m", retries=retries, backoff_s=0.01)(ASK[:1])
        assert e.value.status == fail[0] and e.value.kind == "status" and fake.calls == calls
        assert f"answered {fail[0]}" in str(e.value) and "busy" in str(e.value)
    silent = FakeUpstream(hold=True)  # sent, no answer: a timeout is never repeated
    with fake_upstream(silent) as url, pytest.raises(UpstreamError) as e:
        _remote(adapters, url, "m", retries=3, read_timeout_s=0.3)(ASK[:1])
    assert e.value.kind == "timeout" and silent.calls == 1 and "0.3 s" in str(e.value)
    with pytest.raises(UpstreamError) as e:  # nobody listens: connect errors are retried, then reported
        _remote(adapters, f"http://127.0.0.1:{free_port()}", "m", retries=1, backoff_s=0.01)(ASK[:1])
    assert e.value.kind == "connect" and "cannot connect" in str(e.value)


def test_concurrency_limit_per_upstream(adapters: list[UpstreamAdapter]) -> None:
    fake = FakeUpstream(delay_s=0.2)
    with fake_upstream(fake) as url:
        remote = _remote(adapters, url, "m", max_concurrency=2)
        results: list[object] = []
        # two device threads sending a batch of 6 each at once: still at most 2 requests in flight
        threads = [threading.Thread(target=lambda: results.append(remote(ASK * 6))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert len(results) == 2 and all(isinstance(r, Generated) and len(r.outputs) == 6 for r in results)
    assert fake.calls == 12 and fake.max_in_flight == 2


def test_the_api_key_is_sent_and_never_shown(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, adapters: list[UpstreamAdapter]
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("CASCADESERVE_TEST_UPSTREAM_KEY", SECRET)
    fake = FakeUpstream(fail=(500,))
    with fake_upstream(fake) as url:
        remote = _remote(adapters, url, "m", api_key_env="CASCADESERVE_TEST_UPSTREAM_KEY")
        with pytest.raises(UpstreamError) as e:
            remote(ASK[:1])
        remote(ASK[:1])
    down = _remote(adapters, f"http://127.0.0.1:{free_port()}", "m", api_key_env="CASCADESERVE_TEST_UPSTREAM_KEY")
    with pytest.raises(UpstreamError) as e2:
        down(ASK[:1])
    assert fake.auth == [f"Bearer {SECRET}"] * 2  # it is sent...
    shown = [str(e.value), repr(e.value), str(e2.value), repr(remote), repr(remote.options), caplog.text]
    assert all(SECRET not in s for s in shown) and "CASCADESERVE_TEST_UPSTREAM_KEY" in repr(remote.options)
    monkeypatch.delenv("CASCADESERVE_TEST_UPSTREAM_KEY")
    with pytest.raises(ModelLoadError, match=r"CASCADESERVE_TEST_UPSTREAM_KEY.*not set"):
        _remote(adapters, url, "m", api_key_env="CASCADESERVE_TEST_UPSTREAM_KEY").load()


def test_models_yaml_declares_an_upstream_stage(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    entry = "  - {name: remote, adapter: upstream, ref: 'http://127.0.0.1:9', options: {model: m, %s}}\n"
    path.write_text("models:\n" + entry % "max_concurrency: 3, read_timeout_s: 2.5", encoding="utf-8")
    remote = load_models_config(path).build()["remote"]
    assert isinstance(remote, UpstreamAdapter)
    assert (remote.options.max_concurrency, remote.options.read_timeout_s, remote.options.retries) == (3, 2.5, 2)
    for bad, match in (("max_concurrency: 0", "option max_concurrency"), ("colour: red", "bad options.*colour")):
        path.write_text("models:\n" + entry % bad, encoding="utf-8")
        with pytest.raises(ModelLoadError, match=match):
            load_models_config(path).build()


def test_profile_measure_an_upstream_stage(upstream: Server, tmp_path: Path) -> None:
    rows = [("a charming and affecting journey", 1), ("bleak and desperate", 0), ("a moving film", 1)]
    data = tmp_path / "sst2.jsonl"
    data.write_text("".join(f'{{"id": "{i}", "sentence": "{s}", "label": {y}}}\n' for i, (s, y) in enumerate(rows)))
    config = tmp_path / "models.yaml"
    config.write_text(
        "certainty: option-margin\ninput: {name: item, datatype: BYTES, shape: [-1]}\nmodels:\n"
        f"  - {{name: remote, adapter: upstream, ref: '{upstream.url}', options: {{model: up, max_concurrency: 4}}}}\n"
    )
    options = MeasureOptions(batch_sizes=(1, 2), repeats=1, warmup=0)
    prof, records = measure(load_models_config(config), load_jsonl(data), tmp_path / "prof", options=options)
    assert [m.name for m in prof.models] == ["remote"] and records[0].memory_source == "upstream (no local memory)"
    curve = prof.models[0].runtime
    assert curve.batch_sizes == (1, 2) and all(ms > 0 for ms in curve.ms)  # the capacity curve, measured
    assert prof.predictions.shape == (1, 3) and ((prof.certainties >= 0) & (prof.certainties <= 1)).all()
    assert "upstream http://127.0.0.1" in prof.device
    assert "remote" in read_calibration(tmp_path / "prof") and (tmp_path / "prof/llm/signals/remote.csv").is_file()
    assert prof.models[0].upstream  # so every plan gives it a device of its own, not one of this host's
