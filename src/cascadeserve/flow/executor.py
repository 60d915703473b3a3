"""What every executor shares: the deployed graph, the input check, and the lifecycle.

An executor runs one compiled :class:`~cascadeserve.flow.graph.Graph`; ``execute(table)`` returns a
:class:`concurrent.futures.Future` of the output table at once (``.result()`` waits). Every call ends: its
future resolves with the table or with the first error an operator raised (a :class:`FlowError` naming the
operator, column and row for a type mismatch), and one failing call never fails another, except the calls
batched into the same invocation of a batch-aware operator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future
from typing import Any

from cascadeserve.flow.graph import Graph
from cascadeserve.flow.schema import FlowError, FlowTypeError, accepts, type_name
from cascadeserve.flow.table import Table

__all__ = ["Executor", "check_input"]


def check_input(graph: Graph, table: Table) -> Table:
    """The table an execution starts from: the flow's input schema, ungrouped (names must match, types fit)."""
    if not isinstance(table, Table):
        raise FlowError(f"execute takes a Table, not {type(table).__name__}")
    want, got = graph.schema, table.schema
    if want.names != got.names:
        raise FlowTypeError(f"execute: the flow takes columns {want}, the table has {got}")
    for w, g in zip(want, got, strict=True):
        if not accepts(w.type, g.type):
            raise FlowTypeError(
                f"execute: column {w.name!r} is {type_name(w.type)} in the flow, {type_name(g.type)} in the table"
            )
    if table.grouping is not None:
        raise FlowError("execute: the input table must be ungrouped")
    return Table.of(want, table.rows_, table.ids)


class Executor(ABC):
    backend = "?"

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.closed = False

    @abstractmethod
    def execute(self, table: Table) -> Future[Table]: ...

    def close(self) -> None:
        self.closed = True

    def _refuse_closed(self) -> None:
        if self.closed:
            raise FlowError(f"this {self.backend} deployment is closed")

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
