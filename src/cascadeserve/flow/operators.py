"""The operators of the paper's Table 1, each a pure function from input tables to one output table.

Every operator is built against its input schema(s), so its output schema is known (and checked) when the flow
is written; ``apply`` runs it and checks every produced value against the declared output types, naming the
operator, the column and the row id on a mismatch.

Semantics (also docs/dataflows.md's reference), on small tables and in order:

* ``Map``: one output row per input row, same row id; replaces the columns with the function's outputs.
* ``Filter``: keeps the rows for which the function returns ``True`` (it must return a ``bool``).
* ``GroupBy(column)``: marks an ungrouped table as grouped by ``column`` or ``rowID``; rows are unchanged.
* ``Agg(fn, column)``: ``count``, ``sum``, ``min``, ``max``, ``avg`` (``max``, ``min``, ``sum``, ``len`` are
  accepted for the first four). Ungrouped: one row (id 0) holding the aggregate; ``min``, ``max`` and ``avg`` of
  no rows are ``None``. Grouped: one row per group, in order of each group's first row, holding the group value
  and the aggregate; grouped by ``rowID`` the group *is* the row id (the output has the aggregate only, under
  that id), otherwise the output rows get ids ``0..g-1``. The aggregate column keeps the aggregated column's name
  (``count`` for a count).
* ``Join(key=rowID, how="inner"|"left"|"outer")``: both sides ungrouped; for every left row in order, every
  matching right row in order (left id kept); ``left`` adds unmatched left rows with ``None`` on the right,
  ``outer`` also unmatched right rows (their id and key kept) at the end. Right columns whose names clash get
  the suffix ``_right`` (then ``_right2``, …); a side that may be missing becomes ``T | None``. On a key column,
  the key appears once.
* ``Union``: the rows of every input, in input order (schemas and grouping must match).
* ``AnyOf``: one of its inputs, whole; the executor takes whichever finishes first (run in order, the first).
* ``Lookup(key or col(name))``: appends a column with the store's value under the constant key, or under each
  row's value of a column (a missing key is an error, or ``default=``).
* ``Fuse``: a chain of operators run as one task (the optimiser makes these).

``Agg``, ``Join``, ``Union`` and ``AnyOf`` live in :mod:`cascadeserve.flow.combine`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cascadeserve.flow.functions import Bindable, Bound, check_inputs, fn_name, input_types, output_columns
from cascadeserve.flow.schema import (
    Column,
    FlowError,
    FlowTypeError,
    Schema,
    accepts,
    check_value,
    optional,
    type_name,
)
from cascadeserve.flow.table import Grouping, Table, _RowId

__all__ = ["Col", "Context", "Filter", "Fuse", "GroupBy", "Lookup", "Map", "NoStore", "Operator", "col", "describe"]

RESOURCE_CLASSES = ("cpu", "gpu")


class Context(Protocol):
    """What an operator may ask of the executor running it: a value from the key-value store."""

    def get(self, key: str) -> Any:
        """The store's value under ``key``; raises ``KeyError`` when there is none."""
        ...


class NoStore:
    """The context of a flow deployed without a store: any lookup fails, naming the key."""

    def get(self, key: str) -> Any:
        raise KeyError(key)


class Operator:
    """A node's computation. ``out``/``grouping`` are the output schema and grouping, known at build time."""

    kind = "op"
    arity = 1  # number of input tables (-1: any number ≥ 1)
    row_wise = False  # output row i depends on input row origin(i) only (map, filter, lookup): batchable
    resources = "cpu"
    batch = False  # batch-aware: can take the rows of several execute calls in one invocation
    high_variance = False

    def __init__(self, out: Schema, grouping: Grouping, label: str) -> None:
        self.out = out
        self.grouping = grouping
        self.label = label

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        raise NotImplementedError

    def apply_rows(self, table: Table, ctx: Context) -> tuple[Table, list[int]]:
        """Row-wise operators: the output and, per output row, the index of the input row it came from."""
        raise NotImplementedError(f"{self.label} is not row-wise")

    def __repr__(self) -> str:
        return self.label


def _check_out(label: str, out: Schema, rid: int, values: tuple[Any, ...]) -> None:
    for c, v in zip(out, values, strict=True):
        if not check_value(v, c.type):
            raise FlowTypeError(
                f"{label}: column {c.name!r} of row {rid} is {type(v).__name__} {v!r:.60}, declared {type_name(c.type)}"
            )


def _columns(table: Table) -> list[list[Any]]:
    return [list(c) for c in zip(*table.rows_, strict=True)] if table.rows_ else [[] for _ in table.schema]


class Map(Operator):
    kind = "map"
    row_wise = True

    def __init__(
        self,
        fn: Callable[..., Any] | Bindable,
        schema: Schema,
        grouping: Grouping,
        *,
        names: Sequence[str] | None = None,
        batch: bool | None = None,
        resources: str | None = None,
        high_variance: bool = False,
    ) -> None:
        self.fn = fn
        self.high_variance = high_variance
        self.bound: Bound | None = None
        if isinstance(fn, Bindable) and not isinstance(fn, type):
            label = f"map({fn_name(fn)})"
            bound = fn.bind(schema, label)
            if bound.out is None:
                raise FlowError(f"{label}: {bound.name} is a filter predicate, not a map function")
            out = bound.out
            if names is not None:
                if len(names) != len(out):
                    raise FlowTypeError(f"{label}: names {list(names)} for the {len(out)} output columns")
                out = Schema([(n, c.type) for n, c in zip(names, out, strict=True)])
            self.bound = bound
            self.batch = bound.batch if batch is None else batch
            self.resources = resources or bound.resources
            self.multi = True
        else:
            label = f"map({fn_name(fn)})"
            self.batch = bool(batch)
            check_inputs(fn, schema, label, self.batch)
            out, self.multi = output_columns(fn, label, names, self.batch)
            self.resources = resources or "cpu"
        if self.resources not in RESOURCE_CLASSES:
            raise FlowError(f"{label}: resources must be one of {', '.join(RESOURCE_CLASSES)}, not {self.resources!r}")
        super().__init__(out, grouping, label)

    def _outputs(self, table: Table) -> list[Any]:
        if self.bound is not None:
            return self.bound.call(*_columns(table))
        fn: Callable[..., Any] = self.fn  # type: ignore[assignment]
        if self.batch:
            outs = fn(*_columns(table))
            if not isinstance(outs, (list, tuple)) or len(outs) != len(table):
                raise FlowTypeError(f"{self.label}: a batch-aware function must return one output per row")
            return list(outs)
        return [fn(*r) for r in table.rows_]

    def apply_rows(self, table: Table, ctx: Context) -> tuple[Table, list[int]]:
        outs = self._outputs(table)
        data: list[tuple[Any, ...]] = []
        width = len(self.out)
        for rid, o in zip(table.ids, outs, strict=True):
            if self.multi:
                if not isinstance(o, tuple) or len(o) != width:
                    raise FlowTypeError(f"{self.label}: row {rid} returned {o!r:.60}, not a tuple of {width} values")
                values = tuple(o)
            else:
                values = (o,)
            _check_out(self.label, self.out, rid, values)
            data.append(values)
        return Table.of(self.out, data, list(table.ids), table.grouping), list(range(len(table)))

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        return self.apply_rows(tables[0], ctx)[0]


class Filter(Operator):
    kind = "filter"
    row_wise = True

    def __init__(
        self,
        fn: Callable[..., Any] | Bindable,
        schema: Schema,
        grouping: Grouping,
        *,
        batch: bool | None = None,
        high_variance: bool = False,
    ) -> None:
        self.fn = fn
        self.high_variance = high_variance
        self.bound = None
        label = f"filter({fn_name(fn)})"
        if isinstance(fn, Bindable) and not isinstance(fn, type):
            self.bound = fn.bind(schema, label)
            if self.bound.out is not None:
                raise FlowError(f"{label}: {self.bound.name} is a map function, not a predicate")
            self.batch = self.bound.batch if batch is None else batch
        else:
            self.batch = bool(batch)
            check_inputs(fn, schema, label, self.batch)
            hints = output_columns(fn, label, None, self.batch)[0]
            if hints[0].type is not bool:
                raise FlowTypeError(f"{label}: a filter function returns bool, not {type_name(hints[0].type)}")
        super().__init__(schema, grouping, label)

    def apply_rows(self, table: Table, ctx: Context) -> tuple[Table, list[int]]:
        if self.bound is not None:
            keep = self.bound.call(*_columns(table))
        elif self.batch:
            keep = list(self.fn(*_columns(table)))  # type: ignore[operator]
        else:
            keep = [self.fn(*r) for r in table.rows_]  # type: ignore[operator]
        if len(keep) != len(table):
            raise FlowTypeError(f"{self.label}: a batch-aware predicate must return one bool per row")
        idx: list[int] = []
        for i, (rid, k) in enumerate(zip(table.ids, keep, strict=True)):
            if not check_value(k, bool):
                raise FlowTypeError(f"{self.label}: row {rid} returned {type(k).__name__} {k!r:.60}, not bool")
            if k:
                idx.append(i)
        data = [table.rows_[i] for i in idx]
        return Table.of(self.out, data, [table.ids[i] for i in idx], table.grouping), idx

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        return self.apply_rows(tables[0], ctx)[0]


class GroupBy(Operator):
    kind = "groupby"
    row_wise = True

    def __init__(self, column: str | _RowId, schema: Schema, grouping: Grouping) -> None:
        label = f"groupby({column!r})"
        if grouping is not None:
            raise FlowError(f"{label}: the table is already grouped by {grouping!r}")
        if not isinstance(column, _RowId) and not schema.has(column):
            raise FlowError(f"{label}: no column {column!r} in {schema}")
        self.column = column
        super().__init__(schema, column, label)

    def apply_rows(self, table: Table, ctx: Context) -> tuple[Table, list[int]]:
        return Table.of(self.out, table.rows_, table.ids, self.column), list(range(len(table)))

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        return self.apply_rows(tables[0], ctx)[0]


@dataclass(frozen=True)
class Col:
    """A column reference: ``lookup(col("user"))`` looks up each row's value of ``user``."""

    name: str


def col(name: str) -> Col:
    return Col(name)


class Lookup(Operator):
    kind = "lookup"
    row_wise = True

    def __init__(
        self,
        key: str | Col,
        schema: Schema,
        grouping: Grouping,
        *,
        name: str | None = None,
        type: Any = Any,
        default: Any = ...,
    ) -> None:
        label = f"lookup({key!r})"
        self.key = key
        self.col_index = None
        if isinstance(key, Col):
            self.col_index = schema.index(key.name)
            kt = schema.column(key.name).type
            if not accepts(str, kt) and not accepts(int, kt):
                raise FlowTypeError(f"{label}: key column {key.name!r} is {type_name(kt)}, not str or int")
            out_name = name or f"{key.name}_value"
        elif isinstance(key, str):
            out_name = name or key
        else:
            raise FlowError(f"{label}: the key is a str or col(name)")
        if schema.has(out_name):
            raise FlowError(f"{label}: the input already has a column {out_name!r}; pass name=")
        self.default = default
        self.value_type = optional(type) if default is None else type
        super().__init__(Schema([*schema, Column(out_name, self.value_type)]), grouping, label)

    def key_of(self, values: tuple[Any, ...]) -> str:
        return self.key if isinstance(self.key, str) else str(values[self.col_index])  # type: ignore[index]

    def keys(self, table: Table) -> list[str]:
        return [self.key_of(r) for r in table.rows_]

    def apply_rows(self, table: Table, ctx: Context) -> tuple[Table, list[int]]:
        data: list[tuple[Any, ...]] = []
        for rid, r in zip(table.ids, table.rows_, strict=True):
            k = self.key_of(r)
            try:
                v = ctx.get(k)
            except KeyError:
                if self.default is ...:
                    raise FlowError(f"{self.label}: key {k!r} (row {rid}) is not in the store") from None
                v = self.default
            values = (*r, v)
            _check_out(self.label, self.out, rid, values)
            data.append(values)
        return Table.of(self.out, data, list(table.ids), table.grouping), list(range(len(table)))

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        return self.apply_rows(tables[0], ctx)[0]


class Fuse(Operator):
    """A chain of operators run as one task: the first may take several inputs, the rest one each."""

    kind = "fuse"

    def __init__(self, ops: Sequence[Operator]) -> None:
        self.ops = tuple(ops)
        self.arity = ops[0].arity
        self.row_wise = all(o.row_wise for o in ops)
        self.batch = self.row_wise and any(o.batch for o in ops)
        self.resources = "gpu" if any(o.resources == "gpu" for o in ops) else "cpu"
        self.high_variance = any(o.high_variance for o in ops)
        super().__init__(ops[-1].out, ops[-1].grouping, "fuse(" + ", ".join(o.label for o in ops) + ")")

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        t = self.ops[0].apply(tables, ctx)
        for o in self.ops[1:]:
            t = o.apply([t], ctx)
        return t

    def apply_rows(self, table: Table, ctx: Context) -> tuple[Table, list[int]]:
        origin = list(range(len(table)))
        for o in self.ops:
            table, idx = o.apply_rows(table, ctx)
            origin = [origin[i] for i in idx]
        return table, origin


def describe(fn: Callable[..., Any]) -> str:
    """``name(param: type, ...)`` for messages."""
    try:
        params = input_types(fn, "describe")
    except FlowTypeError:
        return fn_name(fn)
    return f"{fn_name(fn)}(" + ", ".join(f"{n}: {type_name(t)}" for n, t in params) + ")"
