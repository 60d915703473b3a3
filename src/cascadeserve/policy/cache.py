"""Clipper's prediction cache: a bounded LRU of answers, keyed by the request's input and the cache's epoch.

Clipper's model-abstraction layer answers a query whose input it has seen before from a cache, without queueing
it. Here the cached value is the whole cascade's answer, so a hit skips every stage. The same object serves both
engines: the runtime keys it by the request's input bytes (:func:`input_key`), the simulator by the validation
sample id (a sample's recorded answers are what its bytes would produce).

* :meth:`PredictionCache.lookup` is the decision "answer from the cache, or queue": it returns the stored value
  (a hit) or ``None`` (a miss), and refreshes the entry's recency.
* :meth:`PredictionCache.store` records an answer once the cascade gave it, evicting the least recently used
  entry when the cache is full; it returns a :class:`CacheStore` saying what was evicted.
* :meth:`PredictionCache.on_swap` applies :func:`swap_invalidates`: a plan swap that changes what the cascade
  would answer (another model set, or other cascades or thresholds in any gear) empties the cache; a swap that
  only moves replicas, shares or batching keeps it, since the answers stay those of the same cascades.

Keys carry the cache's *epoch* (bumped on every invalidation), so a value stored for a request admitted before
a swap but answered after it never serves a request of the new plan (:meth:`store` takes the epoch the request
saw at lookup). Fallback answers (a deadline answered from an earlier stage) are not cached: they are not the
cascade's answer. Counters (hits, misses, evictions, invalidations) are plain fields the metrics read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from cascadeserve.plan import GearPlan

__all__ = ["CacheStore", "PredictionCache", "input_key", "swap_invalidates"]

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class CacheStore:
    """What one :meth:`PredictionCache.store` did (loggable)."""

    stored: bool  # False: the value's epoch is stale (a swap invalidated it while the request ran)
    evicted: int  # entries evicted to make room (0 or 1)


def input_key(payload: Any) -> Hashable:
    """The cache key of a runtime payload: its bytes with dtype and shape (arrays), each input's by name (a model of
    several input tensors), or the value itself (a sample id in emulated mode). Equal inputs give equal keys;
    arrays of one content but another dtype or shape do not."""
    if isinstance(payload, Mapping):
        return tuple((name, input_key(value)) for name, value in sorted(payload.items()))
    if isinstance(payload, np.ndarray):
        return (payload.dtype.str, payload.shape, payload.tobytes())
    if isinstance(payload, np.generic):
        return payload.item()  # type: ignore[no-any-return]
    return payload  # type: ignore[no-any-return]


def swap_invalidates(old: GearPlan, new: GearPlan) -> bool:
    """Does swapping ``old`` for ``new`` change what the cascade answers? (Then the cache must be emptied.)"""
    if old.profile != new.profile:
        return True
    cascades = {(g.models, g.thresholds) for g in old.gears}
    return cascades != {(g.models, g.thresholds) for g in new.gears}


class PredictionCache(Generic[V]):
    """A bounded LRU of ``capacity`` entries mapping an input key to an answer (capacity ≥ 1)."""

    __slots__ = ("_data", "capacity", "epoch", "evictions", "hits", "invalidations", "misses")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be at least 1 entry, got {capacity}")
        self.capacity = capacity
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self.epoch = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.invalidations = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def lookup(self, key: Hashable) -> V | None:
        """The cached answer for ``key`` (a hit: answer now, queue nothing), or ``None`` (a miss: serve it)."""
        data = self._data
        value = data.get(key)
        if value is None:
            self.misses += 1
            return None
        data.move_to_end(key)
        self.hits += 1
        return value

    def store(self, key: Hashable, value: V, epoch: int | None = None) -> CacheStore:
        """Cache ``value`` for ``key``, unless ``epoch`` (the epoch when the request looked up) is stale."""
        if epoch is not None and epoch != self.epoch:
            return CacheStore(False, 0)
        data = self._data
        data[key] = value
        data.move_to_end(key)
        evicted = 0
        if len(data) > self.capacity:
            data.popitem(last=False)
            evicted = 1
            self.evictions += 1
        return CacheStore(True, evicted)

    def invalidate(self) -> None:
        """Drop every entry and start a new epoch."""
        self._data.clear()
        self.epoch += 1
        self.invalidations += 1

    def on_swap(self, old: GearPlan, new: GearPlan) -> bool:
        """Apply :func:`swap_invalidates` to a plan swap; ``True`` when the cache was emptied."""
        if swap_invalidates(old, new):
            self.invalidate()
            return True
        return False
