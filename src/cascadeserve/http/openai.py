"""OpenAI's API in front of an LLM cascade: ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models``.

The ``model`` a client names is the served cascade. A request becomes one item for the cascade's first stage (a
JSON object with ``prompt``, see :mod:`cascadeserve.models.llm_prompts`): the chat messages flattened into one
prompt (system first, then the turns, each on its own line with its role, unless there is a single user message),
or the completion's ``prompt``. From there it is a request like any other: the same admission (503 with
Retry-After when full), deadlines (``timeout`` in seconds, an extension; else the server's default), tokens,
metrics and plan. The stage that answers is the cheapest one sure enough of its answer under the gear in force.

* **Generation cascades** answer with the text of the stage that answered. **Scoring cascades** take the
  candidate answers as ``options`` (an extension field, at least two strings) and answer with the option the
  answering stage ranked first.
* The response says which stage answered: an extension field ``cascade`` (``model``, ``stage``, ``escalations``,
  ``certainty``, ``gear``, ``fallback``) and the headers ``x-cascade-model``, ``x-cascade-stage``,
  ``x-cascade-escalations`` and ``x-cascade-fallback``. ``fallback`` marks an earlier stage's answer returned
  because the deadline passed before a later stage finished.
* ``stream: true`` sends server-sent events in OpenAI's chunk shape. A stage's answer is only known, and only
  final, once its certainty is: nothing is streamed from a stage that may yet be overruled. The chunks carry the
  answering stage's text as it is released (whole answers here: the local stages generate a batch at a time),
  then the finish chunk (with ``usage`` when ``stream_options.include_usage``), then ``data: [DONE]``.

* ``logprobs`` (completions: 0-5 alternatives per token; chat: ``logprobs: true`` and ``top_logprobs`` 0-5) returns
  the answering stage's token log-probabilities in OpenAI's shape (not with ``stream``). ``echo: true`` with
  ``max_tokens: 0`` on ``/v1/completions`` returns the prompt's own token log-probabilities (the first stage
  answers: a measurement has nothing to escalate), which is how a client, such as an upstream stage of another
  cascadeserve, scores an option as a continuation.

Bad input is a 400 naming the field (OpenAI's error shape: ``error.message``, ``error.type``, ``error.param``):
no messages, an empty prompt, a role it does not know, ``n`` other than 1, a ``temperature`` above 0 (decoding is
greedy), custom ``stop`` sequences, or a parameter this server does not serve (``tools``, ...); an
unknown model is a 404, a prompt over the limit a 413 naming the limit, and a missing or wrong token (with
``serve --auth-token``) a 401 or 403, all in that shape.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from cascadeserve.http import openai_schema as schema
from cascadeserve.http.clipper import ClipperLayer
from cascadeserve.http.failures import public_error
from cascadeserve.http.fastpath import disconnected
from cascadeserve.http.limits import MAX_PROMPT_CHARS, LimitError, check_max_tokens, check_options, loads
from cascadeserve.http.openapi import describe
from cascadeserve.http.v2 import ProtocolError
from cascadeserve.models.base import TokenLogprobs
from cascadeserve.runtime import Answer, InputSpec, Overloaded, Runtime, ServingError

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


class OpenAIError(Exception):
    """A request this front end refuses: HTTP ``status``, OpenAI's error ``type``, and the ``param`` at fault."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        if self.status == 503:
            kind = "overloaded_error"
        body = {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


def _common(body: Mapping[str, Any], allowed: set[str]) -> dict[str, Any]:
    """The parameters every endpoint checks alike; returns max_tokens, stream, options and timeout."""
    extra = sorted(set(body) - allowed)
    if extra:
        raise OpenAIError(f"unsupported parameter(s): {', '.join(extra)}", param=extra[0])
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise OpenAIError(f"n: only one choice per request is served, got {n!r}", param="n")
    t = body.get("temperature", 0)
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t != 0:
        raise OpenAIError(f"temperature: decoding is greedy, give 0 or leave it out (got {t!r})", param="temperature")
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise OpenAIError(f"echo: expected true or false, got {echo!r}", param="echo")
    if echo and cap != 0:  # the prompt's log-probabilities (how a client scores a continuation), nothing generated
        raise OpenAIError("echo: served only with max_tokens 0 (the prompt's log-probabilities)", param="echo")
    if not echo and cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise OpenAIError(f"max_tokens: expected a positive integer, got {cap!r}", param="max_tokens")
    if body.get("stop") not in (None, [], ""):  # accepted only empty: the stages stop at their own stop strings
        raise OpenAIError("stop: custom stop sequences are not served; each stage stops at its own", param="stop")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise OpenAIError(f"stream: expected true or false, got {stream!r}", param="stream")
    options = body.get("options")
    if options is not None and (
        not isinstance(options, list) or len(options) < 2 or not all(isinstance(o, str) and o for o in options)
    ):
        raise OpenAIError("options: expected a list of at least 2 non-empty strings", param="options")
    try:  # the gate's bounds (http/limits.py): no cap past any context, no flood of options
        check_max_tokens(cap, "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens")
        check_options(options, "options")
    except LimitError as e:
        raise OpenAIError(e.message, e.status, e.param) from None
    timeout = body.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0
    ):
        raise OpenAIError(f"timeout: expected a positive number of seconds, got {timeout!r}", param="timeout")
    so = body.get("stream_options") or {}
    if not isinstance(so, dict):
        raise OpenAIError("stream_options: expected an object", param="stream_options")
    top = _top_logprobs(body)
    if top is not None and stream:
        raise OpenAIError("logprobs: not served with stream; ask without stream", param="logprobs")
    return {
        "max_tokens": cap,
        "echo": echo,
        "logprobs": top,
        "stream": stream,
        "options": options,
        "timeout": None if timeout is None else float(timeout),
        "usage": bool(so.get("include_usage", False)),
    }


def _top_logprobs(body: Mapping[str, Any]) -> int | None:
    """How many alternatives per token to report, or None for no log-probabilities. Completions: ``logprobs`` is
    that number; chat: ``logprobs`` is true or false and ``top_logprobs`` the number."""
    lp = body.get("logprobs")
    if lp is None or lp is False:
        return None
    if "messages" in body:
        if lp is not True:
            raise OpenAIError(f"logprobs: expected true or false, got {lp!r}", param="logprobs")
        lp = body.get("top_logprobs") or 0
        param = "top_logprobs"
    else:
        param = "logprobs"
    if isinstance(lp, bool) or not isinstance(lp, int) or not 0 <= lp <= schema.MAX_TOP:
        raise OpenAIError(f"{param}: expected an integer from 0 to {schema.MAX_TOP}, got {lp!r}", param=param)
    return lp


def _content(msg: Mapping[str, Any], i: int) -> str:
    c = msg.get("content")
    if isinstance(c, list):  # content parts: text only
        parts = []
        for k, p in enumerate(c):
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise OpenAIError(f"messages[{i}].content[{k}]: only text parts are served", param="messages")
            parts.append(p["text"])
        c = "".join(parts)
    if not isinstance(c, str) or not c.strip():
        raise OpenAIError(f"messages[{i}].content: expected non-empty text", param="messages")
    return c


def parse_chat(body: Any) -> tuple[str, str, dict[str, Any]]:
    """``(model, prompt, params)`` of a chat completion request, or :class:`OpenAIError` naming the field."""
    if not isinstance(body, dict):
        raise OpenAIError("the body must be a JSON object")
    params = _common(body, schema.CHAT_FIELDS)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("model: required, the name of the served cascade", param="model")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise OpenAIError("messages: expected a non-empty list of messages", param="messages")
    turns: list[tuple[str, str]] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise OpenAIError(f"messages[{i}]: expected an object with role and content", param="messages")
        role = m.get("role")
        if role not in schema.ROLES:
            want = ", ".join(schema.ROLES)
            raise OpenAIError(f"messages[{i}].role: expected one of {want}, got {role!r}", param="messages")
        turns.append((str(role), _content(m, i)))
    if turns[-1][0] == "assistant":
        raise OpenAIError("messages: the last message must not be the assistant's", param="messages")
    # the stages apply their own chat template to one prompt: a conversation becomes labelled lines
    one = len(turns) == 1 and turns[0][0] == "user"
    prompt = turns[0][1] if one else "\n".join(f"{r}: {c}" for r, c in turns)
    return model, prompt, params


def parse_completion(body: Any) -> tuple[str, str, dict[str, Any]]:
    """``(model, prompt, params)`` of a (legacy) completion request."""
    if not isinstance(body, dict):
        raise OpenAIError("the body must be a JSON object")
    params = _common(body, schema.COMPLETION_FIELDS)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("model: required, the name of the served cascade", param="model")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise OpenAIError("prompt: expected one non-empty string", param="prompt")
    return model, prompt, params


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


class _Front:
    """The handlers, over the V2 app's handlers (admission, deadlines, the served model)."""

    def __init__(self, api: _Api) -> None:
        self.api = api

    def _auth(self, request: Request) -> Response | None:
        """The V2 handlers' token check, its refusal in OpenAI's error shape."""
        bad = self.api._auth(request)
        if bad is None:
            return None
        refused = OpenAIError(json.loads(bytes(bad.body))["error"], bad.status_code).response()
        if "www-authenticate" in bad.headers:
            refused.headers["WWW-Authenticate"] = bad.headers["www-authenticate"]
        return refused

    @describe(responses=(401, 403), secured=True, error=schema.ERROR)
    async def models(self, request: Request) -> Response:
        """The served cascade, as OpenAI's model list."""
        if (bad := self._auth(request)) is not None:
            return bad
        entry = {"id": self.api.model.name, "object": "model", "created": 0, "owned_by": "cascadeserve"}
        return JSONResponse({"object": "list", "data": [entry]})

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
            model, prompt, params = (parse_chat if chat else parse_completion)(body)
            if model != api.model.name:
                raise OpenAIError(
                    f"model {model!r} not found; this server serves {api.model.name!r}", 404, "model", "model_not_found"
                )
            if len(api.model.inputs) > 1 or api.model.input.datatype != "BYTES":
                takes = ", ".join(f"{i.name} ({i.datatype})" for i in api.model.inputs)
                raise OpenAIError(f"model {model!r} takes the tensors {takes}, not text", param="model")
            if len(prompt) > MAX_PROMPT_CHARS:
                raise OpenAIError(
                    f"the prompt is {len(prompt)} characters, over this server's limit of {MAX_PROMPT_CHARS}",
                    413,
                    "messages" if chat else "prompt",
                    "context_length_exceeded",
                )
            answer = await self._ask(request, prompt, params)
            text = self._text(answer, params)
        except OpenAIError as e:
            return e.response()
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        out = answer.output
        usage = {
            "prompt_tokens": 0 if out is None else out.prompt_tokens,
            "completion_tokens": 0 if out is None else out.output_tokens,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        cap = params["max_tokens"]
        finish = "length" if out is not None and cap is not None and out.output_tokens >= cap else "stop"
        base = {"id": rid, "created": int(time.time()), "model": model, "cascade": _cascade_info(answer)}
        if params["stream"]:
            events = _events(base, chat, text, finish, usage if params["usage"] else None)
            return StreamingResponse(events, media_type="text/event-stream", headers=_headers(answer))
        top = params["logprobs"]
        lps = None if top is None or out is None else out.logprobs
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
            choice["logprobs"] = None if lps is None else _chat_logprobs(lps, top)
        else:
            choice = {"index": 0, "text": text, "logprobs": None if lps is None else _completion_logprobs(lps, top)}
        choice["finish_reason"] = finish
        obj = {**base, "object": "chat.completion" if chat else "text_completion", "choices": [choice], "usage": usage}
        return JSONResponse(obj, headers=_headers(answer))

    async def _ask(self, request: Request, prompt: str, params: dict[str, Any]) -> Answer:
        api = self.api
        item: dict[str, Any] = {"prompt": prompt}
        if params["options"] is not None:
            item["options"] = params["options"]
        if params["echo"]:
            item["echo"] = True
        elif params["max_tokens"] is not None:
            item["max_new_tokens"] = params["max_tokens"]
        try:
            (req,) = api.layer.submit([json.dumps(item)], params["timeout"])
        except Overloaded as e:
            raise OpenAIError(str(e), 503, code="overloaded") from None
        except ServingError as e:
            raise OpenAIError(*public_error(e)) from None
        gone = asyncio.ensure_future(disconnected(request.receive))
        try:
            await asyncio.wait((req.future, gone), return_when=asyncio.FIRST_COMPLETED)
            if not req.future.done():  # the client went away: drop the request if it has not started
                api.runtime.cancel([req])
            try:
                answer: Answer = await req.future
                return answer
            except ServingError as e:  # a model's own text only in the server log
                raise OpenAIError(*public_error(e)) from None
        finally:
            gone.cancel()

    def _text(self, answer: Answer, params: dict[str, Any]) -> str:
        if answer.output is not None:
            return answer.output.text
        options = params["options"]
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
    base: dict[str, Any], chat: bool, text: str, finish: str, usage: dict[str, int] | None
) -> AsyncIterator[bytes]:
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta: dict[str, Any] | str, reason: str | None, extra: dict[str, Any] | None = None) -> bytes:
        if chat:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason}
        obj = {**base, "object": kind, "choices": [choice], **(extra or {})}
        return f"data: {json.dumps(obj)}\n\n".encode()

    if chat:
        yield chunk({"role": "assistant", "content": ""}, None)
    pieces = text.split(" ")
    for i, p in enumerate(pieces):  # the released answer, word by word
        piece = p if i == len(pieces) - 1 else p + " "
        if piece:
            yield chunk({"content": piece} if chat else piece, None)
    yield chunk({} if chat else "", finish)
    if usage is not None:
        obj = {**base, "object": kind, "choices": [], "usage": usage}
        yield f"data: {json.dumps(obj)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def openai_routes(api: _Api) -> list[BaseRoute]:
    front = _Front(api)
    return [
        Route("/v1/models", front.models, methods=["GET"]),
        Route("/v1/chat/completions", front.chat, methods=["POST"]),
        Route("/v1/completions", front.completions, methods=["POST"]),
    ]
