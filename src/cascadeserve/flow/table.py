"""Tables: small in-memory relational tables of request rows, each row with an automatic row id.

``Table(schema, rows)`` takes a schema of ``(name, type)`` pairs and rows as tuples (or bare values when the
schema has one column); every row gets a row id, ``0..n-1`` in order, that stays with it through a dataflow
(:data:`rowID` names it, as in the paper's ``groupby(rowID)``). A table may be *grouped* by a column (or by
``rowID``): ``groupby`` marks it, ``agg`` consumes the grouping. Values are checked against the schema when a
table is built, and the error names the column and the row.

A table iterates its :class:`Row` objects; a row indexes by position (``row[0]``) and by column name
(``row["conf"]``), and has ``.id``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from cascadeserve.flow.schema import Column, FlowError, FlowTypeError, Schema, check_value, type_name

__all__ = ["ROW_ID", "Grouping", "Row", "Table", "rowID", "values_equal"]


class _RowId:
    """The row id as a column reference: ``groupby(rowID)``, ``join(other)`` (row id by default)."""

    _instance: _RowId | None = None

    def __new__(cls) -> _RowId:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "rowID"

    def __reduce__(self) -> str:
        return "rowID"  # pickles (to Ray workers) as the module-level singleton


rowID = _RowId()  # the paper spells it so
ROW_ID = rowID

Grouping = str | _RowId | None


def values_equal(a: Any, b: Any) -> bool:
    """Equality that treats numpy arrays by content (tables compare row values with it)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # NaN == NaN for result comparison
    return bool(a == b)


class Row:
    """One row: values in schema order, the row id, and the schema for lookups by name."""

    __slots__ = ("id", "schema", "values")

    def __init__(self, schema: Schema, values: tuple[Any, ...], row_id: int) -> None:
        self.schema = schema
        self.values = values
        self.id = row_id

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self.values[self.schema.index(key)]
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.schema.names, self.values, strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row):
            return NotImplemented
        return (
            self.id == other.id
            and len(self.values) == len(other.values)
            and all(values_equal(a, b) for a, b in zip(self.values, other.values, strict=True))
        )

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(self.schema.names, self.values, strict=True))
        return f"Row(id={self.id}, {inner})"


class Table:
    """Rows under one schema, optionally grouped by a column or by ``rowID``."""

    __slots__ = ("grouping", "ids", "rows_", "schema")

    def __init__(
        self,
        schema: Sequence[Column | tuple[str, Any]] | Schema,
        rows: Iterable[Any] = (),
        grouping: Grouping = None,
        *,
        ids: Sequence[int] | None = None,
        check: bool = True,
    ) -> None:
        self.schema = schema if isinstance(schema, Schema) else Schema(schema)
        width = len(self.schema)
        data: list[tuple[Any, ...]] = []
        for r in rows:
            if isinstance(r, Row):
                r = r.values
            if width == 1 and not (isinstance(r, tuple) and len(r) == 1):
                r = (r,)  # a bare value for a one-column schema
            if not isinstance(r, tuple):
                raise FlowError(f"a row of a {width}-column table is a tuple, not {type(r).__name__}: {r!r}")
            if len(r) != width:
                raise FlowError(f"row {len(data)} has {len(r)} values for the {width} columns of {self.schema}")
            data.append(r)
        if ids is None:
            ids = range(len(data))
        elif len(ids) != len(data):
            raise FlowError(f"{len(ids)} row ids for {len(data)} rows")
        if grouping is not None and not isinstance(grouping, _RowId) and not self.schema.has(grouping):
            raise FlowError(f"cannot group by {grouping!r}: no such column in {self.schema}")
        self.grouping: Grouping = grouping
        self.rows_ = data
        self.ids = list(ids)
        if check:
            for rid, values in zip(self.ids, data, strict=True):
                for col, v in zip(self.schema, values, strict=True):
                    if not check_value(v, col.type):
                        raise FlowTypeError(
                            f"table: column {col.name!r} of row {rid} holds {type(v).__name__} {v!r:.60}, "
                            f"not {type_name(col.type)}"
                        )

    @classmethod
    def of(cls, schema: Schema, data: list[tuple[Any, ...]], ids: list[int], grouping: Grouping = None) -> Table:
        """A table from checked parts (operators use it: their own checks already ran)."""
        return cls(schema, data, grouping, ids=ids, check=False)

    @property
    def rows(self) -> list[Row]:
        return [Row(self.schema, v, i) for v, i in zip(self.rows_, self.ids, strict=True)]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows_)

    def __getitem__(self, i: int) -> Row:
        return Row(self.schema, self.rows_[i], self.ids[i])

    def column(self, name: str) -> list[Any]:
        k = self.schema.index(name)
        return [r[k] for r in self.rows_]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.rows]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Table):
            return NotImplemented
        return (
            self.schema.same_as(other.schema)
            and self.grouping == other.grouping
            and self.ids == other.ids
            and len(self.rows_) == len(other.rows_)
            and all(
                values_equal(a, b)
                for ra, rb in zip(self.rows_, other.rows_, strict=True)
                for a, b in zip(ra, rb, strict=True)
            )
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        g = "" if self.grouping is None else f" grouped by {self.grouping!r}"
        body = "; ".join(f"{i}: {r!r}" for i, r in zip(self.ids[:5], self.rows_[:5], strict=False))
        more = f"; … {len(self) - 5} more" if len(self) > 5 else ""
        return f"Table({self.schema}{g}, {len(self)} rows: {body}{more})"
