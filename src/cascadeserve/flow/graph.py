"""The compiled form of a dataflow: a list of nodes in topological order, each one task for an executor.

Node 0 is the flow's input. Every other node holds one :class:`~cascadeserve.flow.operators.Operator` (a
``Fuse`` when the optimiser merged a chain) and the indices of the nodes feeding it. The optimiser's passes
(:mod:`cascadeserve.flow.optimize`) rewrite one graph into another; executors run a graph as it is. A node also
carries what the optimiser decided about running it: ``batch`` (it takes the rows of several ``execute`` calls
in one invocation, up to ``max_batch`` calls) and ``dispatch`` (a lookup whose key picks the worker that runs the
node: the one that has the key cached).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from cascadeserve.flow.combine import AnyOf
from cascadeserve.flow.operators import Lookup, Operator
from cascadeserve.flow.schema import Schema

__all__ = ["Graph", "Node"]


@dataclass(frozen=True)
class Node:
    op: Operator | None  # None: the flow's input
    inputs: tuple[int, ...] = ()
    batch: bool = False
    max_batch: int = 10
    dispatch: Lookup | None = None

    @property
    def any(self) -> bool:
        """Wait for any input (anyof), not all."""
        return isinstance(self.op, AnyOf)

    @property
    def label(self) -> str:
        return "input" if self.op is None else self.op.label

    def with_(self, **kw: object) -> Node:
        return replace(self, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Graph:
    schema: Schema  # the input schema
    nodes: tuple[Node, ...]  # topological order; nodes[0] is the input, nodes[-1] the output

    def consumers(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                out[j].append(i)
        return out

    @property
    def output(self) -> int:
        return len(self.nodes) - 1

    def describe(self) -> list[str]:
        lines = []
        for i, n in enumerate(self.nodes):
            flags = [f for f, on in (("batch", n.batch), ("locality", n.dispatch is not None)) if on]
            res = "" if n.op is None or n.op.resources == "cpu" else f" [{n.op.resources}]"
            extra = f" ({', '.join(flags)})" if flags else ""
            lines.append(f"{i}: {n.label}{res} <- {list(n.inputs)}{extra}")
        return lines

    @staticmethod
    def compact(schema: Schema, nodes: Sequence[Node], output: int) -> Graph:
        """Keep the nodes ``output`` depends on (the input always), renumbered in topological order."""
        live: set[int] = {0}
        stack = [output]
        while stack:
            i = stack.pop()
            if i in live and i != 0:
                continue
            live.add(i)
            stack.extend(nodes[i].inputs)
        order = sorted(live)
        # the output must be last: anything after it in the order is not needed by it
        new_index = {old: k for k, old in enumerate(order)}
        out = tuple(nodes[i].with_(inputs=tuple(new_index[j] for j in nodes[i].inputs)) for i in order)
        return Graph(schema, out)
