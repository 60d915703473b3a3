"""The flow on a real local Ray instance: the same answers as the embedded executor, with every optimisation on
(fused chains, competing replicas, calls batched across executions, lookups dispatched by locality, Redis)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from cascadeserve.flow import NONE, Dataflow, Optimizations, RedisStore, Table, col, rowID

pytestmark = pytest.mark.usefixtures("ray_session")

S = [("user", str), ("x", int)]


class Out(NamedTuple):
    user: str
    x: int


def clean(user: str, x: int) -> Out:
    return Out(user.strip().lower(), x)


def score(users: list[str], xs: list[int]) -> list[Out]:
    return [Out(u, x * 10) for u, x in zip(users, xs, strict=True)]


def feature(user: str, x: int, user_value: int) -> Out:
    return Out(user, x + user_value)


def noisy(user: str, x: int) -> Out:
    return Out(user, x + 1)


def test_a_flow_runs_on_ray_with_the_same_answers(redis_store: RedisStore) -> None:
    for u, v in {"ann": 1, "bob": 2}.items():
        redis_store.put(u, v)
    fl = Dataflow(S)
    cleaned = fl.map(clean)
    scored = cleaned.map(score, batch=True)
    feats = scored.lookup(col("user"), type=int).map(feature)
    fast = cleaned.map(noisy, high_variance=True)
    fl.output = feats.union(fast).groupby(rowID).agg("max", "x")
    tables = [Table(S, [(" Ann", i), ("BOB ", i + 1)]) for i in range(6)]

    local = fl.deploy(optimize=NONE, store=redis_store)
    want = [local.execute(t).result(30) for t in tables]
    local.close()

    ex = fl.deploy("ray", optimize=Optimizations(replicas=2, max_batch=4), store=redis_store, workers=2)
    try:
        got = [f.result(60) for f in [ex.execute(t) for t in tables]]
        stats = ex.cache_stats()  # type: ignore[attr-defined]
        hits = ex.locality_hits  # type: ignore[attr-defined]
    finally:
        ex.close()
    assert got == want
    assert [tuple(r) for r in got[1]] == [(11,), (22,)]  # ann: 1*10 + 1; bob: 2*10 + 2
    # every call's lookup went to the actor that fetched its first key (" Ann" -> ann) first: 5 locality hits
    assert hits == 5 and sum(h + m for h, m in stats.values()) == 12
