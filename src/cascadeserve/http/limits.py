"""The request-size and request-shape gate every route reads its request through.

One body reader and one JSON parser for every route that takes a body (V2 infer and the plan hot-swap through
the app's ``_body``, Clipper's predict and update, feedback, OpenAI's completions, the repository's load), and the
bounds on what the request may ask for, so each limit holds once and says the same thing everywhere:

* **body size**: :func:`read_body` answers 413 naming the limit (``--max-body-bytes``, default 8 MiB) before
  reading anything when ``Content-Length`` is over it, and stops reading a chunked body the moment it passes it;
* **JSON shape**: :func:`loads` refuses (400) a body nested deeper than :data:`~cascadeserve.http.jsonshape.MAX_DEPTH`
  levels or holding more than :data:`~cascadeserve.http.jsonshape.MAX_ELEMENTS` elements, measured on the bytes
  before parsing (:mod:`cascadeserve.http.jsonshape`), so ``json.loads`` never runs out of stack nor builds
  millions of objects;
* **what a text request asks for**: a prompt of at most :data:`MAX_PROMPT_CHARS` characters (413), at most
  :data:`MAX_TOKENS` new tokens (400), at most :data:`MAX_OPTIONS` options of :data:`MAX_OPTION_CHARS` characters in
  all (400, 413), each naming the field. OpenAI's routes check them on the request (:mod:`cascadeserve.http.openai`);
  V2 (HTTP and gRPC) and Clipper on each ``BYTES`` row that is an LLM item (a JSON object with ``prompt``, see
  :mod:`cascadeserve.models.llm_prompts`), through :func:`check_text_rows`, which also refuses a row that is not
  text at all.

Every refusal is a :class:`~cascadeserve.http.v2.ProtocolError` (its subclass :class:`LimitError` carries the field
as ``param`` for OpenAI's error shape), so every front end already answers it with its status. The gate decides
nothing about serving: it parses, and refuses what cannot be parsed safely.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.types import Receive

from cascadeserve.http.jsonshape import MAX_DEPTH, MAX_ELEMENTS, shape_error
from cascadeserve.http.v2 import ProtocolError
from cascadeserve.models.llm_prompts import decode_item

__all__ = [
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_OPTIONS",
    "MAX_OPTION_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_TOKENS",
    "LimitError",
    "check_max_tokens",
    "check_options",
    "check_prompt",
    "check_text_rows",
    "loads",
    "read_body",
]

MAX_PROMPT_CHARS = 32_000  # about 8k tokens: past the context of the small local models this serves
MAX_TOKENS = 2**20  # new tokens one request may ask for: past any stage's context; each stage caps it at its own
MAX_OPTIONS = 64  # a scoring request's candidate answers (each one is scored as a continuation: a forward pass)
MAX_OPTION_CHARS = MAX_PROMPT_CHARS  # the options' characters, all together


class LimitError(ProtocolError):
    """A request past one of the gate's bounds: HTTP ``status``, and the request field at fault (``param``)."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message, status)
        self.param = param


async def read_body(receive: Receive, limit: int, declared: str | None = None) -> bytes:
    """The request body, or 413 naming ``limit``: at once when the ``Content-Length`` ``declared`` is over it,
    else as soon as the bytes read pass it (a chunked body is never read further). A client that disconnects
    before its body is whole gets 499 (nobody is left to read the answer)."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProtocolError(f"body: {declared} bytes is over the limit of {limit} bytes", 413)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise ProtocolError(f"body: over the limit of {limit} bytes", 413)
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif message["type"] == "http.disconnect":
            raise ProtocolError("body: the client went away before sending all of it", 499)


def loads(text: bytes | str, what: str = "body") -> Any:
    """``text`` parsed as JSON, or 400 naming ``what``: malformed, not UTF-8, nested too deeply or too large
    (``TypeError`` for a ``text`` that is neither bytes nor a string, as ``json.loads`` raises)."""
    if not isinstance(text, bytes | str):
        raise TypeError(f"{what}: expected JSON text, got {type(text).__name__}")
    problem = shape_error(text)
    if problem is not None:
        raise LimitError(f"{what}: {problem}")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        msg = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise ProtocolError(f"{what}: malformed JSON ({msg})") from None
    except RecursionError:  # unbalanced brackets that the scan left to the parser
        raise ProtocolError(f"{what}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # an integer of more than 4300 digits: Python refuses to parse it
        raise ProtocolError(f"{what}: malformed JSON ({e})") from None


def check_prompt(prompt: str, param: str) -> None:
    """413 naming ``param`` for a prompt over :data:`MAX_PROMPT_CHARS` characters."""
    if len(prompt) > MAX_PROMPT_CHARS:
        raise LimitError(
            f"{param}: the prompt is {len(prompt)} characters, over this server's limit of {MAX_PROMPT_CHARS}",
            413,
            param,
        )


def check_max_tokens(value: object, param: str) -> None:
    """400 naming ``param`` for an integer cap on new tokens over :data:`MAX_TOKENS` (other values: the caller's)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
        raise LimitError(f"{param}: {value} is over this server's limit of {MAX_TOKENS} tokens", 400, param)


def check_options(options: object, param: str) -> None:
    """400 naming ``param`` for more than :data:`MAX_OPTIONS` options; 413 for more than :data:`MAX_OPTION_CHARS`
    characters of them in all (their type is the caller's to check)."""
    if not isinstance(options, list | tuple):
        return
    if len(options) > MAX_OPTIONS:
        raise LimitError(f"{param}: {len(options)} options, over this server's limit of {MAX_OPTIONS}", 400, param)
    chars = sum(len(o) for o in options if isinstance(o, str))
    if chars > MAX_OPTION_CHARS:
        raise LimitError(
            f"{param}: {chars} characters of options, over this server's limit of {MAX_OPTION_CHARS}", 413, param
        )


def check_text_rows(rows: Iterable[object], where: str) -> None:
    """Every row of a ``BYTES`` input is text (400 naming the row otherwise), and a row that is an LLM item (a JSON
    object with ``prompt``) is a well-formed one within the bounds above (400 or 413 naming the row and field)."""
    for i, row in enumerate(rows):
        if not isinstance(row, str):
            got = "a list" if isinstance(row, list) else type(row).__name__
            raise ProtocolError(f"{where}[{i}]: expected text (a string), got {got}")
        if not row.startswith("{") or '"prompt"' not in row:
            continue
        at = f"{where}[{i}]"
        item = loads(row, at)
        if not isinstance(item, dict) or "prompt" not in item:
            continue
        if isinstance(item["prompt"], str):
            check_prompt(item["prompt"], f"{at}.prompt")
        check_options(item.get("options"), f"{at}.options")
        check_max_tokens(item.get("max_new_tokens"), f"{at}.max_new_tokens")
        try:
            decode_item(item)
        except ValueError as e:
            raise ProtocolError(f"{at}: {e}") from None
