"""The optimiser: what each pass does to a graph, and (hypothesis) that it never changes an answer."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cascadeserve.flow import ALL, NONE, Dataflow, MemoryStore, Optimizations, Table, col
from cascadeserve.flow.combine import AnyOf
from cascadeserve.flow.operators import Fuse

S = [("k", int), ("v", int)]


class KV(NamedTuple):
    k: int
    v: int


def inc(k: int, v: int) -> KV:
    return KV(k, v + 1)


def swap(k: int, v: int) -> KV:
    return KV(v % 7, k)


def scale(k: int, v: int) -> KV:
    return KV(k, 3 * v - k)


def batch_add(ks: list[int], vs: list[int]) -> list[KV]:
    return [KV(k, v + k) for k, v in zip(ks, vs, strict=True)]


def even(k: int, v: int) -> bool:
    return v % 2 == 0


def small(k: int, v: int) -> bool:
    return k < 4


def proj(k: int, v: int, k_right: int | None, v_right: int | None) -> KV:
    return KV(k, v + (v_right if v_right is not None else 1000))


def with_feature(k: int, v: int, k_value: int) -> KV:
    return KV(k, v * k_value)


MAPS = [inc, swap, scale]
FILTERS = [even, small]
STORE = MemoryStore({str(i): i + 2 for i in range(8)})


def build(program: list[tuple[int, int, int]]) -> Dataflow:
    fl = Dataflow(S)
    nodes = [fl]
    for kind, a, b in program:
        x = nodes[a % len(nodes)]
        y = nodes[b % len(nodes)]
        if kind == 0:
            nodes.append(x.map(MAPS[b % len(MAPS)]))
        elif kind == 1:
            nodes.append(x.filter(FILTERS[b % len(FILTERS)]))
        elif kind == 2:
            nodes.append(x.union(y))
        elif kind == 3:
            nodes.append(x.join(y, how=("inner", "left")[b % 2]).map(proj))
        elif kind == 4:
            nodes.append(x.map(MAPS[b % len(MAPS)], high_variance=True))
        elif kind == 5:
            nodes.append(x.map(batch_add, batch=True))
        elif kind == 6:
            nodes.append(x.lookup(col("k"), type=int, default=1).map(with_feature))
        elif kind == 7:
            nodes.append(x.anyof(x))
    last = nodes[-1]
    fl.output = (
        last.groupby("k").agg("sum", "v") if program and program[-1][0] == 0 and program[-1][1] % 3 == 0 else last
    )
    return fl


programs = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=9)
tables = st.lists(st.tuples(st.integers(0, 9), st.integers(-20, 20)), min_size=0, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs, st.lists(tables, min_size=1, max_size=4))
def test_the_optimiser_never_changes_an_answer(
    program: list[tuple[int, int, int]], inputs: list[list[tuple[int, int]]]
) -> None:
    fl = build(program)
    plain = fl.deploy(optimize=NONE, store=STORE)
    want = [plain.execute(Table(S, rows)).result(timeout=30) for rows in inputs]
    plain.close()
    opt = fl.deploy(optimize=Optimizations(replicas=2, max_batch=3), store=STORE, workers=3)
    got = [f.result(timeout=30) for f in [opt.execute(Table(S, rows)) for rows in inputs]]  # concurrent calls
    opt.close()
    assert got == want


def test_fusion_makes_one_task_of_a_chain_but_not_across_resources() -> None:
    fl = Dataflow(S)
    fl.output = fl.map(inc).filter(even).map(swap).map(scale, resources="gpu").map(inc, resources="gpu")
    g = fl.compile(ALL)
    assert [type(n.op).__name__ for n in g.nodes] == ["NoneType", "Fuse", "Fuse"]
    assert g.nodes[2].op is not None and g.nodes[2].op.resources == "gpu"
    g = fl.compile(Optimizations(fuse_across_resources=True))
    assert len(g.nodes) == 2 and isinstance(g.nodes[1].op, Fuse) and len(g.nodes[1].op.ops) == 5
    assert len(fl.compile(NONE).nodes) == 6


def test_competitive_execution_adds_replicas_under_an_anyof() -> None:
    fl = Dataflow(S)
    fl.output = fl.map(inc).map(swap, high_variance=True).map(scale)
    g = fl.compile(Optimizations(fusion=False, replicas=3))
    labels = [n.label for n in g.nodes]
    assert labels == ["input", "map(inc)", "map(swap)", "map(swap)", "map(swap)", "anyof(3)", "map(scale)"]
    assert g.nodes[5].inputs == (2, 3, 4) and isinstance(g.nodes[5].op, AnyOf)
    fused = fl.compile(Optimizations(replicas=3))  # fusion on: the anyof stays its own task, waiting for any input
    assert [n.label for n in fused.nodes][-2:] == ["anyof(3)", "map(scale)"] and fused.nodes[-2].any


def test_competitive_execution_takes_the_first_replica_to_answer() -> None:
    calls: list[float] = []
    lock = threading.Lock()

    def slow_first(k: int, v: int) -> KV:
        with lock:
            calls.append(time.monotonic())
            first = len(calls) == 1
        if first:
            time.sleep(4.0)  # far longer than a busy machine delays the two fast replicas
        return KV(k, v)

    fl = Dataflow(S)
    fl.output = fl.map(slow_first, high_variance=True)
    ex = fl.deploy(optimize=Optimizations(replicas=3))
    t0 = time.monotonic()
    out = ex.execute(Table(S, [(1, 2)])).result(timeout=30)
    took = time.monotonic() - t0
    ex.close()
    assert [tuple(r) for r in out] == [(1, 2)] and len(calls) >= 2  # the third may start later
    assert took < 3.5  # the two fast replicas answer; the slow one (4 s) is not waited for


def test_batching_runs_queued_calls_in_one_invocation() -> None:
    sizes: list[int] = []
    gate = threading.Event()

    def model(ks: list[int], vs: list[int]) -> list[KV]:
        gate.wait(10)
        sizes.append(len(ks))
        return [KV(k, v * 2) for k, v in zip(ks, vs, strict=True)]

    fl = Dataflow(S)
    fl.output = fl.map(model, batch=True)
    ex = fl.deploy(optimize=Optimizations(max_batch=4), workers=1)
    futs = [ex.execute(Table(S, [(i, i), (i, i + 1)])) for i in range(9)]
    time.sleep(0.2)
    gate.set()
    outs = [f.result(timeout=30) for f in futs]
    ex.close()
    assert [[tuple(r) for r in o] for o in outs] == [[(i, 2 * i), (i, 2 * i + 2)] for i in range(9)]
    # the first call runs alone (the worker was free); the next 8 queued and went 4 calls (8 rows) at a time
    assert sizes == [2, 8, 8]
    assert ex.batchers[1].sizes == [1, 4, 4]  # type: ignore[attr-defined]


def test_locality_fuses_the_lookup_and_dispatches_to_the_worker_that_has_the_key() -> None:
    fl = Dataflow(S)
    fl.output = fl.map(inc).lookup(col("k"), type=int).map(with_feature).map(swap)
    g = fl.compile(ALL)
    assert [n.label for n in g.nodes][1] == "map(inc)"
    assert g.nodes[2].dispatch is not None and isinstance(g.nodes[2].op, Fuse)
    assert [o.label for o in g.nodes[2].op.ops] == ["lookup(Col(name='k'))", "map(with_feature)", "map(swap)"]
    ex = fl.deploy(store=STORE, workers=4)
    for _ in range(3):
        for key in range(4):
            ex.execute(Table(S, [(key, 1)])).result(timeout=30)
    stats = ex.cache_stats()  # type: ignore[attr-defined]
    ex.close()
    assert sum(m for _, m in stats.values()) == 4  # each key fetched once, then always served from a cache
    assert sum(h for h, _ in stats.values()) == 8
