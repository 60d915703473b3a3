"""What the OpenAI-compatible endpoints accept, as data: the fields each one takes, and the request, error and answer
schemas the OpenAPI document publishes for them (:mod:`cascadeserve.http.openai` parses and answers; this module
only describes, so the schemas sit in one place beside the field lists the parser checks against)."""

from __future__ import annotations

from typing import Any

from cascadeserve.models.llm_prompts import ROLES

__all__ = [
    "ANSWERS", "CHAT_BODY", "CHAT_FIELDS", "COMPLETION_BODY", "COMPLETION_FIELDS", "ERROR", "MAX_TOP", "REFUSALS",
    "REFUSED_FIELDS", "ROLES",
]  # fmt: skip

# accepted and honoured, or accepted as the only value they may take (http/openai_params.py says which)
CHAT_FIELDS = {
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p",
    "n", "user", "seed", "options", "timeout", "stop", "metadata", "store", "logprobs", "top_logprobs",
    "frequency_penalty", "presence_penalty", "ignore_eos",
}  # fmt: skip
COMPLETION_FIELDS = (CHAT_FIELDS - {"messages", "max_completion_tokens", "store", "metadata", "top_logprobs"}) | {
    "prompt",
    "echo",
    "best_of",
    "suffix",
}
# refused unless they take the one value that asks for nothing (http/openai_params.py): listed in the document so
# that a client learns of them from a 400 naming them, not from "unsupported parameter"
REFUSED_FIELDS = (
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "response_format", "logit_bias",
)  # fmt: skip
MAX_TOP = 5  # top_logprobs per token (the stages keep 5 alternatives; OpenAI's completions API allows 5 too)

# The OpenAPI document's request bodies: the checks every request gets whatever its other fields say (a field
# whose check depends on another, such as max_tokens with echo or logprobs with stream, is left open here)
NULL = {"type": "null"}
TEXT = {"type": "string", "pattern": r"\S"}
IDS = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}  # a prompt in token ids
FIELDS: dict[str, Any] = {
    "model": {"type": "string", "minLength": 1, "description": "the served cascade"},
    "stream": {"type": ["boolean", "null"]},
    "n": {"anyOf": [NULL, {"type": "integer", "minimum": 1, "maximum": 1}], "description": "one choice per prompt"},
    "temperature": {"anyOf": [NULL, {"type": "number", "minimum": 0, "maximum": 2}], "description": "0: greedy"},
    "top_p": {"anyOf": [NULL, {"type": "number", "exclusiveMinimum": 0, "maximum": 1}]},
    "frequency_penalty": {"anyOf": [NULL, {"type": "number", "minimum": -2, "maximum": 2}]},
    "presence_penalty": {"anyOf": [NULL, {"type": "number", "minimum": -2, "maximum": 2}]},
    "seed": {"anyOf": [NULL, {"type": "integer"}]},
    "ignore_eos": {"type": ["boolean", "null"]},
    "stop": {
        "anyOf": [NULL, {"type": "string"}, {"type": "array", "maxItems": 16, "items": {"type": "string"}}],
        "description": "stop strings, in place of the stage's own",
    },
    "options": {
        "anyOf": [NULL, {"type": "array", "minItems": 2, "items": {"type": "string", "minLength": 1}}],
        "description": "the candidate answers of a scoring cascade",
    },
    "timeout": {"anyOf": [NULL, {"type": "number", "exclusiveMinimum": 0}], "description": "seconds"},
    **{k: {} for k in ("stream_options", "max_tokens", "user", "logprobs", *REFUSED_FIELDS)},
}
CHAT_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["model", "messages"],
    "additionalProperties": False,
    "properties": {
        **{k: v for k, v in FIELDS.items() if k in CHAT_FIELDS or k in REFUSED_FIELDS},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "role": {"enum": list(ROLES)},
                    "content": {
                        "anyOf": [
                            TEXT,
                            {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "required": ["type", "text"],
                                    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                                },
                            },
                        ]
                    },
                },
            },
        },
        "max_completion_tokens": {"anyOf": [NULL, {"type": "integer", "minimum": 1}]},
        "logprobs": {"type": ["boolean", "null"]},
        **{k: {} for k in ("top_logprobs", "metadata", "store")},
    },
}
COMPLETION_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["model", "prompt"],
    "additionalProperties": False,
    "properties": {
        **{k: v for k, v in FIELDS.items() if k in COMPLETION_FIELDS or k in REFUSED_FIELDS},
        "prompt": {
            "anyOf": [
                TEXT,
                {"type": "array", "minItems": 1, "maxItems": 64, "items": TEXT},
                IDS,
                {"type": "array", "minItems": 1, "maxItems": 64, "items": IDS},
            ]
        },
        "echo": {"type": ["boolean", "null"]},
        "best_of": {"anyOf": [NULL, {"type": "integer", "minimum": 1, "maximum": 1}]},
        "suffix": {"anyOf": [NULL, {"const": ""}]},
        "max_tokens": {"anyOf": [NULL, {"type": "integer", "minimum": 0}]},
        "logprobs": {"anyOf": [NULL, {"const": False}, {"type": "integer", "minimum": 0, "maximum": MAX_TOP}]},
    },
}
ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
ANSWERS = ("application/json", "text/event-stream")  # stream: server-sent events
REFUSALS = (400, 401, 403, 404, 413, 500, 502, 503, 504)
