"""No import cycles between the modules of ``cascadeserve``.

The graph comes from grimp (import-linter's engine), so it counts every import a module makes: at the top, inside a
function (a lazy import is still a dependency) and under ``TYPE_CHECKING``. A cycle is a strongly connected component
of more than one module; the test prints one concrete cycle from each, with the line of every import in it.

``KNOWN_CYCLES`` would list cycles being fixed elsewhere (a known cycle may shrink or vanish; a module joining it,
or any other cycle, turns the test red). It is empty: the package has no import cycle.
"""

from __future__ import annotations

import itertools
from collections import deque

import grimp
import pytest

KNOWN_CYCLES: tuple[frozenset[str], ...] = ()  # none left: the runtime's request/generation/consumer cycle is gone


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit); components of one module without a self-loop are left out."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in graph[v]:
                        found.append(sorted(comp))
    return found


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, as ``[a, b, ..., a]``."""
    start, members = component[0], set(component)
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"{component} is not a cycle")


def describe(g: grimp.ImportGraph, cycle: list[str]) -> str:
    lines = []
    for a, b in itertools.pairwise(cycle):
        where = ", ".join(f"l.{d['line_number']}" for d in g.get_import_details(importer=a, imported=b))
        lines.append(f"  {a} -> {b} ({where})")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def import_graph() -> tuple[grimp.ImportGraph, dict[str, set[str]]]:
    g = grimp.build_graph("cascadeserve", cache_dir=None)
    return g, {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}


def test_no_import_cycles(import_graph: tuple[grimp.ImportGraph, dict[str, set[str]]]) -> None:
    g, graph = import_graph
    new = [c for c in strongly_connected_components(graph) if not any(set(c) <= known for known in KNOWN_CYCLES)]
    report = "\n\n".join(f"cycle among {', '.join(c)}; for example:\n{describe(g, one_cycle(graph, c))}" for c in new)
    assert not new, f"import cycles in cascadeserve:\n{report}"


def test_the_cycle_finder_finds_cycles_and_names_their_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert strongly_connected_components(graph) == [["a", "b", "c"], ["e"]]
    assert one_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert one_cycle(graph, ["e"]) == ["e", "e"]
