"""The ``Dataflow`` builder: the paper's functional API for DAGs of operators (§3.1).

``fl = Dataflow([("jpg_url", str)])`` starts a flow from an input schema. Each operator method returns a new
``Dataflow`` node that appends the operator to its input(s); nothing runs yet. ``fl.output = node`` closes the
flow (the node must derive from ``fl``); ``fl.deploy()`` compiles it, runs the optimiser and starts an executor;
``fl.execute(table)`` returns a future whose ``.result()`` is the output table::

    fl = Dataflow([("jpg_url", str)])
    img = fl.map(img_preproc)
    pred = img.map(resnet)
    fl.output = pred.map(convert_to_label)
    fl.deploy()
    out = fl.execute(Table([("jpg_url", str)], ["s3://bucket/cats.jpg"])).result()

Types are checked as the flow is written: each method checks its function's annotations (or the operator's
needs) against the schema feeding it, and raises :class:`~cascadeserve.flow.FlowTypeError` naming the operator,
the parameter and the column.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from cascadeserve.flow.combine import Agg, AnyOf, Join, Union
from cascadeserve.flow.functions import Bindable
from cascadeserve.flow.graph import Graph, Node
from cascadeserve.flow.kvs import KVStore
from cascadeserve.flow.operators import Col, Filter, GroupBy, Lookup, Map, Operator
from cascadeserve.flow.optimize import ALL, Optimizations, optimize
from cascadeserve.flow.schema import Column, FlowError, FlowTypeError, Schema, accepts
from cascadeserve.flow.table import Grouping, Table, _RowId, rowID

if TYPE_CHECKING:
    from cascadeserve.flow.executor import Executor

__all__ = ["BACKENDS", "Dataflow"]

BACKENDS = ("local", "ray", "gears")
_seq = itertools.count()


class Dataflow:
    """A flow (made from an input schema) or a node of one (made by an operator method)."""

    def __init__(self, schema: Sequence[Column | tuple[str, Any]] | Schema) -> None:
        self.schema = schema if isinstance(schema, Schema) else Schema(schema)
        self.grouping: Grouping = None
        self.op: Operator | None = None
        self.inputs: tuple[Dataflow, ...] = ()
        self.root: Dataflow = self
        self._seq = next(_seq)
        self._output: Dataflow | None = None
        self.deployment: Executor | None = None

    @classmethod
    def _node(cls, root: Dataflow, op: Operator, inputs: Sequence[Dataflow]) -> Dataflow:
        node = cls.__new__(cls)
        node.schema, node.grouping, node.op = op.out, op.grouping, op
        node.inputs, node.root = tuple(inputs), root
        node._seq = next(_seq)
        node._output, node.deployment = None, None
        return node

    def _same_flow(self, others: Sequence[Dataflow], what: str) -> None:
        for o in others:
            if not isinstance(o, Dataflow):
                raise FlowError(f"{what}: expected a Dataflow, got {type(o).__name__}")
            if o.root is not self.root:
                raise FlowError(f"{what}: every input must derive from the same flow")

    # -- operators --------------------------------------------------------------------------------------------
    def map(
        self,
        fn: Callable[..., Any] | Bindable,
        *,
        names: Sequence[str] | None = None,
        batch: bool | None = None,
        resources: str | None = None,
        high_variance: bool = False,
    ) -> Dataflow:
        """Apply ``fn`` to each row (its columns as positional arguments); see :mod:`cascadeserve.flow.functions`.

        ``batch=True``: ``fn`` is batch-aware (one list per column in, one output per row out), so the executor
        may batch rows across calls. ``resources="gpu"`` puts it on the GPU class. ``high_variance=True``: the
        optimiser may run replicas competitively."""
        op = Map(
            fn, self.schema, self.grouping, names=names, batch=batch, resources=resources, high_variance=high_variance
        )
        return Dataflow._node(self.root, op, [self])

    def filter(
        self, fn: Callable[..., bool] | Bindable, *, batch: bool | None = None, high_variance: bool = False
    ) -> Dataflow:
        """Keep the rows for which ``fn`` returns True."""
        return Dataflow._node(
            self.root, Filter(fn, self.schema, self.grouping, batch=batch, high_variance=high_variance), [self]
        )

    def groupby(self, column: str | _RowId) -> Dataflow:
        """Group an ungrouped table by ``column`` (or ``rowID``)."""
        return Dataflow._node(self.root, GroupBy(column, self.schema, self.grouping), [self])

    def agg(self, fn: str | Callable[..., Any], column: str | None = None) -> Dataflow:
        """``count``, ``sum``, ``min``, ``max`` or ``avg`` of ``column`` (per group when grouped)."""
        return Dataflow._node(self.root, Agg(fn, column, self.schema, self.grouping), [self])

    def join(self, other: Dataflow, key: str | _RowId = rowID, how: str = "inner", suffix: str = "_right") -> Dataflow:
        """Join with ``other`` on ``key`` (the row id by default); ``how`` is inner, left or outer."""
        self._same_flow([other], "join")
        op = Join((self.schema, self.grouping), (other.schema, other.grouping), key, how, suffix)
        return Dataflow._node(self.root, op, [self, other])

    def union(self, *others: Dataflow) -> Dataflow:
        """The rows of this table and then of each of ``others`` (same schema and grouping)."""
        self._same_flow(others, "union")
        ins = [self, *others]
        return Dataflow._node(self.root, Union([(d.schema, d.grouping) for d in ins]), ins)

    def anyof(self, *others: Dataflow) -> Dataflow:
        """Whichever of this table and ``others`` is ready first (same schema and grouping)."""
        self._same_flow(others, "anyof")
        ins = [self, *others]
        return Dataflow._node(self.root, AnyOf([(d.schema, d.grouping) for d in ins]), ins)

    def lookup(self, key: str | Col, *, name: str | None = None, type: Any = Any, default: Any = ...) -> Dataflow:
        """Append the store's value under ``key`` (a constant), or under each row's ``col(name)`` value."""
        op = Lookup(key, self.schema, self.grouping, name=name, type=type, default=default)
        return Dataflow._node(self.root, op, [self])

    def extend(self, other: Dataflow) -> Dataflow:
        """Append ``other`` (a whole flow with its output set) after this node: ``other``'s input is this table."""
        if other.root is not other or other._output is None:
            raise FlowError("extend: pass a flow whose output is set")
        if self.grouping is not None:
            raise FlowError("extend: the table a flow is appended to must be ungrouped")
        if self.schema.names != other.schema.names or not all(
            accepts(o.type, s.type) for o, s in zip(other.schema, self.schema, strict=True)
        ):
            raise FlowTypeError(f"extend: the appended flow takes {other.schema}, this table is {self.schema}")
        copies: dict[int, Dataflow] = {id(other): self}
        for node in _upstream(other._output):
            if node is other:
                continue
            assert node.op is not None
            copies[id(node)] = Dataflow._node(self.root, node.op, [copies[id(i)] for i in node.inputs])
        return copies[id(other._output)]

    # -- the flow ---------------------------------------------------------------------------------------------
    @property
    def output(self) -> Dataflow | None:
        return self._output

    @output.setter
    def output(self, node: Dataflow) -> None:
        if self.root is not self:
            raise FlowError("set output on the flow itself (the Dataflow made from the input schema)")
        if not isinstance(node, Dataflow) or node.root is not self:
            raise FlowError("the output must derive from this flow")
        self._output = node

    def graph(self) -> Graph:
        """The flow as written: one node per operator, in topological order (input first, output last)."""
        if self.root is not self:
            return self.root.graph()
        if self._output is None:
            raise FlowError("set the flow's output (fl.output = ...) before compiling it")
        order = _upstream(self._output)
        index = {id(n): k for k, n in enumerate(order)}
        nodes = [Node(None) if n is self else Node(n.op, tuple(index[id(i)] for i in n.inputs)) for n in order]
        return Graph.compact(self.schema, nodes, len(nodes) - 1)

    def compile(self, optimizations: Optimizations = ALL) -> Graph:
        """The graph after the optimiser's passes."""
        return optimize(self.graph(), optimizations)

    def deploy(
        self,
        backend: str = "local",
        *,
        optimize: Optimizations = ALL,
        store: KVStore | None = None,
        **options: Any,
    ) -> Executor:
        """Compile, optimise and start an executor: ``local`` (threads in this process; options ``workers``,
        ``gpu_workers``, ``cache_bytes``), ``ray`` (actors; options ``workers``, ``gpu_workers``, ``threads``,
        ``cache_bytes``) or ``gears`` (a recognised cascade served by the gear runtime; see
        :mod:`cascadeserve.flow.cascade`). Returns the executor; ``execute`` on the flow uses the latest one."""
        if self.root is not self:
            return self.root.deploy(backend, optimize=optimize, store=store, **options)
        if backend not in BACKENDS:
            raise FlowError(f"deploy: backend is one of {', '.join(BACKENDS)}, not {backend!r}")
        graph = self.graph()
        if backend == "gears":
            from cascadeserve.flow.cascade import GearExecutor  # deferred: planner and runtime load on demand

            executor: Executor = GearExecutor(graph, store=store, **options)
        elif backend == "ray":
            try:
                from cascadeserve.flow.on_ray import RayExecutor  # deferred: ray is an optional extra
            except ImportError as e:
                raise FlowError(f"deploy(backend='ray') needs Ray ({e}): pip install 'cascadeserve[ray]'") from None

            executor = RayExecutor(optimize_graph(graph, optimize), store, **options)
        else:
            from cascadeserve.flow.local import LocalExecutor

            executor = LocalExecutor(optimize_graph(graph, optimize), store, **options)
        if self.deployment is not None:
            self.deployment.close()
        self.deployment = executor
        return executor

    def execute(self, table: Table) -> Future[Table]:
        """Run the deployed flow on ``table``; returns a future of the output table."""
        root = self.root
        if root.deployment is None:
            raise FlowError("deploy the flow before executing it (fl.deploy())")
        return root.deployment.execute(table)

    def close(self) -> None:
        if self.root.deployment is not None:
            self.root.deployment.close()
            self.root.deployment = None

    def __repr__(self) -> str:
        what = "input" if self.op is None else self.op.label
        return f"Dataflow({what} -> {self.schema})"


def optimize_graph(graph: Graph, opts: Optimizations) -> Graph:
    return optimize(graph, opts)


def _upstream(node: Dataflow) -> list[Dataflow]:
    """``node`` and everything it depends on, in creation (hence topological) order, the root first."""
    seen: dict[int, Dataflow] = {}
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        stack.extend(n.inputs)
    seen.setdefault(id(node.root), node.root)
    return sorted(seen.values(), key=lambda n: n._seq)
