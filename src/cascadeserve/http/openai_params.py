"""What an OpenAI request asks, read and checked: :func:`parse_chat` and :func:`parse_completion` turn a request body
into an :class:`Ask` (the items for the cascade's first stage, one per prompt, and how to answer), or raise
:class:`OpenAIError` naming the field at fault.

Each parameter is either **honoured** (passed in the item to the stage that answers, see
:mod:`cascadeserve.models.llm_prompts`), **accepted** with no effect on the answer (``user``, ``metadata``,
``store``; ``seed`` on a greedy request), or **refused** with a 400 naming it, never silently dropped:

* honoured: ``max_tokens`` / ``max_completion_tokens`` (the answering stage's cap, up to its context),
  ``temperature`` (0 greedy; above 0 sampling), ``top_p``, ``seed``, ``stop``, ``frequency_penalty``,
  ``presence_penalty``, ``ignore_eos`` (vLLM's), ``logprobs`` / ``top_logprobs`` (0-5 alternatives per token),
  ``echo`` (completions: the prompt's token log-probabilities, then ``max_tokens`` tokens after it; 0 allowed),
  ``stream`` and ``stream_options.include_usage``, and the extensions ``options`` (a scoring request's candidate
  answers) and ``timeout`` (seconds);
* prompts on ``/v1/completions``: a string, a list of strings, a list of token ids, or a list of lists of token ids
  (at most :data:`MAX_PROMPTS` prompts; each is its own request through the cascade and its own choice). Token
  ids are read in the vocabulary of the cascade's first stage, which answers them;
* refused: ``n`` or ``best_of`` other than 1 (a cascade gives one answer per prompt), ``tools``, ``tool_choice``
  (but ``"none"``), ``functions``, ``function_call``, ``parallel_tool_calls``, ``response_format`` (but
  ``{"type": "text"}``), a non-empty ``logit_bias``, ``suffix``, and any parameter not named here.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cascadeserve.http import openai_schema as schema
from cascadeserve.http.limits import MAX_PROMPT_CHARS, LimitError, check_max_tokens, check_options
from cascadeserve.models.llm_sampling import SamplingError, parse_sampling, parse_stop

__all__ = ["MAX_PROMPTS", "Ask", "OpenAIError", "parse_chat", "parse_completion"]

MAX_PROMPTS = 64  # prompts in one /v1/completions request (each is a request through the cascade)

# parameters a cascade cannot honour, and the one value each may take (a client that sends it is not refused)
_REFUSED: dict[str, tuple[Any, ...]] = {
    "tools": (None,),
    "tool_choice": (None, "none"),
    "functions": (None,),
    "function_call": (None, "none"),
    "parallel_tool_calls": (None,),
    "response_format": (None, {"type": "text"}),
    "logit_bias": (None, {}),
    "suffix": (None, ""),  # completions only
}
_DECODING = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "ignore_eos", "stop")


class OpenAIError(Exception):
    """A request this front end refuses: HTTP ``status``, OpenAI's error ``type``, and the ``param`` at fault."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


@dataclass(frozen=True)
class Ask:
    """A parsed request: the served ``model`` it names, one item per prompt (JSON objects for the first stage),
    and how the answer is written."""

    model: str
    chat: bool
    items: tuple[dict[str, Any], ...]
    max_tokens: int | None
    echo: bool
    logprobs: int | None  # alternatives per token, or None for no log-probabilities
    stream: bool
    options: list[str] | None
    timeout: float | None
    usage: bool  # stream_options.include_usage


def _refuse(body: Mapping[str, Any], allowed: set[str]) -> None:
    for name, fine in _REFUSED.items():
        if name in body and body[name] not in fine:
            raise OpenAIError(f"{name}: not served through a cascade (each stage answers with plain text)", param=name)
    for name in ("n", "best_of"):
        v = body.get(name)
        if v is not None and (v != 1 or isinstance(v, bool)):
            raise OpenAIError(f"{name}: a cascade answers one choice per prompt; give 1, got {v!r}", param=name)
    extra = sorted(set(body) - allowed - set(schema.REFUSED_FIELDS))
    if extra:
        raise OpenAIError(f"unsupported parameter(s): {', '.join(extra)}", param=extra[0])


def _common(body: Mapping[str, Any], allowed: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters every endpoint checks alike: (how to answer, the decoding fields every item carries)."""
    _refuse(body, allowed)
    cap_name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    cap = body.get(cap_name)
    echo = body.get("echo", False)
    if echo is None:
        echo = False
    if not isinstance(echo, bool):
        raise OpenAIError(f"echo: expected true or false, got {echo!r}", param="echo")
    least = 0 if echo else 1
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < least):
        what = "a non-negative integer (with echo)" if echo else "a positive integer"
        raise OpenAIError(f"{cap_name}: expected {what}, got {cap!r}", param=cap_name)
    stream = body.get("stream", False) or False
    if not isinstance(stream, bool):
        raise OpenAIError(f"stream: expected true or false, got {stream!r}", param="stream")
    options = body.get("options")
    if options is not None and (
        not isinstance(options, list) or len(options) < 2 or not all(isinstance(o, str) and o for o in options)
    ):
        raise OpenAIError("options: expected a list of at least 2 non-empty strings", param="options")
    try:  # the gate's bounds (http/limits.py): no cap past any context, no flood of options
        check_max_tokens(cap, cap_name)
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
    if echo and stream:
        raise OpenAIError("echo: not served with stream; ask without stream", param="echo")
    try:
        sampling, stop = parse_sampling(body), parse_stop(body.get("stop"))
    except SamplingError as e:
        raise OpenAIError(str(e), param=e.field) from None
    decoding: dict[str, Any] = sampling.to_json()
    if stop is not None:
        decoding["stop"] = list(stop)
    if options is not None:
        asked = next((k for k in _DECODING if k in decoding), "logprobs" if top is not None else None)
        if asked is not None:
            raise OpenAIError(
                f"{asked}: a scoring request (options) answers with the likeliest option; it decodes nothing",
                param=asked,
            )
    elif not sampling.greedy and sampling.seed is None:
        decoding["nonce"] = uuid.uuid4().hex  # an unseeded draw is a request of its own (a cache never answers it)
    if echo:
        decoding["echo"] = True
    if cap is not None:
        decoding["max_new_tokens"] = cap
    how = {
        "max_tokens": cap,
        "echo": echo,
        "logprobs": top,
        "stream": stream,
        "options": options,
        "timeout": None if timeout is None else float(timeout),
        "usage": bool(so.get("include_usage", False)),
    }
    return how, decoding


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


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("model: required, the name of the served cascade", param="model")
    return model


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


def _ask(model: str, chat: bool, items: list[dict[str, Any]], how: dict[str, Any]) -> Ask:
    return Ask(model, chat, tuple(items), **how)


def parse_chat(body: Any) -> Ask:
    """A chat completion request, or :class:`OpenAIError` naming the field."""
    if not isinstance(body, dict):
        raise OpenAIError("the body must be a JSON object")
    how, decoding = _common(body, schema.CHAT_FIELDS)
    model = _model(body)
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
    # the stages put the messages through their chat template; the prompt is the same conversation as text, for a
    # stage that reads text only (one user message: its content; else each message on a line after its role)
    one = len(turns) == 1 and turns[0][0] == "user"
    prompt = turns[0][1] if one else "\n".join(f"{r}: {c}" for r, c in turns)
    _check_chars(prompt, "messages")
    item: dict[str, Any] = {"prompt": prompt, **decoding}
    if how["options"] is not None:
        item |= {"options": how["options"], "usage": True}
    else:
        item["messages"] = [{"role": r, "content": c} for r, c in turns]
    return _ask(model, True, [item], how)


def _check_chars(prompt: str, param: str) -> None:
    if len(prompt) > MAX_PROMPT_CHARS:
        raise OpenAIError(
            f"the prompt is {len(prompt)} characters, over this server's limit of {MAX_PROMPT_CHARS}",
            413,
            param,
            "context_length_exceeded",
        )


def _token_ids(p: list[Any]) -> bool:
    return bool(p) and all(isinstance(t, int) and not isinstance(t, bool) for t in p)


def _prompts(raw: Any) -> list[str | list[int]]:
    """A completion's ``prompt``: one string, a list of strings, a list of token ids, or a list of such lists."""
    bad = OpenAIError(
        "prompt: expected a non-empty string, a list of them, a list of token ids, or a list of such lists",
        param="prompt",
    )
    if isinstance(raw, str):
        prompts: list[Any] = [raw]
    elif isinstance(raw, list) and _token_ids(raw):
        prompts = [raw]
    elif (
        isinstance(raw, list)
        and raw
        and (all(isinstance(p, str) for p in raw) or all(isinstance(p, list) and _token_ids(p) for p in raw))
    ):
        prompts = raw
    else:
        raise bad
    if len(prompts) > MAX_PROMPTS:
        raise OpenAIError(f"prompt: {len(prompts)} prompts, over this server's limit of {MAX_PROMPTS}", param="prompt")
    for p in prompts:
        if isinstance(p, str) and p.strip():
            _check_chars(p, "prompt")
        elif isinstance(p, list):
            if min(p) < 0:
                raise OpenAIError("prompt: token ids are non-negative integers", param="prompt")
            if len(p) > MAX_PROMPT_CHARS:
                raise OpenAIError(
                    f"prompt: {len(p)} tokens, over this server's limit of {MAX_PROMPT_CHARS}", 413, "prompt"
                )
        else:
            raise bad
    return prompts


def parse_completion(body: Any) -> Ask:
    """A (legacy) completion request, or :class:`OpenAIError` naming the field."""
    if not isinstance(body, dict):
        raise OpenAIError("the body must be a JSON object")
    how, decoding = _common(body, schema.COMPLETION_FIELDS)
    model = _model(body)
    items: list[dict[str, Any]] = []
    for p in _prompts(body.get("prompt")):
        if isinstance(p, list):
            if how["options"] is not None:
                raise OpenAIError("options: scored after a text prompt, not after token ids", param="options")
            items.append({"prompt_ids": p, **decoding})
            continue
        item: dict[str, Any] = {"prompt": p, **decoding}
        if how["options"] is not None:
            item |= {"options": how["options"], "usage": True}
        items.append(item)
    return _ask(model, False, items, how)
