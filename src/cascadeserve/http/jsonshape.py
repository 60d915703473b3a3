"""How deep and how large a JSON text is, counted on its bytes before anything parses it.

``json.loads`` recurses once per nesting level (100,000 ``[`` raise ``RecursionError``, and even a few hundred
levels leave the handler that called it without stack), and it builds every element it reads (8 MiB of ``[],``
is 2.8 million lists, some 150 MB). :func:`shape_error` measures both on the bytes, outside strings, and says
what is wrong before a parser runs:

* the **nesting depth**: the deepest point of the brackets ``[ { ] }`` outside strings;
* the **elements**: the commas and the opening brackets outside strings (at least the number of values).

It costs three ``bytes.count`` passes for a body that is plainly within both limits (fewer brackets than the depth
limit, fewer commas and brackets than the element limit): well under a microsecond for an ordinary request. Only a
body past that bound is scanned exactly (its strings cut out by one regular expression, the brackets kept by
``bytes.translate``, the depth found by repeatedly removing the innermost pairs, or by numpy's ``cumsum`` past
4 KiB of brackets). Unbalanced brackets (malformed JSON) are left to the parser to name.

This module imports nothing of the HTTP layer, so the V2 decoder (:mod:`cascadeserve.http.v2`) uses it too;
:mod:`cascadeserve.http.limits` is the gate that turns its answer into a 400.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["MAX_DEPTH", "MAX_ELEMENTS", "shape_error"]

MAX_DEPTH = 64  # deeper than any request this server reads (a V2 tensor of 60 dimensions included)
MAX_ELEMENTS = 1_000_000  # values in one body: 8 MiB of plain numbers is about as many

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_PAIR = re.compile(rb"\[\]|\{\}")  # one pass removes exactly the innermost level
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = np.zeros(256, dtype=np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1


def _depth(brackets: bytes, limit: int) -> int:
    """The deepest nesting of ``brackets`` (only ``[]{}``), exact up to ``limit + 1``; unbalanced: where it stops."""
    if len(brackets) > 4096:
        steps = _STEP[np.frombuffer(brackets, dtype=np.uint8)]
        return int(np.cumsum(steps, dtype=np.int32).max())
    for level in range(limit + 1):
        if not brackets:
            return level
        inner = _PAIR.sub(b"", brackets)
        if len(inner) == len(brackets):  # unbalanced: the parser says what is wrong
            return level
        brackets = inner
    return limit + 1


def shape_error(text: bytes | str, max_depth: int | None = MAX_DEPTH, max_elements: int = MAX_ELEMENTS) -> str | None:
    """``None`` when ``text`` nests at most ``max_depth`` levels (``None``: not checked) and holds at most
    ``max_elements`` elements; else what is wrong, as ``"JSON nested deeper than 64 levels"`` or ``"JSON holds more
    than 1000000 elements"``."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    opens = raw.count(b"[") + raw.count(b"{")
    deep = max_depth is not None and opens > max_depth
    if not deep and opens + raw.count(b",") <= max_elements:
        return None
    bare = _STRING.sub(b'""', raw) if b'"' in raw else raw
    brackets = bare.translate(None, _NOT_BRACKET)
    if deep and max_depth is not None and _depth(brackets, max_depth) > max_depth:
        return f"JSON nested deeper than {max_depth} levels"
    if bare.count(b",") + brackets.count(b"[") + brackets.count(b"{") > max_elements:
        return f"JSON holds more than {max_elements} elements"
    return None
