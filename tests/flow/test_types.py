"""Both type checks, with their messages: at build time (a function against the schema feeding it) and at run
time (each produced value against its declared column type, naming the operator, the column and the row id)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from cascadeserve.flow import NONE, Dataflow, FlowError, FlowTypeError, Table
from cascadeserve.flow.schema import accepts, check_value

S = [("name", str), ("n", int)]


def test_build_time_parameter_against_column() -> None:
    def half(name: str, n: float) -> float:
        return n / 2

    fl = Dataflow(S)
    with pytest.raises(
        FlowTypeError, match=r"map\(half\): parameter 'n' of half is float, but column 'n' feeding it is int"
    ):
        fl.map(half)


def test_build_time_arity_and_missing_annotations() -> None:
    def one(name: str) -> str:
        return name

    def bare(name, n):  # type: ignore[no-untyped-def]
        return n

    def no_return(name: str, n: int):  # type: ignore[no-untyped-def]
        return n

    fl = Dataflow(S)
    with pytest.raises(FlowTypeError, match=r"map\(one\): one takes 1 parameters \(name\) but its input has 2 columns"):
        fl.map(one)
    with pytest.raises(FlowTypeError, match="parameter 'name' of bare has no type annotation"):
        fl.map(bare)
    with pytest.raises(FlowTypeError, match="no_return has no return annotation"):
        fl.map(no_return)


def test_build_time_filter_must_return_bool_and_left_join_is_optional() -> None:
    def score(name: str, n: int) -> int:
        return n

    fl = Dataflow(S)
    with pytest.raises(FlowTypeError, match=r"filter\(score\): a filter function returns bool, not int"):
        fl.filter(score)

    def total(name: str, n: int, name_right: str, n_right: int) -> int:
        return n + n_right

    def big(name: str, n: int) -> bool:
        return n > 1

    joined = fl.join(fl.filter(big), how="left")
    with pytest.raises(
        FlowTypeError,
        match=re.escape("parameter 'name_right' of total is str, but column 'name_right' feeding it is str | None"),
    ):
        joined.map(total)

    def total_opt(name: str, n: int, name_right: str | None, n_right: int | None) -> int:
        return n + (n_right or 0)

    fl.output = joined.map(total_opt)
    out = fl.deploy(optimize=NONE).execute(Table(S, [("a", 1), ("b", 2)])).result()
    assert [r[0] for r in out] == [1, 4]
    fl.close()


def test_run_time_value_against_declared_type() -> None:
    def liar(name: str, n: int) -> int:
        return "x" if n == 2 else n  # type: ignore[return-value]

    fl = Dataflow(S)
    fl.output = fl.map(liar)
    ex = fl.deploy()
    fut = ex.execute(Table(S, [("a", 1), ("b", 2)]))
    with pytest.raises(FlowTypeError, match=r"map\(liar\): column 'liar' of row 1 is str 'x', declared int"):
        fut.result(timeout=30)
    # the next call is not affected
    assert [r[0] for r in ex.execute(Table(S, [("a", 5)])).result(timeout=30)] == [5]
    ex.close()


def test_run_time_filter_must_return_a_bool_and_tuples_must_fit() -> None:
    def maybe(name: str, n: int) -> bool:
        return n  # type: ignore[return-value]

    def pair(name: str, n: int) -> tuple[str, int]:
        return (name,)  # type: ignore[return-value]

    fl = Dataflow(S)
    fl.output = fl.filter(maybe)
    with pytest.raises(FlowTypeError, match=r"filter\(maybe\): row 0 returned int 1, not bool"):
        fl.deploy().execute(Table(S, [("a", 1)])).result(timeout=30)
    fl.close()
    fl = Dataflow(S)
    fl.output = fl.map(pair)
    with pytest.raises(FlowTypeError, match=r"map\(pair\): row 0 returned \('a',\), not a tuple of 2 values"):
        fl.deploy().execute(Table(S, [("a", 1)])).result(timeout=30)
    fl.close()


def test_tables_check_their_rows_and_execute_checks_the_schema() -> None:
    with pytest.raises(FlowTypeError, match=r"table: column 'n' of row 1 holds float 2.5, not int"):
        Table(S, [("a", 1), ("b", 2.5)])
    with pytest.raises(FlowError, match="row 0 has 1 values for the 2 columns"):
        Table(S, [("a",)])
    fl = Dataflow(S)
    fl.output = fl.groupby("n")
    ex = fl.deploy()
    with pytest.raises(
        FlowTypeError, match=r"execute: the flow takes columns \[name: str, n: int\], the table has \[n: int\]"
    ):
        ex.execute(Table([("n", int)], [1]))
    ex.close()


@pytest.mark.parametrize(
    ("param", "column", "ok"),
    [
        (int, int, True),
        (float, int, False),
        (int, bool, False),
        (float | None, float, True),
        (float, float | None, False),
        (Any, float | None, True),
        (object, str, True),
        (np.ndarray, np.ndarray, True),
        (list[int], list[int], True),
        (list[int], list[str], False),
        (str, Any, False),
    ],
)
def test_accepts(param: Any, column: Any, ok: bool) -> None:
    assert accepts(param, column) is ok


def test_check_value() -> None:
    assert check_value(np.int64(3), int) and not check_value(True, int) and check_value(np.float32(1), float)
    assert not check_value(1, float) and check_value(None, int | None) and not check_value(None, int)
    assert check_value([1], list[int]) and check_value(np.zeros(2), np.ndarray)
