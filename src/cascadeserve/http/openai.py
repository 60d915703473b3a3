"""OpenAI's API in front of an LLM cascade: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models`` (and
``/v1/models/{id}``), and ``GET /health``.

The ``model`` a client names is the served cascade. Each prompt of a request becomes one item for the cascade's
first stage (a JSON object, see :mod:`cascadeserve.models.llm_prompts`): a chat's messages, which each stage puts
through its chat template (or reads as labelled lines where it has none), or a completion's prompt, as text or
token ids; with it go the parameters the stage honours (:mod:`cascadeserve.http.openai_params` says which are
honoured, accepted, or refused). From there it is a request like any other: the same admission (503 with
Retry-After when full), deadlines (``timeout`` in seconds, an extension; else the server's default), tokens,
metrics and plan. The stage that answers is the cheapest one sure enough of its answer under the gear in force;
the answer's certainty is that stage's (for generated text: the ``certainty`` signal of its tokens'
log-probabilities under the model, sampled or not).

* **Generation cascades** answer with the text of the stage that answered. **Scoring cascades** take the
  candidate answers as ``options`` (an extension field, at least two strings) and answer with the option the
  answering stage ranked first.
* The response says which stage answered: an extension field ``cascade`` (``model``, ``stage``, ``escalations``,
  ``certainty``, ``gear``, ``fallback``) and the headers ``x-cascade-model``, ``x-cascade-stage``,
  ``x-cascade-escalations`` and ``x-cascade-fallback``, of the first prompt; with several prompts each choice
  carries its own ``cascade`` too. ``fallback`` marks an earlier stage's answer returned because the deadline
  passed (or a later stage could not take the prompt) before a later stage finished.
* ``finish_reason`` is ``length`` when a cap cut the text (the request's ``max_tokens`` or the stage's own), else
  ``stop``; ``usage`` counts the answering stages' tokens, a scoring answer's too (the prompt and options it read,
  nothing generated).
* ``stream: true`` sends server-sent events in OpenAI's chunk shape. A stage's answer is only known, and only
  final, once its certainty is: nothing is streamed from a stage that may yet be overruled. The chunks carry the
  answering stage's text as it is released (whole answers here: the local stages generate a batch at a time),
  then the finish chunk (with ``usage`` when ``stream_options.include_usage``), then ``data: [DONE]``.
* ``logprobs`` (completions: 0-5 alternatives per token; chat: ``logprobs: true`` and ``top_logprobs`` 0-5) returns
  the answering stage's token log-probabilities in OpenAI's shape (not with ``stream``). ``echo: true`` on
  ``/v1/completions`` returns the prompt's own token log-probabilities, then ``max_tokens`` generated tokens (0
  allowed): the first stage answers (a measurement has nothing to escalate), which is how a client, such as
  lm-eval or an upstream stage of another cascadeserve, scores a continuation.

Bad input is a 400 naming the field (OpenAI's error shape: ``error.message``, ``error.type``, ``error.param``),
as is a prompt longer than the answering stage's context (vLLM's words: "This model's maximum context length is N
tokens..."); an unknown model is a 404, a prompt over the characters limit a 413 naming the limit, and a missing or
wrong token (with ``serve --auth-token``) a 401 or 403, all in that shape.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from cascadeserve.http import openai_schema as schema
from cascadeserve.http.clipper import ClipperLayer
from cascadeserve.http.failures import public_error
from cascadeserve.http.fastpath import disconnected
from cascadeserve.http.limits import MAX_PROMPT_CHARS, LimitError, loads
from cascadeserve.http.openai_params import Ask, OpenAIError, parse_chat, parse_completion
from cascadeserve.http.openapi import describe
from cascadeserve.http.v2 import ProtocolError
from cascadeserve.models.base import TokenLogprobs
from cascadeserve.runtime import Answer, InputSpec, ModelFailed, Overloaded, Runtime, ServingError

__all__ = ["MAX_PROMPT_CHARS", "OpenAIError", "openai_routes", "parse_chat", "parse_completion"]


class _Served(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def input(self) -> InputSpec: ...

    @property
    def inputs(self) -> tuple[InputSpec, ...]: ...


class _Api(Protocol):
    """What the routes need of the app's handlers (``http.app``; a Protocol, so no import goes back up there)."""

    runtime: Runtime
    layer: ClipperLayer

    @property
    def model(self) -> _Served: ...

    def _auth(self, request: Request, *, admin: bool = False) -> Response | None: ...

    async def _body(self, request: Request) -> bytes: ...


def _refusal(e: OpenAIError) -> JSONResponse:
    kind = "invalid_request_error" if e.status < 500 else "server_error"
    if e.status == 503:
        kind = "overloaded_error"
    body = {"error": {"message": str(e), "type": kind, "param": e.param, "code": e.code}}
    return JSONResponse(body, status_code=e.status)


def _cascade_info(a: Answer) -> dict[str, Any]:
    return {
        "model": a.model,
        "stage": a.stage,
        "escalations": a.stage,
        "certainty": a.certainty,
        "gear": a.gear,
        "fallback": a.fallback,
    }


def _headers(a: Answer) -> dict[str, str]:
    return {
        "x-cascade-model": a.model,
        "x-cascade-stage": str(a.stage),
        "x-cascade-escalations": str(a.stage),
        "x-cascade-fallback": "true" if a.fallback else "false",
    }


def _failure(e: ServingError, ask: Ask) -> OpenAIError:
    """A request's serving error in OpenAI's shape; a stage's refusal of the prompt (400) names the field."""
    message, status = public_error(e)
    if isinstance(e, ModelFailed) and status == 400:
        param = "messages" if ask.chat else "prompt"
        return OpenAIError(message, 400, param if e.param in ("prompt", "messages") else e.param, e.code)
    return OpenAIError(message, status)


class _Front:
    """The handlers, over the V2 app's handlers (admission, deadlines, the served model)."""

    def __init__(self, api: _Api) -> None:
        self.api = api

    def _auth(self, request: Request) -> Response | None:
        """The V2 handlers' token check, its refusal in OpenAI's error shape."""
        bad = self.api._auth(request)
        if bad is None:
            return None
        refused = _refusal(OpenAIError(json.loads(bytes(bad.body))["error"], bad.status_code))
        if "www-authenticate" in bad.headers:
            refused.headers["WWW-Authenticate"] = bad.headers["www-authenticate"]
        return refused

    def _entry(self) -> dict[str, Any]:
        return {"id": self.api.model.name, "object": "model", "created": 0, "owned_by": "cascadeserve"}

    @describe(answers=())
    async def health(self, request: Request) -> Response:
        """Liveness as vLLM answers it: 200 with an empty body while the process answers."""
        return Response(status_code=200)

    @describe(responses=(401, 403), secured=True, error=schema.ERROR)
    async def models(self, request: Request) -> Response:
        """The served cascade, as OpenAI's model list."""
        if (bad := self._auth(request)) is not None:
            return bad
        return JSONResponse({"object": "list", "data": [self._entry()]})

    @describe(responses=(401, 403, 404), secured=True, error=schema.ERROR)
    async def model(self, request: Request) -> Response:
        """One served cascade, as OpenAI's model object (404 for a name not served)."""
        if (bad := self._auth(request)) is not None:
            return bad
        name = request.path_params["model"]
        if name != self.api.model.name:
            message = f"model {name!r} not found; this server serves {self.api.model.name!r}"
            return _refusal(OpenAIError(message, 404, "model", "model_not_found"))
        return JSONResponse(self._entry())

    @describe(
        body=schema.CHAT_BODY, responses=schema.REFUSALS, secured=True, error=schema.ERROR, answers=schema.ANSWERS
    )
    async def chat(self, request: Request) -> Response:
        """A chat completion from the cascade (stream: server-sent events)."""
        return await self._serve(request, chat=True)

    @describe(
        body=schema.COMPLETION_BODY, responses=schema.REFUSALS, secured=True, error=schema.ERROR, answers=schema.ANSWERS
    )
    async def completions(self, request: Request) -> Response:
        """A text completion from the cascade (stream: server-sent events)."""
        return await self._serve(request, chat=False)

    async def _serve(self, request: Request, *, chat: bool) -> Response:
        api = self.api
        if (bad := self._auth(request)) is not None:
            return bad
        try:
            try:
                body = loads(await api._body(request))  # the gate: size, depth, elements (http/limits.py)
            except LimitError as e:
                raise OpenAIError(e.message, e.status) from None
            except ProtocolError as e:  # over the size limit (413), or not JSON at all (400)
                message = f"the body is not JSON: {e.message}" if e.status == 400 else e.message
                raise OpenAIError(message, e.status) from None
            ask = (parse_chat if chat else parse_completion)(body)
            if ask.model != api.model.name:
                raise OpenAIError(
                    f"model {ask.model!r} not found; this server serves {api.model.name!r}",
                    404,
                    "model",
                    "model_not_found",
                )
            if len(api.model.inputs) > 1 or api.model.input.datatype != "BYTES":
                takes = ", ".join(f"{i.name} ({i.datatype})" for i in api.model.inputs)
                raise OpenAIError(f"model {ask.model!r} takes the tensors {takes}, not text", param="model")
            answers = await self._ask(request, ask)
            texts = [self._text(a, ask) for a in answers]
        except OpenAIError as e:
            return _refusal(e)
        return self._respond(ask, answers, texts)

    def _respond(self, ask: Ask, answers: list[Answer], texts: list[str]) -> Response:
        chat = ask.chat
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        outs = [a.output for a in answers]
        prompt_tokens = sum(0 if o is None else o.prompt_tokens for o in outs)
        completion_tokens = sum(0 if o is None else o.output_tokens for o in outs)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        cap = ask.max_tokens
        finishes = []
        for o in outs:
            if o is not None and o.finish_reason is not None:
                finishes.append(o.finish_reason)
            else:
                finishes.append("length" if o is not None and cap is not None and o.output_tokens >= cap else "stop")
        base = {"id": rid, "created": int(time.time()), "model": ask.model, "cascade": _cascade_info(answers[0])}
        several = len(answers) > 1
        if ask.stream:
            events = _events(base, chat, texts, finishes, usage if ask.usage else None)
            return StreamingResponse(events, media_type="text/event-stream", headers=_headers(answers[0]))
        top = ask.logprobs
        choices = []
        for i, (a, o, text, finish) in enumerate(zip(answers, outs, texts, finishes, strict=True)):
            lps = None if top is None or o is None else o.logprobs
            if chat:
                choice: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": text}}
                choice["logprobs"] = None if lps is None else _chat_logprobs(lps, top or 0)
            else:
                logprobs = None if lps is None else _completion_logprobs(lps, top or 0)
                choice = {"index": i, "text": text, "logprobs": logprobs}
            choice["finish_reason"] = finish
            if several:
                choice["cascade"] = _cascade_info(a)
            choices.append(choice)
        kind = "chat.completion" if chat else "text_completion"
        obj = {**base, "object": kind, "choices": choices, "usage": usage}
        return JSONResponse(obj, headers=_headers(answers[0]))

    async def _ask(self, request: Request, ask: Ask) -> list[Answer]:
        api = self.api
        try:
            reqs = api.layer.submit([json.dumps(item) for item in ask.items], ask.timeout)
        except Overloaded as e:
            raise OpenAIError(str(e), 503, code="overloaded") from None
        except ServingError as e:
            raise OpenAIError(*public_error(e)) from None
        gone = asyncio.ensure_future(disconnected(request.receive))
        futures = [r.future for r in reqs]
        try:
            every = asyncio.gather(*futures, return_exceptions=True)
            await asyncio.wait((every, gone), return_when=asyncio.FIRST_COMPLETED)
            if not every.done():  # the client went away: drop the requests that have not started
                api.runtime.cancel(reqs)
            results = await every
        finally:
            gone.cancel()
        answers: list[Answer] = []
        for r in results:
            if isinstance(r, ServingError):  # a model's own text only in the server log
                raise _failure(r, ask)
            if isinstance(r, BaseException):
                raise r
            answers.append(r)
        return answers

    def _text(self, answer: Answer, ask: Ask) -> str:
        if answer.output is not None:
            return answer.output.text
        options = ask.options
        if options is None:
            raise OpenAIError(
                "options: this cascade scores given answers; send them as options (a list of strings)", param="options"
            )
        if not 0 <= answer.label < len(options):
            raise OpenAIError(f"the cascade chose option {answer.label} of {len(options)}", 500)
        return str(options[answer.label])


def _completion_logprobs(lps: TokenLogprobs, top: int) -> dict[str, Any]:
    """OpenAI's completions ``logprobs`` object: tokens, their log-probs, the top alternatives, character offsets."""
    tops = [dict(t[:top]) if t else None for t in lps.top] if top and lps.top else None
    return {
        "tokens": list(lps.tokens),
        "token_logprobs": list(lps.logprobs),
        "top_logprobs": tops,
        "text_offset": list(lps.offsets),
    }


def _chat_logprobs(lps: TokenLogprobs, top: int) -> dict[str, Any]:
    """OpenAI's chat ``logprobs`` object: one entry per token, each with its ``top_logprobs`` alternatives."""

    def entry(token: str, lp: float | None) -> dict[str, Any]:
        return {"token": token, "logprob": -9999.0 if lp is None else lp, "bytes": list(token.encode())}

    tops = lps.top or tuple(() for _ in lps.tokens)
    content = [
        {**entry(t, lp), "top_logprobs": [entry(a, b) for a, b in alts[:top]]}
        for t, lp, alts in zip(lps.tokens, lps.logprobs, tops, strict=True)
    ]
    return {"content": content}


async def _events(
    base: dict[str, Any], chat: bool, texts: list[str], finishes: list[str], usage: dict[str, int] | None
) -> AsyncIterator[bytes]:
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(i: int, delta: dict[str, Any] | str, reason: str | None) -> bytes:
        if chat:
            choice: dict[str, Any] = {"index": i, "delta": delta, "finish_reason": reason}
        else:
            choice = {"index": i, "text": delta, "logprobs": None, "finish_reason": reason}
        obj = {**base, "object": kind, "choices": [choice]}
        return f"data: {json.dumps(obj)}\n\n".encode()

    for i, (text, finish) in enumerate(zip(texts, finishes, strict=True)):
        if chat:
            yield chunk(i, {"role": "assistant", "content": ""}, None)
        pieces = text.split(" ")
        for k, p in enumerate(pieces):  # the released answer, word by word
            piece = p if k == len(pieces) - 1 else p + " "
            if piece:
                yield chunk(i, {"content": piece} if chat else piece, None)
        yield chunk(i, {} if chat else "", finish)
    if usage is not None:
        obj = {**base, "object": kind, "choices": [], "usage": usage}
        yield f"data: {json.dumps(obj)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def openai_routes(api: _Api) -> list[BaseRoute]:
    front = _Front(api)
    return [
        Route("/health", front.health, methods=["GET"]),
        Route("/v1/models", front.models, methods=["GET"]),
        Route("/v1/models/{model}", front.model, methods=["GET"]),
        Route("/v1/chat/completions", front.chat, methods=["POST"]),
        Route("/v1/completions", front.completions, methods=["POST"]),
    ]
