"""The engines and the policy stay readable: no module over 500 lines, no function over 150 (the simulator's compiled
loop included: it is split into helpers that numba copies back into it); and no function of the package, outside the
command line's, takes more than 20 parameters (the compiled loop's state travels as named records,
``simulate/loop_records.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cascadeserve"
PACKAGES = ("simulate", "runtime", "policy", "backends")
MAX_PARAMETERS = 20


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


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> int:
    """Positional (positional-only included), keyword-only, ``*args`` and ``**kwargs``; a leading ``self`` or ``cls``
    not counted."""
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_takes_more_than_20_parameters() -> None:
    """Every function of ``src/cascadeserve`` but the command line's (``cli/``: one parameter per option) and the
    generated gRPC modules (``*_pb2*.py``)."""
    too_many = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("cli/") or "_pb2" in path.name:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                n = parameter_count(node)
                if n > MAX_PARAMETERS:
                    too_many.append(f"{rel}:{node.lineno} {getattr(node, 'name', 'lambda')}: {n} parameters")
    assert not too_many, "\n".join(too_many)


def test_the_parameter_count_counts_every_kind() -> None:
    source = ["def f(self, a, /, b, *c, d, **e): ...", "def g(cls): pass", "def h(x, self): ...", "k = lambda *a, d: 0"]
    tree = ast.parse("\n".join(source))
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.Lambda)]
    assert [parameter_count(n) for n in found] == [5, 0, 2, 2]
