"""The key-value stores behind ``lookup``: the embedded one and a real Redis server, one interface."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from cascadeserve.flow import Dataflow, KVStore, MemoryStore, RedisStore, Table, col
from cascadeserve.flow.kvs import WorkerCache


def _exercise(store: KVStore) -> None:
    with pytest.raises(KeyError):
        store.get("missing")
    store.put("a", {"x": [1, 2]})
    store.put("arr", np.arange(4))
    assert store.get("a") == {"x": [1, 2]}
    assert np.array_equal(store.get("arr"), np.arange(4))
    store.put("a", 3)
    assert store.get("a") == 3
    store.delete("a")
    with pytest.raises(KeyError):
        store.get("a")


def test_memory_store() -> None:
    _exercise(MemoryStore())


def test_redis_store_on_a_real_server(redis_store: RedisStore) -> None:
    _exercise(redis_store)
    redis_store.put("shared", "v")
    copy: Any = pickle.loads(pickle.dumps(redis_store))  # what a Ray worker receives: settings, not a connection
    assert copy.get("shared") == "v" and copy.client is not redis_store.client


def test_a_flow_looks_up_per_user_features_in_redis(redis_store: RedisStore) -> None:
    for user, feats in {"ann": 0.5, "bob": 2.0}.items():
        redis_store.put(user, feats)

    def weight(user: str, n: float, user_value: float) -> float:
        return n * user_value

    fl = Dataflow([("user", str), ("n", float)])
    fl.output = fl.lookup(col("user"), type=float).map(weight)
    ex = fl.deploy(store=redis_store)
    out = ex.execute(Table([("user", str), ("n", float)], [("ann", 4.0), ("bob", 4.0), ("ann", 1.0)])).result(30)
    ex.close()
    assert [r[0] for r in out] == [2.0, 8.0, 0.5]


def test_worker_cache_is_lru_by_bytes() -> None:
    store = MemoryStore({k: np.zeros(100, dtype=np.uint8) for k in "abc"})
    cache = WorkerCache(store, capacity_bytes=250)
    for k in "abca":
        cache.get(k)
    assert cache.keys() == ["c", "a"] and (cache.hits, cache.misses) == (0, 4)
    cache.get("c")
    assert (cache.hits, cache.misses) == (1, 4)
