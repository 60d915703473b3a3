"""An upstream stage: an LLM served by any OpenAI-compatible server (vLLM, llama.cpp's server, SGLang, a hosted
API, or another cascadeserve), used as a cascade stage exactly like a local
:class:`~cascadeserve.models.llm_adapter.LLMAdapter`.

In a models config::

    - name: big
      adapter: upstream
      ref: http://127.0.0.1:8000          # base_url (``options.base_url`` overrides it); ``/v1/...`` is appended
      options: {model: Qwen2.5-7B-Instruct, api_key_env: UPSTREAM_KEY, max_concurrency: 8, read_timeout_s: 30}

**Scoring** items (a prompt and its options) are answered by each option's length-normalised log-likelihood as a
continuation of the prompt, as the local stage computes it: one ``POST /v1/completions`` per option with the prompt
and the option as one text, ``echo: true``, ``max_tokens: 0`` and ``logprobs: 0``; the tokens whose character
offset (``text_offset``) lies at or past the end of the prompt are the option's, and their mean log-prob is its
score. One request per option rather than one request holding a list of prompts because a list is not part of
every server's API (cascadeserve's own front end and most hosted APIs take one prompt), while ``echo`` with
logprobs is what vLLM, llama.cpp's server and cascadeserve serve; the concurrency limit bounds the fan-out.

**Generation** items are answered by ``/v1/completions`` (``endpoint: completions``, the default: the raw prompt,
as the local stages with ``chat: false`` see it, or its token ids) or ``/v1/chat/completions`` (``endpoint: chat``:
the request's messages, or the prompt as one user message, for servers and hosted APIs that serve only chat),
greedy unless the request asks otherwise (its ``max_tokens``, ``stop``, ``temperature``, ``top_p``, ``seed``,
penalties and ``ignore_eos`` are passed through), with ``logprobs``: the certainty is the same
signal as a local stage's (``certainty``: ``mean-logprob`` by default, ``min-logprob``, ``q10-logprob``, or
``first-token-margin`` from the first token's ``top_logprobs``), through the ``calibration`` file's logistic fit
when given.

**Transport.** A synchronous ``httpx.Client`` driven by a thread pool of ``max_concurrency`` workers: the device
thread that runs a batch is synchronous, so each row's request is submitted to the pool and the thread waits for
all of them; at most ``max_concurrency`` requests are in flight to this upstream however many batches or devices
ask (the pool is the stage's, and the client's connection pool has the same size). An ``httpx.AsyncClient`` on a
loop thread of its own would do the same with coroutines instead of threads; at the tens of requests a batch
holds, threads cost nothing measurable and keep the code free of a second event loop and cross-loop futures.

**Failures.** ``connect_timeout_s`` bounds connecting, ``read_timeout_s`` each read. Only what is safe to repeat is
retried (``retries`` times, with exponential backoff from ``backoff_s``): a connection that could not be made, and
the statuses 429, 502, 503 and 504 (honouring a short ``Retry-After``); never a request that timed out or broke
after it was sent. A batch whose request fails raises :class:`~cascadeserve.errors.UpstreamError` (the remaining
requests of the batch are cancelled); what its requests then get is the stage-failure rule's
(:mod:`cascadeserve.policy.failure`). The API key is read from the environment variable that ``api_key_env``
names, at load time, and lives only in the client's headers: never in a message, a log line or a ``repr``.

Every request attempt is reported to the ``listeners`` (``(stage, outcome, seconds)``), which the HTTP server's
metrics attach to.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from cascadeserve.errors import UpstreamError
from cascadeserve.models.adapters import Adapter
from cascadeserve.models.base import Generated, ModelLoadError, TextOutput
from cascadeserve.models.llm import Generation
from cascadeserve.models.llm_adapter import _calibration, option_probabilities
from cascadeserve.models.llm_prompts import LLMItem, decode_batch
from cascadeserve.profile.llm_certainty import GENERATION_SIGNALS, generation_signals

__all__ = ["RETRY_STATUSES", "UpstreamAdapter", "UpstreamOptions"]

RETRY_STATUSES = frozenset({429, 502, 503, 504})
Listener = Callable[[str, str, float], None]  # (stage, outcome, seconds)


@dataclass(frozen=True)
class UpstreamOptions:
    """Where the upstream is and how to talk to it (the ``options`` of an ``adapter: upstream`` entry)."""

    base_url: str
    model: str
    api_key_env: str | None = None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    max_concurrency: int = 8
    retries: int = 2
    backoff_s: float = 0.25
    max_new_tokens: int = 32
    endpoint: str = "completions"
    stop: tuple[str, ...] = ()
    top_logprobs: int = 2

    def check(self, name: str) -> None:
        """A bad option is a :class:`ModelLoadError` naming the stage and the option."""

        def bad(option: str, why: str) -> ModelLoadError:
            return ModelLoadError(f"model {name!r}: option {option}: {why}")

        if not self.base_url.startswith(("http://", "https://")):
            raise bad("base_url", f"expected an http:// or https:// URL, got {self.base_url!r}")
        if not self.model:
            raise bad("model", "the upstream's model name is required")
        for opt in ("connect_timeout_s", "read_timeout_s"):
            v = getattr(self, opt)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise bad(opt, f"expected a positive number of seconds, got {v!r}")
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise bad("max_concurrency", f"expected an integer >= 1, got {self.max_concurrency!r}")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise bad("retries", f"expected an integer >= 0, got {self.retries!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise bad("max_new_tokens", f"expected an integer >= 1, got {self.max_new_tokens!r}")
        if self.endpoint not in ("completions", "chat"):
            raise bad("endpoint", f"expected completions or chat, got {self.endpoint!r}")
        if not 1 <= self.top_logprobs <= 5:
            raise bad("top_logprobs", f"expected 1 to 5, got {self.top_logprobs!r}")


class UpstreamAdapter(Adapter):
    """An OpenAI-compatible server as a cascade stage; see the module docstring."""

    framework = "upstream"

    def __init__(
        self,
        name: str,
        base_url: str,
        model: str,
        *,
        certainty: str = "mean-logprob",
        calibration: str | None = None,
        stop: Sequence[str] = (),
        **options: Any,
    ) -> None:
        super().__init__(name)
        try:
            self.options = UpstreamOptions(base_url.rstrip("/"), model, stop=tuple(stop), **options)
        except TypeError as e:
            raise ModelLoadError(f"model {name!r}: bad options for adapter 'upstream': {e}") from None
        self.options.check(name)
        self.signal = certainty
        if certainty not in GENERATION_SIGNALS:
            raise ModelLoadError(
                f"model {name!r}: certainty {certainty!r} is not a generation signal ({', '.join(GENERATION_SIGNALS)})"
            )
        self.calibration = None if calibration is None else _calibration(name, Path(calibration), certainty)
        self.listeners: list[Listener] = []
        self._client: httpx.Client | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._loading = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------------------
    def load(self) -> None:
        with self._loading:  # two device threads may ask at once: one client and one pool, so one limit
            super().load()

    def _load(self) -> None:
        o = self.options
        headers = {}
        if o.api_key_env is not None:
            key = os.environ.get(o.api_key_env)
            if not key:
                raise ModelLoadError(
                    f"model {self.name!r}: option api_key_env: the environment variable {o.api_key_env!r} is not set"
                )
            headers["Authorization"] = f"Bearer {key}"
        timeout = httpx.Timeout(o.read_timeout_s, connect=o.connect_timeout_s, pool=None)
        limits = httpx.Limits(max_connections=o.max_concurrency, max_keepalive_connections=o.max_concurrency)
        self._client = httpx.Client(base_url=o.base_url, headers=headers, timeout=timeout, limits=limits)
        self._pool = ThreadPoolExecutor(max_workers=o.max_concurrency, thread_name_prefix=f"upstream-{self.name}")

    def close(self) -> None:
        """Close the connections and stop the workers (requests still running finish first)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._client is not None:
            self._client.close()
        self._client, self._pool, self.loaded = None, None, False

    @property
    def device_used(self) -> str:
        """Where the stage runs (the profile's device line)."""
        return f"upstream {self.options.base_url}"

    def memory_mb(self) -> float | None:
        return 0.0  # nothing is placed on this machine's devices

    def __repr__(self) -> str:
        return f"UpstreamAdapter({self.name!r}, base_url={self.options.base_url!r}, model={self.options.model!r})"

    # -- requests --------------------------------------------------------------------------------------------
    def _report(self, outcome: str, started: float) -> None:
        for listen in self.listeners:
            listen(self.name, outcome, time.perf_counter() - started)

    def _fail(self, kind: str, why: str, status: int | None = None) -> UpstreamError:
        where = f"upstream stage {self.name!r} ({self.options.base_url}, model {self.options.model!r})"
        return UpstreamError(f"{where}: {why}", model=self.name, kind=kind, status=status)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request with the retry rule (module docstring); the answer's JSON object, or UpstreamError."""
        assert self._client is not None
        o = self.options
        for attempt in range(o.retries + 1):
            wait_s = o.backoff_s * 2**attempt
            started = time.perf_counter()
            try:
                r = self._client.post(path, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:  # nothing was sent: safe to try again
                self._report("connect_error", started)
                if attempt < o.retries:
                    time.sleep(wait_s)
                    continue
                raise self._fail("connect", f"cannot connect: {type(e).__name__}: {e}") from None
            except httpx.TimeoutException as e:  # sent, and no answer in time: never repeated
                self._report("timeout", started)
                raise self._fail("timeout", f"no answer within {o.read_timeout_s:g} s ({type(e).__name__})") from None
            except httpx.HTTPError as e:  # the connection broke after the request went out: never repeated
                self._report("error", started)
                raise self._fail("protocol", f"{type(e).__name__}: {e}") from None
            if r.status_code in RETRY_STATUSES and attempt < o.retries:
                self._report("http_error", started)
                time.sleep(min(max(wait_s, _retry_after(r)), 5.0))
                continue
            if r.status_code >= 400:
                self._report("http_error", started)
                raise self._fail("status", f"answered {r.status_code} {r.reason_phrase}: {_message(r)}", r.status_code)
            try:
                doc = r.json()
            except ValueError:
                doc = None
            if not isinstance(doc, dict) or not isinstance(doc.get("choices"), list) or not doc["choices"]:
                self._report("bad_response", started)
                raise self._fail("protocol", f"answered {r.status_code} without OpenAI choices")
            self._report("ok", started)
            return doc
        raise AssertionError("unreachable")  # the loop returns or raises

    def _fan_out(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """Run ``calls`` on the pool (at most ``max_concurrency`` at once); the first failure cancels the rest."""
        self.load()
        assert self._pool is not None
        futures: list[Future[Any]] = [self._pool.submit(c) for c in calls]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f in done and f.exception() is not None), None)
        if failed is not None:
            for f in pending:
                f.cancel()
            exc = failed.exception()
            assert exc is not None
            raise exc
        return [f.result() for f in futures]

    # -- scoring ---------------------------------------------------------------------------------------------
    def _option_loglik(self, prompt: str, option: str) -> float:
        o = self.options
        body = {"model": o.model, "prompt": prompt + option, "max_tokens": 0, "echo": True, "logprobs": 0}
        doc = self._post("/v1/completions", {**body, "temperature": 0})
        try:
            lp = doc["choices"][0]["logprobs"]
            tokens, values, offsets = lp["tokens"], lp["token_logprobs"], lp["text_offset"]
            # the option's tokens start at or past the prompt's end (vLLM's and cascadeserve's text_offset)
            picked = [float(v) for v, at in zip(values, offsets, strict=True) if at >= len(prompt) and v is not None]
            if len(tokens) != len(values):
                raise ValueError(f"{len(tokens)} tokens but {len(values)} logprobs")
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise self._fail("protocol", f"echo answer without token logprobs and offsets ({e!r})") from None
        if not picked:
            raise self._fail("protocol", f"echo answer has no tokens for the option {option!r}")
        return sum(picked) / len(picked)

    def items(self, batch: Any) -> list[LLMItem]:
        """The batch's rows as items; a malformed row is a ``ValueError`` naming its index."""
        return decode_batch(self.name, batch)

    def loglik(self, batch: Any) -> list[np.ndarray]:
        """Each scoring item's option log-likelihoods (length-normalised), one request per option."""
        items = self.items(batch)
        if any(it.options is None for it in items):
            raise ValueError(f"model {self.name!r}: a generation item cannot be scored")
        pairs = [(it.prompt, opt) for it in items for opt in it.options or ()]
        flat = self._fan_out([partial(self._option_loglik, p, q) for p, q in pairs])
        out, at = [], 0
        for it in items:
            k = len(it.options or ())
            out.append(np.asarray(flat[at : at + k], dtype=np.float64))
            at += k
        return out

    def _run(self, x: Any) -> Any:
        return option_probabilities(self.loglik(x))

    # -- generation ------------------------------------------------------------------------------------------
    def _generate_one(self, item: LLMItem, cap: int) -> Generation:
        o = self.options
        body: dict[str, Any] = {"model": o.model, "max_tokens": item.max_new_tokens or cap}
        body |= {"temperature": 0, **item.sampling.to_json()}  # the request's decoding, passed through
        stop = item.stop if item.stop is not None else o.stop
        if stop:
            body["stop"] = list(stop)
        if o.endpoint == "chat":
            if item.prompt_ids is not None:
                raise ValueError(f"model {self.name!r}: a chat endpoint cannot take a prompt of token ids")
            turns = item.messages or (("user", item.prompt),)
            messages = [{"role": r, "content": c} for r, c in turns]
            body |= {"messages": messages, "logprobs": True, "top_logprobs": o.top_logprobs}
            doc = self._post("/v1/chat/completions", body)
        else:
            prompt: Any = item.prompt if item.prompt_ids is None else list(item.prompt_ids)
            doc = self._post("/v1/completions", {**body, "prompt": prompt, "logprobs": o.top_logprobs})
        try:
            return _parse_generation(doc, chat=o.endpoint == "chat")
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise self._fail("protocol", f"answer without text and token logprobs ({e!r})") from None

    def generate(self, batch: Any, *, max_new_tokens: int | None = None) -> list[Generation]:
        """One answer per item, each its own request with the item's decoding (greedy unless it asks otherwise;
        the items' options, if any, are ignored)."""
        items = self.items(batch)
        cap = int(max_new_tokens or self.options.max_new_tokens)
        return list(self._fan_out([partial(self._generate_one, it, cap) for it in items]))

    def answer(self, items: Sequence[LLMItem], max_new_tokens: int | None = None) -> Generated:
        """Generated answers with the stage's certainty in each, as :meth:`LLMAdapter.answer` gives them."""
        gens = self.generate(items, max_new_tokens=max_new_tokens)
        signal = generation_signals([g.token_logprobs for g in gens], [g.first_token_margin for g in gens])
        certs = signal[self.signal]
        if self.calibration is not None:
            certs = self.calibration(certs)
        outs = tuple(TextOutput(g.text, g.prompt_tokens, g.output_tokens, None, g.finish_reason) for g in gens)
        return Generated(outs, np.clip(np.nan_to_num(certs, nan=0.0), 0.0, 1.0))

    def __call__(self, batch: Any) -> np.ndarray | Generated:  # type: ignore[override]
        """Served: option probabilities for scoring items, :class:`Generated` answers for generation items."""
        items = self.items(batch)
        if any(it.echo for it in items):  # would need the upstream's echo passed through; not served (a clear failure)
            raise ValueError(f"model {self.name!r}: an upstream stage does not answer echo requests")
        if all(it.options is None for it in items):
            return self.answer(items)
        return self.predict(batch)


def _parse_generation(doc: dict[str, Any], *, chat: bool) -> Generation:
    """A :class:`Generation` from an OpenAI completion (``chat``: a chat completion) with logprobs."""
    choice = doc["choices"][0]
    if chat:
        text = choice["message"]["content"] or ""
        content = choice["logprobs"]["content"]
        lps = [float(c["logprob"]) for c in content]
        tokens = [str(c["token"]) for c in content]
        first = [float(a["logprob"]) for a in content[0]["top_logprobs"]] if content else []
    else:
        text = choice["text"]
        lp = choice["logprobs"]
        lps = [float(v) for v in lp["token_logprobs"] if v is not None]
        tokens = [str(t) for t in lp["tokens"]]
        tops = lp.get("top_logprobs") or []
        first = [float(v) for v in tops[0].values()] if tops and tops[0] else []
    probs = sorted((math.exp(v) for v in first), reverse=True)
    margin = probs[0] - (probs[1] if len(probs) > 1 else 0.0) if probs else math.nan
    usage = doc.get("usage") or {}
    return Generation(
        str(text).strip(),
        tuple(lps),
        margin,
        int(usage.get("prompt_tokens", 0)),
        int(usage.get("completion_tokens", len(lps))),
        tuple(tokens),
        finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
    )


def _retry_after(r: httpx.Response) -> float:
    try:
        return max(float(r.headers.get("retry-after", 0)), 0.0)
    except ValueError:
        return 0.0


def _message(r: httpx.Response) -> str:
    """The upstream's own error message (OpenAI's ``error.message``, or the body's start), kept short."""
    try:
        doc = r.json()
        msg = doc.get("error", {}).get("message") if isinstance(doc.get("error"), dict) else doc.get("error")
    except (ValueError, AttributeError):
        msg = None
    return str(msg or r.text or "no message")[:300]
