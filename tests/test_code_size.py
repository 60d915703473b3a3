"""The engines and the policy stay readable: no module over 500 lines, no function over 150 (the simulator's compiled
loop included: it is split into helpers that numba copies back into it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cascadeserve"
PACKAGES = ("simulate", "runtime", "policy", "backends")


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_module_over_500_lines_nor_function_over_150(pkg: str) -> None:
    too_long = []
    for path in sorted((SRC / pkg).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(SRC).as_posix()
        if text.count("\n") > 500:
            too_long.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 150:
                    too_long.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)
