"""User functions as operators see them: their input and output types, read from annotations.

The calling convention (docs/dataflows.md states it too): a ``map`` or ``filter`` function receives a row's columns as
positional arguments in schema order. A ``map`` returns one value (one output column) or a tuple (several); its
return annotation gives the output types: ``int``, ``tuple[int, float]``, or a ``NamedTuple`` class, whose field
names become the column names. Otherwise a single output column is named after the function and columns of a
tuple ``<function>_0``, ``<function>_1``…; ``names=`` overrides either. A *batch-aware* function
(``batch=True``) receives one list per column and returns a list with one output per row; its annotations may be
written either way (``list[int]`` or ``int``).

Functions that need the schema they are applied to (a model operator, :func:`~cascadeserve.flow.uncertain`,
:func:`~cascadeserve.flow.cascade_answer`) implement :class:`Bindable` instead of annotations.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, get_args, get_origin, runtime_checkable

from cascadeserve.flow.schema import FlowTypeError, Schema, accepts, type_name

__all__ = ["Bindable", "Bound", "check_inputs", "fn_name", "input_types", "output_columns"]


@dataclass(frozen=True)
class Bound:
    """A schema-aware function bound to its input schema: ``call(columns) -> outputs`` over whole columns
    (one list per input column in, one output per row out: a tuple for several columns, or a bool for a filter)."""

    call: Callable[..., list[Any]]
    out: Schema | None  # None for a filter
    name: str
    resources: str = "cpu"
    batch: bool = True


@runtime_checkable
class Bindable(Protocol):
    """Something that knows how to apply itself to a schema (model operators, ``uncertain``, ``cascade_answer``)."""

    def bind(self, schema: Schema, op: str) -> Bound: ...


def fn_name(fn: Any) -> str:
    return str(getattr(fn, "__name__", None) or getattr(fn, "name", None) or type(fn).__name__)


def _hints(fn: Callable[..., Any], op: str) -> dict[str, Any]:
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else getattr(fn, "__call__", fn)  # noqa: B004
    try:
        return typing.get_type_hints(target)
    except Exception as e:  # a forward reference that does not resolve
        raise FlowTypeError(f"{op}: cannot read the type annotations of {fn_name(fn)}: {e}") from e


def _strip_list(t: Any, batch: bool) -> Any:
    if batch and get_origin(t) is list and get_args(t):
        return get_args(t)[0]
    return t


def input_types(fn: Callable[..., Any], op: str, batch: bool = False) -> list[tuple[str, Any]]:
    """``(parameter name, type)`` of each positional parameter; every one must be annotated."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise FlowTypeError(f"{op}: cannot inspect {fn_name(fn)} ({e}); wrap it in an annotated function") from e
    hints = _hints(fn, op)
    out: list[tuple[str, Any]] = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
            raise FlowTypeError(f"{op}: {fn_name(fn)} must take the row's columns as plain positional parameters")
        if p.name not in hints:
            raise FlowTypeError(f"{op}: parameter {p.name!r} of {fn_name(fn)} has no type annotation")
        out.append((p.name, _strip_list(hints[p.name], batch)))
    return out


def check_inputs(fn: Callable[..., Any], schema: Schema, op: str, batch: bool = False) -> None:
    """The build-time check: ``fn``'s parameters, in order, accept the columns of ``schema``."""
    params = input_types(fn, op, batch)
    if len(params) != len(schema):
        raise FlowTypeError(
            f"{op}: {fn_name(fn)} takes {len(params)} parameters ({', '.join(n for n, _ in params)}) but its input "
            f"has {len(schema)} columns {schema}"
        )
    for (pname, ptype), col in zip(params, schema, strict=True):
        if not accepts(ptype, col.type):
            raise FlowTypeError(
                f"{op}: parameter {pname!r} of {fn_name(fn)} is {type_name(ptype)}, but column {col.name!r} "
                f"feeding it is {type_name(col.type)}"
            )


def _is_namedtuple(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, tuple) and hasattr(t, "_fields")


def output_columns(
    fn: Callable[..., Any], op: str, names: Sequence[str] | None = None, batch: bool = False
) -> tuple[Schema, bool]:
    """The output schema of a ``map`` function and whether it returns a tuple (several columns)."""
    hints = _hints(fn, op)
    if "return" not in hints:
        raise FlowTypeError(f"{op}: {fn_name(fn)} has no return annotation (it gives the output column types)")
    ret = _strip_list(hints["return"], batch)
    base = fn_name(fn)
    if _is_namedtuple(ret):
        ann = typing.get_type_hints(ret)
        cols = [(f, ann.get(f, Any)) for f in ret._fields]
        multi = True
    elif get_origin(ret) is tuple and get_args(ret) and get_args(ret)[-1] is not Ellipsis:
        cols = [(f"{base}_{i}", t) for i, t in enumerate(get_args(ret))]
        multi = True
    else:
        cols = [(base, ret)]
        multi = False
    if names is not None:
        if len(names) != len(cols):
            raise FlowTypeError(f"{op}: names {list(names)} for the {len(cols)} columns {fn_name(fn)} returns")
        cols = [(n, t) for n, (_, t) in zip(names, cols, strict=True)]
    return Schema(cols), multi
