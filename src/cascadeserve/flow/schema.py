"""Column types and schemas: what a :class:`~cascadeserve.flow.Table` holds, and the two type checks.

A **schema** is an ordered tuple of ``(name, type)`` columns. Types are Python types (``int``, ``float``, ``str``,
``bool``, ``bytes``, ``numpy.ndarray``, any class), their optional forms (``int | None``, which a left or outer
join produces), generic aliases checked by their origin (``list[int]`` is checked as ``list``), or ``Any``.

The checks are deliberately strict, as in the Cloudflow paper, so that a pipeline cannot coerce a type silently:

* **build time** (:func:`accepts`): a function's parameter annotation must accept the column that feeds it. An
  ``int`` column does not feed a ``float`` parameter; a ``float | None`` column (the right side of a left join)
  does not feed a ``float`` parameter; ``Any`` and ``object`` accept everything.
* **run time** (:func:`check_value`): every value an operator produces must be of its declared column type;
  ``bool`` is not an ``int`` here, numpy scalars count as the Python type they mirror (``np.int64`` is an
  ``int``, ``np.float32`` a ``float``), since model code returns them routinely.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

import numpy as np

from cascadeserve.errors import CascadeServeError

__all__ = [
    "Column",
    "FlowError",
    "FlowTypeError",
    "Schema",
    "accepts",
    "check_value",
    "optional",
    "type_name",
]


class FlowError(CascadeServeError):
    """A dataflow was built, deployed or executed wrongly; the message names the operator and what is wrong."""


class FlowTypeError(FlowError, TypeError):
    """A type mismatch: between operators at build time, or between a value and its column at run time."""


def _members(t: Any) -> tuple[Any, ...]:
    """The alternatives of a union type (``int | None`` -> ``(int, NoneType)``), or ``(t,)``."""
    origin = get_origin(t)
    if origin is Union or origin is types.UnionType:
        return tuple(get_args(t))
    return (t,)


def optional(t: Any) -> Any:
    """``t | None`` (unchanged when ``t`` already admits None or is ``Any``)."""
    if t is Any or t is object or type(None) in _members(t):
        return t
    return typing.Optional[t]  # noqa: UP045 (works for every type, including generic aliases)


def type_name(t: Any) -> str:
    """A readable name for a column type (``int``, ``float | None``, ``list[int]``)."""
    members = _members(t)
    if len(members) > 1:
        return " | ".join(type_name(m) for m in members)
    if t is type(None):
        return "None"
    if t is Any:
        return "Any"
    if get_origin(t) is not None:
        return str(t).replace("typing.", "")
    return getattr(t, "__name__", str(t))


def _base(t: Any) -> Any:
    """The runtime class a type is checked against (``list[int]`` -> ``list``)."""
    origin = get_origin(t)
    return origin if origin is not None else t


def _accepts_one(param: Any, col: Any) -> bool:
    if param is Any or param is object:
        return True
    if col is Any:
        return False  # an untyped column cannot prove it fits a typed parameter
    if param == col:
        return True
    pb, cb = _base(param), _base(col)
    if not isinstance(pb, type) or not isinstance(cb, type):
        return False
    if pb is int and cb is bool:
        return False  # bool is an int to Python, not here
    if get_origin(param) is not None and get_origin(col) is not None and param != col:
        return pb is cb and get_args(param) == get_args(col)
    if get_origin(param) is not None and get_origin(col) is None:
        return False  # list[int] is not proved by a bare list column
    return issubclass(cb, pb)


def accepts(param: Any, col: Any) -> bool:
    """Does a parameter annotated ``param`` accept every value of a column typed ``col``?"""
    if param is Any or param is object:
        return True
    pm = _members(param)
    return all(any(_accepts_one(p, c) for p in pm) for c in _members(col))


def _value_is(value: Any, t: Any) -> bool:
    if t is Any or t is object:
        return True
    if t is type(None) or t is None:
        return value is None
    if t is float:
        return isinstance(value, (float, np.floating))
    if t is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if t is bool:
        return isinstance(value, (bool, np.bool_))
    base = _base(t)
    return isinstance(base, type) and isinstance(value, base)


def check_value(value: Any, t: Any) -> bool:
    """Is ``value`` of column type ``t`` (see the module docstring for the rules)?"""
    return any(_value_is(value, m) for m in _members(t))


@dataclass(frozen=True)
class Column:
    name: str
    type: Any

    def __str__(self) -> str:
        return f"{self.name}: {type_name(self.type)}"


class Schema(tuple[Column, ...]):
    """An ordered tuple of :class:`Column` with unique names."""

    __slots__ = ()

    def __new__(cls, columns: Iterable[Column | tuple[str, Any]] = ()) -> Schema:
        cols: list[Column] = []
        for c in columns:
            if isinstance(c, Column):
                cols.append(c)
                continue
            if not isinstance(c, tuple) or len(c) != 2 or not isinstance(c[0], str):
                raise FlowError(f"a schema column is a (name, type) pair, not {c!r}")
            cols.append(Column(c[0], c[1]))
        seen: set[str] = set()
        for c in cols:
            if c.name in seen:
                raise FlowError(f"schema repeats column {c.name!r}")
            seen.add(c.name)
        return super().__new__(cls, cols)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self)

    @property
    def types(self) -> tuple[Any, ...]:
        return tuple(c.type for c in self)

    def index(self, name: str, *args: Any) -> int:
        for i, c in enumerate(self):
            if c.name == name:
                return i
        raise FlowError(f"no column {name!r} in schema ({self})")

    def column(self, name: str) -> Column:
        return self[self.index(name)]

    def has(self, name: object) -> bool:
        return any(c.name == name for c in self)

    def same_as(self, other: Sequence[Column]) -> bool:
        return tuple(self) == tuple(other)

    def __str__(self) -> str:
        return "[" + ", ".join(str(c) for c in self) + "]"

    def __repr__(self) -> str:
        return f"Schema({self})"
