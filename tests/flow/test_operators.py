"""Every operator's semantics on small tables: exact outputs, row ids, grouping, join kinds, aggregates."""

from __future__ import annotations

from typing import Any

import pytest

from cascadeserve.flow import NONE, Dataflow, FlowError, MemoryStore, Table, col, rowID

S = [("name", str), ("n", int)]
ROWS = [("a", 1), ("b", 2), ("a", 3), ("c", 4)]


def run(fl: Dataflow, rows: list[Any] = ROWS, schema: list[Any] = S, **kw: Any) -> Table:
    ex = fl.deploy(optimize=NONE, **kw)
    try:
        return ex.execute(Table(schema, rows)).result(timeout=30)
    finally:
        ex.close()


def rows(t: Table) -> list[tuple[int, tuple[Any, ...]]]:
    return [(r.id, tuple(r)) for r in t]


def double(name: str, n: int) -> tuple[str, int]:
    return name, 2 * n


def test_map_replaces_columns_and_keeps_ids() -> None:
    fl = Dataflow(S)
    fl.output = fl.map(double, names=["name", "twice"])
    out = run(fl)
    assert out.schema.names == ("name", "twice")
    assert rows(out) == [(0, ("a", 2)), (1, ("b", 4)), (2, ("a", 6)), (3, ("c", 8))]
    assert out[1]["twice"] == 4 and out[1][0] == "b"


def test_map_single_output_is_named_after_the_function() -> None:
    def length(name: str, n: int) -> int:
        return len(name) + n

    fl = Dataflow(S)
    fl.output = fl.map(length)
    out = run(fl)
    assert out.schema.names == ("length",) and [r[0] for r in out] == [2, 3, 4, 5]


def test_batch_aware_map_gets_columns_as_lists() -> None:
    seen: list[list[int]] = []

    def total(names: list[str], ns: list[int]) -> list[int]:
        seen.append(ns)
        return [n + 10 for n in ns]

    fl = Dataflow(S)
    fl.output = fl.map(total, batch=True)
    out = run(fl)
    assert [r[0] for r in out] == [11, 12, 13, 14] and seen == [[1, 2, 3, 4]]


def test_filter_keeps_true_rows_with_their_ids() -> None:
    def odd(name: str, n: int) -> bool:
        return n % 2 == 1

    fl = Dataflow(S)
    fl.output = fl.filter(odd)
    assert rows(run(fl)) == [(0, ("a", 1)), (2, ("a", 3))]


def test_agg_ungrouped_is_one_row() -> None:
    for fn, want in [("count", 4), ("sum", 10), ("min", 1), ("max", 4), ("avg", 2.5), (max, 4), (len, 4)]:
        fl = Dataflow(S)
        fl.output = fl.agg(fn, None if fn in ("count", len) else "n")
        out = run(fl)
        assert rows(out) == [(0, (want,))], fn


def test_agg_of_no_rows() -> None:
    def none(name: str, n: int) -> bool:
        return False

    for fn, want in [("count", 0), ("sum", 0), ("min", None), ("max", None), ("avg", None)]:
        fl = Dataflow(S)
        fl.output = fl.filter(none).agg(fn, None if fn == "count" else "n")
        assert rows(run(fl)) == [(0, (want,))]


def test_groupby_agg_per_group_in_first_appearance_order() -> None:
    fl = Dataflow(S)
    fl.output = fl.groupby("name").agg("sum", "n")
    out = run(fl)
    assert out.schema.names == ("name", "n") and out.grouping is None
    assert rows(out) == [(0, ("a", 4)), (1, ("b", 2)), (2, ("c", 4))]
    fl2 = Dataflow(S)
    fl2.output = fl2.groupby("name").agg("count")
    assert rows(run(fl2)) == [(0, ("a", 2)), (1, ("b", 1)), (2, ("c", 1))]
    fl3 = Dataflow(S)
    fl3.output = fl3.groupby("name").agg("avg", "n")
    assert rows(run(fl3)) == [(0, ("a", 2.0)), (1, ("b", 2.0)), (2, ("c", 4.0))]


def test_groupby_marks_the_table() -> None:
    fl = Dataflow(S)
    fl.output = fl.groupby("name")
    out = run(fl)
    assert out.grouping == "name" and rows(out) == [(i, r) for i, r in enumerate(ROWS)]


def test_groupby_row_id_after_union_keeps_the_row_ids() -> None:
    def plus(name: str, n: int) -> tuple[str, int]:
        return name, n + 100

    fl = Dataflow(S)
    fl.output = fl.union(fl.map(plus, names=["name", "n"])).groupby(rowID).agg("max", "n")
    assert rows(run(fl)) == [(0, (101,)), (1, (102,)), (2, (103,)), (3, (104,))]


def test_union_concatenates_in_input_order() -> None:
    def first2(name: str, n: int) -> bool:
        return n <= 2

    fl = Dataflow(S)
    fl.output = fl.filter(first2).union(fl, fl.filter(first2))
    out = run(fl)
    assert [r.id for r in out] == [0, 1, 0, 1, 2, 3, 0, 1]


def _scores(name: str, n: int) -> tuple[str, float]:
    return name, n / 10


def _big(name: str, n: int) -> bool:
    return n >= 3


def test_join_on_row_id_inner_left_outer() -> None:
    fl = Dataflow(S)
    fl.output = fl.filter(_big).join(fl.map(_scores, names=["who", "score"]))
    assert rows(run(fl)) == [(2, ("a", 3, "a", 0.3)), (3, ("c", 4, "c", 0.4))]

    fl = Dataflow(S)
    left = fl.map(_scores, names=["who", "score"]).join(fl.filter(_big), how="left")
    fl.output = left
    out = run(fl)
    assert out.schema.names == ("who", "score", "name", "n")
    assert [str(c) for c in out.schema][2:] == ["name: str | None", "n: int | None"]
    assert rows(out) == [
        (0, ("a", 0.1, None, None)),
        (1, ("b", 0.2, None, None)),
        (2, ("a", 0.3, "a", 3)),
        (3, ("c", 0.4, "c", 4)),
    ]

    def small(name: str, n: int) -> bool:
        return n <= 2

    fl = Dataflow(S)
    fl.output = fl.filter(small).join(fl.filter(_big), how="outer")
    out = run(fl)
    assert out.schema.names == ("name", "n", "name_right", "n_right")
    assert rows(out) == [
        (0, ("a", 1, None, None)),
        (1, ("b", 2, None, None)),
        (2, (None, None, "a", 3)),
        (3, (None, None, "c", 4)),
    ]


def test_join_on_a_key_column_matches_every_pair() -> None:
    def tag(name: str, n: int) -> tuple[str, str]:
        return name, f"t{n}"

    fl = Dataflow(S)
    fl.output = fl.join(fl.map(tag, names=["name", "tag"]).filter(lambda_free_a), key="name")
    out = run(fl)
    assert out.schema.names == ("name", "n", "tag")
    assert rows(out) == [(0, ("a", 1, "t1")), (0, ("a", 1, "t3")), (2, ("a", 3, "t1")), (2, ("a", 3, "t3"))]

    fl = Dataflow(S)
    fl.output = fl.join(fl.map(tag, names=["name", "tag"]).filter(lambda_free_a), key="name", how="outer")
    out = run(fl)
    assert [r[2] for r in out] == ["t1", "t3", None, "t1", "t3", None]


def lambda_free_a(name: str, tag: str) -> bool:
    return name == "a"


def test_anyof_passes_one_whole_input() -> None:
    fl = Dataflow(S)
    fl.output = fl.filter(_big).anyof(fl.filter(_big))
    assert rows(run(fl)) == [(2, ("a", 3)), (3, ("c", 4))]


def test_lookup_constant_and_column_reference() -> None:
    store = MemoryStore({"bias": 100, "a": "alpha", "b": "beta"})
    fl = Dataflow(S)
    fl.output = fl.lookup("bias", type=int)
    assert rows(run(fl, ROWS[:2], store=store)) == [(0, ("a", 1, 100)), (1, ("b", 2, 100))]

    fl = Dataflow(S)
    fl.output = fl.lookup(col("name"), type=str, default=None)
    out = run(fl, store=store)
    assert out.schema.names == ("name", "n", "name_value")
    assert [r[2] for r in out] == ["alpha", "beta", "alpha", None]

    fl = Dataflow(S)
    fl.output = fl.lookup(col("name"), type=str)
    with pytest.raises(FlowError, match=r"lookup\(Col\(name='name'\)\): key 'c' \(row 3\) is not in the store"):
        run(fl, store=store)


def test_extend_appends_a_flow() -> None:
    pre = Dataflow(S)
    pre.output = pre.filter(_big)
    post = Dataflow(S)
    post.output = post.map(double, names=["name", "n"])
    fl = Dataflow(S)
    fl.output = pre_then(fl, pre).extend(post)
    assert rows(run(fl)) == [(2, ("a", 6)), (3, ("c", 8))]


def pre_then(fl: Dataflow, pre: Dataflow) -> Dataflow:
    return fl.extend(pre)


def test_output_must_derive_from_the_same_flow() -> None:
    a, b = Dataflow(S), Dataflow(S)
    with pytest.raises(FlowError, match="must derive from this flow"):
        a.output = b.filter(_big)
    with pytest.raises(FlowError, match="same flow"):
        a.union(b)
    with pytest.raises(FlowError, match="deploy the flow"):
        a.execute(Table(S, ROWS))
    with pytest.raises(FlowError, match="set the flow's output"):
        a.deploy()


def test_join_needs_ungrouped_sides_and_union_same_schema() -> None:
    fl = Dataflow(S)
    with pytest.raises(FlowError, match="ungrouped"):
        fl.groupby("name").join(fl)
    with pytest.raises(FlowError, match="schemas differ"):
        fl.union(fl.map(_scores))
    with pytest.raises(FlowError, match="already grouped"):
        fl.groupby("name").groupby("n")
