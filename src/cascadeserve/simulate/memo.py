"""Replays and planner fits remembered while a cost grid runs.

A cost grid (``cascadeserve compare``) replays the same plan on the same trace many times: the planner judges the
same static cascades for every SLO it plans at one device count, DynBa and the no-switching ablation plan the same
single models, and Algorithm 1 often lands on a plan it already replayed. Every such replay of the paper's
workload costs seconds (5.8 M requests), so :func:`replay` (``simulate(profile, plan, arrivals)``'s p95 and
accuracy) answers a repeat from memory.

The memo is off unless a caller opens one (:func:`remembering`), so nothing else changes: outside a grid,
:func:`replay` is ``simulate`` and two numbers. A run is keyed by what determines it and nothing else: the
profile's contents (records, runtimes, costs), the plan's JSON, and the arrivals' bytes; only hook-free runs are
remembered (a hook holds state of its own). :func:`remember` and :func:`recall` keep other results under keys
their caller builds (the baselines keep planner fits: the same fit for the same inputs). The store is any mutable
mapping, so worker processes can share one (a ``multiprocessing.Manager().dict()``): a key computed twice at once
is computed twice, never wrongly.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile
from cascadeserve.simulate.engine import simulate

__all__ = ["Entry", "Summary", "fingerprint", "late_on_prefix", "recall", "remember", "remembering", "replay", "stats"]

Summary = tuple[float, float]  # (p95 ms, accuracy)
Entry = Summary | str  # a replay's summary, or what a caller keeps under its own key (a plan's JSON)

_store: MutableMapping[str, Entry] | None = None
_counts = {"hits": 0, "misses": 0}
# fingerprints of arrays and profiles by id(); the object itself is kept so that its id is never reused
_fps: dict[int, tuple[object, str]] = {}


def _digest(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def fingerprint(obj: Profile | np.ndarray) -> str:
    """A digest of a profile's contents (records, runtimes, costs) or of an array of arrival times."""
    return _fingerprint(obj, "profile" if isinstance(obj, Profile) else "arrivals")


def recall(*parts: str) -> str | None:
    """What :func:`remember` kept under ``parts``, when a memo is open and holds it."""
    if _store is None:
        return None
    got = _store.get(_digest(*(p.encode() for p in parts)))
    if isinstance(got, str):
        _counts["hits"] += 1
        return got
    return None


def remember(value: str, *parts: str) -> None:
    """Keep ``value`` under ``parts`` while a memo is open (nothing otherwise)."""
    if _store is not None:
        _store[_digest(*(p.encode() for p in parts))] = value


def _fingerprint(obj: object, make: str) -> str:
    hit = _fps.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    if make == "arrivals":
        arr = np.ascontiguousarray(obj, dtype=np.float64)
        fp = _digest(arr.tobytes())
    else:
        assert isinstance(obj, Profile)
        models = repr([(m.name, m.memory_mb, m.runtime.as_mapping(), m.max_batch) for m in obj.models])
        latency = (obj.ray_hop_ms, obj.ray_hop_p95_ms, obj.front_door_ms, obj.front_door_p95_ms)
        costs = repr((obj.batch_overhead_ms, *latency, obj.task))
        fp = _digest(
            models.encode(),
            costs.encode(),
            np.ascontiguousarray(obj.labels).tobytes(),
            np.ascontiguousarray(obj.predictions).tobytes(),
            np.ascontiguousarray(obj.certainties, dtype=np.float64).tobytes(),
        )
    _fps[id(obj)] = (obj, fp)
    return fp


def replay(profile: Profile, plan: GearPlan, arrivals: np.ndarray) -> Summary:
    """``(p95 ms, accuracy)`` of ``simulate(profile, plan, arrivals)`` with no hook; from memory when a memo is
    open and this very run was replayed before."""
    if _store is None:
        res = simulate(profile, plan, arrivals)
        return res.percentile_ms(95), res.accuracy
    key = _digest(
        _fingerprint(profile, "profile").encode(),
        plan.model_dump_json().encode(),
        _fingerprint(arrivals, "arrivals").encode(),
    )
    got = _store.get(key)
    if isinstance(got, tuple):
        _counts["hits"] += 1
        return (float(got[0]), float(got[1]))
    _counts["misses"] += 1
    res = simulate(profile, plan, arrivals)
    out = (res.percentile_ms(95), res.accuracy)
    _store[key] = out
    return out


def late_on_prefix(profile: Profile, plan: GearPlan, arrivals: np.ndarray, latency_ms: float) -> bool:
    """Whether a replay of the first quarter of ``arrivals`` already proves that the full replay's p95 exceeds
    ``latency_ms`` (remembered like a replay while a memo is open).

    The simulator is causal: up to the first arrival ``T`` left out, the shorter replay and the full one are the
    same run. A request that arrived at ``a`` with ``a + L < T`` and was not answered by ``a + L`` in the shorter
    replay is late in the full one too; when such requests are more than the 5 % that p95 may leave above ``L``,
    the full replay misses. ``False`` says nothing (replay in full). A check whose only question is "does it meet
    the SLO?" (the planner's judgment of static cascades) saves three quarters of each overloaded replay."""
    n = len(arrivals)
    k = n // 4
    if k < 1000:
        return False
    parts = ("prefix-late", fingerprint(profile), plan.model_dump_json(), fingerprint(arrivals), repr(latency_ms))
    hit = recall(*parts)
    if hit is not None:
        return hit == "late"
    res = simulate(profile, plan, arrivals[:k])
    lim = latency_ms / 1000.0
    late = int(np.count_nonzero((res.latency_s > lim) & (res.arrivals + lim < float(arrivals[k]))))
    # np.percentile(lat, 95) >= the sorted latency at index floor(0.95 (n - 1)); it is late when fewer requests
    # than that index (+ 1) are on time; one more request keeps a margin
    out = late > n - math.floor(0.95 * (n - 1)) + 1
    remember("late" if out else "open", *parts)
    return out


@contextmanager
def remembering(store: MutableMapping[str, Entry] | None = None) -> Iterator[MutableMapping[str, Entry]]:
    """Remember replays inside the ``with`` block, in ``store`` (default: a new dict); yields the store."""
    global _store
    prev = _store
    _store = {} if store is None else store
    try:
        yield _store
    finally:
        _store = prev
        if prev is None:
            _fps.clear()


def stats() -> dict[str, int]:
    """Replays answered from memory (``hits``) and simulated (``misses``) in this process so far."""
    return dict(_counts)
