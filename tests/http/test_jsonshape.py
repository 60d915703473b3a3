"""The JSON pre-scan (http/jsonshape.py): depth and element counts exact at the limits, strings (with escapes)
ignored, unbalanced brackets left to the parser, on both sides of its 4 KiB switch to numpy."""

from __future__ import annotations

import json

import pytest

from cascadeserve.http.jsonshape import MAX_DEPTH, shape_error


@pytest.mark.parametrize("pad", [0, 5000])  # below and above the 4 KiB of brackets where numpy takes over
def test_depth_is_exact_at_the_limit(pad: int) -> None:
    wide = "[]," * pad
    ok = "[" + wide + "[" * (MAX_DEPTH - 1) + "0" + "]" * MAX_DEPTH
    assert shape_error(ok) is None
    deep = "[" + wide + "[" * MAX_DEPTH + "0" + "]" * (MAX_DEPTH + 1)
    assert shape_error(deep) == f"JSON nested deeper than {MAX_DEPTH} levels"
    assert shape_error('{"a":' * 100 + "1" + "}" * 100) == f"JSON nested deeper than {MAX_DEPTH} levels"


def test_brackets_in_strings_are_text() -> None:
    text = json.dumps({"s": "[" * 500 + '"\\' + "{" * 500, "t": ["]" * 300]})
    assert shape_error(text) is None and shape_error(text.encode()) is None


def test_elements_count_values_outside_strings() -> None:
    assert shape_error("[" + "1," * 99 + "1]", max_elements=100) is None
    assert shape_error("[" + "1," * 100 + "1]", max_elements=100) == "JSON holds more than 100 elements"
    assert shape_error(json.dumps(["a,b,c" * 100]), max_elements=10) is None  # commas in a string
    assert shape_error("[" + "[]," * 200 + "[]]", max_depth=None, max_elements=100) is not None


def test_unbalanced_brackets_are_the_parsers_to_name() -> None:
    assert shape_error("[" * 10) is None  # shallow and unclosed: json.loads says it is malformed
    assert shape_error("]" * 100 + "[" * 100) is None
