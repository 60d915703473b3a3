"""The operators that combine rows or tables: ``agg``, ``join``, ``union`` and ``anyof`` (the semantics are in
:mod:`cascadeserve.flow.operators`' docstring, which lists every operator of the paper's Table 1)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from cascadeserve.flow.operators import Context, Operator
from cascadeserve.flow.schema import Column, FlowError, FlowTypeError, Schema, accepts, optional, type_name
from cascadeserve.flow.table import Grouping, Table, _RowId, rowID

__all__ = ["AGGREGATES", "Agg", "AnyOf", "Join", "Union"]

AGGREGATES = ("count", "sum", "min", "max", "avg")
_BUILTIN_AGGS: dict[Any, str] = {max: "max", min: "min", sum: "sum", len: "count"}
_NUMERIC = (int, float)


def _aggregate(fn: str, values: list[Any]) -> Any:
    if fn == "count":
        return len(values)
    if fn == "sum":
        return sum(values) if values else 0
    if not values:
        return None
    if fn == "min":
        return min(values)
    if fn == "max":
        return max(values)
    return math.fsum(values) / len(values)


class Agg(Operator):
    kind = "agg"

    def __init__(self, fn: str | Callable[..., Any], column: str | None, schema: Schema, grouping: Grouping) -> None:
        name = _BUILTIN_AGGS.get(fn, fn) if not isinstance(fn, str) else fn
        name = {"mean": "avg", "len": "count"}.get(str(name), str(name))
        label = f"agg({name}, {column!r})"
        if name not in AGGREGATES:
            raise FlowError(f"{label}: the aggregate is one of {', '.join(AGGREGATES)} (or max, min, sum, len)")
        if column is None and name != "count":
            raise FlowError(f"{label}: name the column to aggregate")
        ctype: Any = int
        if column is not None:
            ctype = schema.column(column).type
            if name in ("sum", "avg") and not any(accepts(t, ctype) for t in _NUMERIC):
                raise FlowTypeError(f"{label}: column {column!r} is {type_name(ctype)}, not a number")
        self.fn, self.column = name, column
        out_type = {"count": int, "avg": float}.get(name, ctype)
        if grouping is None and name in ("min", "max", "avg"):
            out_type = optional(out_type)  # of no rows: None
        out_name = "count" if name == "count" else str(column)
        cols: list[Column] = []
        if grouping is not None and not isinstance(grouping, _RowId):
            cols.append(schema.column(grouping))
            if out_name == grouping:
                out_name = f"{name}_{out_name}"
        cols.append(Column(out_name, out_type))
        self.group_index = None if grouping is None or isinstance(grouping, _RowId) else schema.index(grouping)
        self.in_grouping = grouping
        self.col_index = None if column is None else schema.index(column)
        super().__init__(Schema(cols), None, label)

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        t = tables[0]
        k = self.col_index
        vals = [r[k] if k is not None else None for r in t.rows_]
        if t.grouping is None:
            return Table.of(self.out, [(_aggregate(self.fn, vals),)], [0])
        groups: dict[Any, list[Any]] = {}
        for i, r in enumerate(t.rows_):
            g = t.ids[i] if isinstance(t.grouping, _RowId) else r[t.schema.index(t.grouping)]
            groups.setdefault(g, []).append(vals[i])
        if isinstance(t.grouping, _RowId):
            return Table.of(self.out, [(_aggregate(self.fn, v),) for v in groups.values()], list(groups))
        data: list[tuple[Any, ...]] = [(g, _aggregate(self.fn, v)) for g, v in groups.items()]
        return Table.of(self.out, data, list(range(len(data))))


def _dedupe(name: str, taken: set[str], suffix: str) -> str:
    if name not in taken:
        return name
    k = 1
    while True:
        cand = f"{name}{suffix}" if k == 1 else f"{name}{suffix}{k}"
        if cand not in taken:
            return cand
        k += 1


class Join(Operator):
    kind = "join"
    arity = 2

    def __init__(
        self,
        left: tuple[Schema, Grouping],
        right: tuple[Schema, Grouping],
        key: str | _RowId = rowID,
        how: str = "inner",
        suffix: str = "_right",
    ) -> None:
        label = f"join(key={key!r}, how={how!r})"
        if how not in ("inner", "left", "outer"):
            raise FlowError(f"{label}: how is 'inner', 'left' or 'outer'")
        (ls, lg), (rs, rg) = left, right
        if lg is not None or rg is not None:
            raise FlowError(f"{label}: both sides must be ungrouped (aggregate a grouped table first)")
        self.key, self.how = key, how
        self.lk = self.rk = None
        if not isinstance(key, _RowId):
            if not ls.has(key) or not rs.has(key):
                raise FlowError(f"{label}: key column {key!r} must be on both sides ({ls} and {rs})")
            self.lk, self.rk = ls.index(key), rs.index(key)
            lt, rt = ls.column(key).type, rs.column(key).type
            if not (accepts(lt, rt) or accepts(rt, lt)):
                raise FlowTypeError(
                    f"{label}: key {key!r} is {type_name(lt)} on the left, {type_name(rt)} on the right"
                )
        lopt, ropt = how == "outer", how in ("left", "outer")
        cols = [Column(c.name, optional(c.type) if lopt and i != self.lk else c.type) for i, c in enumerate(ls)]
        taken = set(ls.names)
        self.right_keep = [i for i in range(len(rs)) if i != self.rk]
        for i in self.right_keep:
            c = rs[i]
            name = _dedupe(c.name, taken, suffix)
            taken.add(name)
            cols.append(Column(name, optional(c.type) if ropt else c.type))
        self.n_left, self.n_right = len(ls), len(rs)
        super().__init__(Schema(cols), None, label)

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        lt, rt = tables
        index: dict[Any, list[int]] = {}
        for j, r in enumerate(rt.rows_):
            index.setdefault(rt.ids[j] if self.rk is None else r[self.rk], []).append(j)
        data: list[tuple[Any, ...]] = []
        ids: list[int] = []
        matched: set[int] = set()
        none_right = (None,) * len(self.right_keep)
        for i, lrow in enumerate(lt.rows_):
            k = lt.ids[i] if self.lk is None else lrow[self.lk]
            js = index.get(k, [])
            for j in js:
                matched.add(j)
                data.append(lrow + tuple(rt.rows_[j][c] for c in self.right_keep))
                ids.append(lt.ids[i])
            if not js and self.how != "inner":
                data.append(lrow + none_right)
                ids.append(lt.ids[i])
        if self.how == "outer":
            for j, rrow in enumerate(rt.rows_):
                if j in matched:
                    continue
                left = [None] * self.n_left
                if self.lk is not None and self.rk is not None:
                    left[self.lk] = rrow[self.rk]
                data.append(tuple(left) + tuple(rrow[c] for c in self.right_keep))
                ids.append(rt.ids[j])
        return Table.of(self.out, data, ids)


def _check_same(label: str, inputs: Sequence[tuple[Schema, Grouping]]) -> None:
    s0, g0 = inputs[0]
    for s, g in inputs[1:]:
        if not s0.same_as(s):
            raise FlowTypeError(f"{label}: schemas differ: {s0} and {s}")
        if g != g0:
            raise FlowError(f"{label}: groupings differ: {g0!r} and {g!r}")


class Union(Operator):
    kind = "union"
    arity = -1

    def __init__(self, inputs: Sequence[tuple[Schema, Grouping]]) -> None:
        _check_same("union", inputs)
        super().__init__(inputs[0][0], inputs[0][1], f"union({len(inputs)})")

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        data = [r for t in tables for r in t.rows_]
        ids = [i for t in tables for i in t.ids]
        return Table.of(self.out, data, ids, self.grouping)


class AnyOf(Operator):
    kind = "anyof"
    arity = -1

    def __init__(self, inputs: Sequence[tuple[Schema, Grouping]]) -> None:
        _check_same("anyof", inputs)
        super().__init__(inputs[0][0], inputs[0][1], f"anyof({len(inputs)})")

    def apply(self, tables: Sequence[Table], ctx: Context) -> Table:
        return tables[0]  # the executor hands over the table of whichever input finished first
