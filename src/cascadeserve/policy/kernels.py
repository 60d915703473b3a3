"""The serving decisions as plain numeric functions: the one source that every engine calls.

Each function here is a decision rule written once, on numbers only (floats, ints, tuples of them, numpy arrays),
so that numba can compile it. Two forms of each exist, from the *same* source text:

* the plain Python function (``fire_time``, ``is_sure``, ...), which the Python callers use: the public API of
  :mod:`cascadeserve.policy` (``BatchTrigger.fire_time``, ``batch_size``, ``next_batch``, ``sure_mask``,
  ``SmoothWeightedRoundRobin.pick``, ``GearSelector.decide``, ``GearSchedule.gear_at``, ``QpsMeter.tick``,
  ``AdmissionPolicy.admits``) delegates to it, and so the asyncio runtime, Ray and the Python simulator path call
  it. Calling a compiled function from Python costs about half a microsecond of argument unboxing, more than these
  rules take, so Python calls the function itself;
* its compiled twin (``compiled()["fire_time"]``, ...), ``numba.njit(cache=True)`` of that very function, which
  the compiled simulator loop (:mod:`cascadeserve.simulate.loop`) calls: it is written with the plain names, and
  :func:`compile_calling_kernels` compiles it with those names bound to the twins.

Conventions that keep the rules numeric: "no limit" is :data:`NO_LIMIT` (``-1``) for counts and ``inf`` for a max
wait; a candidate queue is the tuple ``(fire time, head's enqueue time, generation, replica)``; a router is one
precomputed period of its smooth weighted round-robin (:func:`~cascadeserve.policy.routing.swrr_sequence`) and a
position in it.

The compiled twins are built lazily (the first :func:`compiled` call imports numba and compiles or loads from the
on-disk cache), so importing the policy never pays for numba.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = [
    "LAST_STAGE",
    "NO_LIMIT",
    "admitted",
    "aimd_next",
    "capped_min_queue",
    "compile_calling_kernels",
    "compiled",
    "fire_time",
    "gear_for_qps",
    "is_sure",
    "prefer",
    "qps_rate",
    "scheduled_gear",
    "select_gear",
    "stage_exits",
    "swrr_pick",
    "take_count",
    "takes_forwarded",
    "windowed_qps",
]

LAST_STAGE = -math.inf
"""The threshold of a cascade's last stage: it answers every sample, NaN certainty included."""

NO_LIMIT = -1
"""A count limit that is not set (no ``max_batch``, no adaptive cap, no admission bound)."""


def fire_time(now: float, first: float, mth: float, max_wait: float) -> float:
    """Earliest time ≥ ``now`` at which a queue fires: when its ``min_queue``-th sample entered (``mth``; ``inf``
    when it has not, ``-inf`` when the queue is long enough already), or when its oldest sample (entered at
    ``first``) has waited ``max_wait`` (``inf``: no max wait), whichever comes first."""
    due = mth if max_wait == math.inf or mth <= first + max_wait else first + max_wait
    return due if due > now else now


def take_count(present: int, max_batch: int, cap: int) -> int:
    """How many of the ``present`` queued samples a firing batch takes: all, up to the plan's ``max_batch`` and
    then the adaptive ``cap`` (each :data:`NO_LIMIT` when unset)."""
    size = present if max_batch < 0 or present <= max_batch else max_batch
    return size if cap < 0 or size <= cap else cap


def takes_forwarded(has_forwarded: bool, has_arrival: bool, forwarded_at: float, arrived_at: float) -> bool:
    """Batch membership, one slot of a capped batch at a time: does the next slot take the oldest forwarded sample
    (which entered its queue at ``forwarded_at``), else the oldest new arrival (``arrived_at``)? The older of the two;
    the forwarded one on a tie (it has waited through an earlier stage already)."""
    return has_forwarded and (not has_arrival or forwarded_at <= arrived_at)


def prefer(best: tuple[float, float, int, int], cand: tuple[float, float, int, int]) -> tuple[float, float, int, int]:
    """The tie-break rule between two queues of one device: the earlier fire time, then the older head sample, then
    the older plan generation, then the lower replica index (tuple order). ``best`` wins a full tie."""
    return cand if cand < best else best


def is_sure(certainty: Any, threshold: Any) -> Any:
    """The exit rule: a stage answers a sample when its certainty reaches the threshold; the last stage
    (:data:`LAST_STAGE`) answers every sample, NaN included. Works elementwise on numpy arrays as on floats."""
    return (threshold == LAST_STAGE) | (certainty >= threshold)


def stage_exits(thresholds: np.ndarray, gear: int, row: int, certainty: float) -> bool:
    """:func:`is_sure` for one sample of model ``row`` admitted under ``gear`` (``thresholds[gear, row]`` as in
    :class:`~cascadeserve.policy.PlanTables`)."""
    return bool(is_sure(certainty, thresholds[gear, row]))


def swrr_pick(seq: np.ndarray, pos: int) -> tuple[int, int]:
    """One smooth weighted round-robin pick: the index at ``pos`` of the period ``seq``, and the next position."""
    return int(seq[pos]), (pos + 1) % len(seq)


def gear_for_qps(highs: Sequence[float] | np.ndarray, qps: float) -> int:
    """The gear whose QPS range ``[.., highs[g])`` holds ``qps`` (already scaled); the last one above the top.

    Neighbouring gears that serve alike share one top (their run's, :attr:`~cascadeserve.plan.GearPlan.gear_runs`),
    and the answer is always the *first* gear of a run, so moving within a run is no switch: ``bisect_right`` finds
    the first of equal tops by itself, and above the top the walk back finds the first gear of the last run."""
    n = len(highs)
    lo, hi = 0, n
    while lo < hi:  # bisect_right
        mid = (lo + hi) // 2
        if qps < highs[mid]:
            hi = mid
        else:
            lo = mid + 1
    if lo >= n:
        lo = n - 1
        while lo > 0 and highs[lo - 1] == highs[lo]:
            lo -= 1
    return lo


def select_gear(
    highs: Sequence[float] | np.ndarray, qps_scale: float, alpha: float, current: int, qps: float, q0: int
) -> tuple[int, int, bool]:
    """The gear selector with the paper's α·Q0 hysteresis: ``(gear, target, held)``. ``target`` is the gear the
    QPS alone asks for; a move to a lower gear is held while ``qps < alpha * q0``."""
    target = gear_for_qps(highs, qps * qps_scale)
    held = target < current and qps < alpha * q0
    return (current if held else target), target, held


def scheduled_gear(gears: np.ndarray, tick: int) -> int:
    """A gear schedule's gear for producer tick ``tick``; past either end the nearest entry holds."""
    k = tick if tick > 0 else 0
    return int(gears[k if k < len(gears) else len(gears) - 1])


def qps_rate(count: int, elapsed: float) -> float:
    """The QPS meter's rate for ``count`` arrivals over a window of ``elapsed`` seconds (0 for an empty window)."""
    return count / elapsed if elapsed > 0 else 0.0


def windowed_qps(cum: Any, times: Any, w: int, min_arrivals: int, max_ticks: int) -> float:
    """The QPS meter's rate at tick ``w`` (``cum[i]``: arrivals counted by tick ``i``, at time ``times[i]``): over
    the shortest run of the last ticks that holds ``min_arrivals`` arrivals, at least one tick, at most
    ``max_ticks`` and never before tick 0. With ``min_arrivals`` 0 it is the last tick's rate (the paper's meter).

    Why a window that stretches: one 100 ms tick holds a few arrivals at LLM rates (0 or 1 at 5 QPS, a measured
    rate of 0 or 10), so a gear chosen from it is noise; 20 arrivals measure the rate to about 22 %, and at the
    rates the paper serves (hundreds per second) one tick holds them and nothing changes."""
    j = 1
    while j < max_ticks and j < w and cum[w] - cum[w - j] < min_arrivals:
        j += 1
    return qps_rate(cum[w] - cum[w - j], times[w] - times[w - j])


def admitted(n: int, in_flight: int, cap: int) -> int:
    """How many of ``n`` arrivals, decided one after another from ``in_flight``, a bound of ``cap`` requests in
    flight accepts (:data:`NO_LIMIT`: all)."""
    if cap < 0:
        return n
    room = cap - in_flight
    return n if n <= room else (room if room > 0 else 0)


def audit_pick(count: int, fraction: float) -> bool:
    """Whether early exit number ``count`` (from 0, counted across batches) is audited: ``fraction`` of them, evenly
    spread (the running total ``count·fraction`` crosses an integer at it); deterministic, so every engine audits the
    same samples (online tuning's :class:`~cascadeserve.policy.tuning.AuditSampler`)."""
    return math.floor((count + 1) * fraction) > math.floor(count * fraction)


def aimd_next(cap: int, runtime_s: float, target_s: float, step: int, backoff: float, ceiling: int) -> int:
    """The AIMD batch cap after a batch that ran ``runtime_s`` seconds under cap ``cap``: ``+step`` (at most
    ``ceiling``) when it ran within ``target_s``, else ``floor(cap * backoff)``, at least 1 (Clipper's rule)."""
    if runtime_s <= target_s:
        grown = cap + step
        return grown if grown < ceiling else ceiling
    shrunk = math.floor(cap * backoff)
    return shrunk if shrunk > 1 else 1


def capped_min_queue(min_queue: int, cap: int) -> int:
    """A trigger's minimum queue length under an adaptive batch ``cap`` (:data:`NO_LIMIT`: none): a queue never
    waits for more samples than one batch may take."""
    return min_queue if cap < 0 or min_queue <= cap else cap


_SOURCES: tuple[Callable[..., Any], ...] = (
    aimd_next,
    audit_pick,
    capped_min_queue,
    fire_time,
    take_count,
    takes_forwarded,
    prefer,
    is_sure,
    swrr_pick,
    gear_for_qps,
    scheduled_gear,
    qps_rate,
    admitted,
)
_USES_KERNELS: tuple[Callable[..., Any], ...] = (stage_exits, select_gear, windowed_qps)
_TWINS: dict[str, Any] = {}


def compiled() -> dict[str, Any]:
    """The compiled twins of this module's functions, by name, built on the first call (compiled, or loaded from
    numba's on-disk cache)."""
    if not _TWINS:
        twins: dict[str, Any] = {}
        for fn in _SOURCES:
            twins[fn.__name__] = _njit(fn)
        for fn in _USES_KERNELS:
            twins[fn.__name__] = _njit(bind_kernels(fn, twins))
        _TWINS.update(twins)
    return _TWINS


def compile_calling_kernels(
    fn: Callable[..., Any],
    helpers: dict[str, Any] | None = None,
    *,
    inline: bool = False,
    pipeline_class: type | None = None,
) -> Any:
    """``numba.njit(cache=True)`` of ``fn``, whose calls of this module's functions call their compiled twins (and
    whose calls of ``helpers``, compiled functions by name, call those). ``inline``: numba copies ``fn`` into each
    caller (a helper split out of a hot loop for reading costs no call there). ``pipeline_class``: numba's compiler
    class for ``fn`` (default numba's own); its module's source is part of the cache name, as the kernels' are."""
    twins = {**compiled(), **(helpers or {})}
    extra = () if pipeline_class is None else (sys.modules[pipeline_class.__module__].__file__ or "",)
    return _njit(bind_kernels(fn, twins, extra), inline=inline, pipeline_class=pipeline_class)


def _njit(fn: Callable[..., Any], *, inline: bool = False, pipeline_class: type | None = None) -> Any:
    """``numba.njit(cache=True)(fn)``; without a writable cache (neither ``__pycache__`` beside the package, nor
    ``NUMBA_CACHE_DIR``, nor the user's cache directory) it compiles once per process instead of failing."""
    import numba
    from numba.core.caching import FunctionCache

    how: Literal["always", "never"] = "always" if inline else "never"
    options: dict[str, Any] = {} if pipeline_class is None else {"pipeline_class": pipeline_class}
    try:  # numba's own look-up of a cache location, which would otherwise raise only at the first call
        FunctionCache(fn)  # type: ignore[no-untyped-call]
    except RuntimeError:  # "cannot cache function ...: no locator available for file ..."
        return numba.njit(inline=how, **options)(fn)
    return numba.njit(cache=True, inline=how, **options)(fn)


@functools.cache
def _digest(files: tuple[str, ...]) -> str:
    """A short hash of the sources of ``files`` (see :func:`bind_kernels`)."""
    h = hashlib.sha256()
    for f in files:
        h.update(Path(f).read_bytes())
    return h.hexdigest()[:12]


def _source_files(twins: dict[str, Any]) -> tuple[str, ...]:
    """This module's file and the file of every compiled function in ``twins`` (a helper from another module)."""
    files = {__file__}
    for twin in twins.values():
        py = getattr(twin, "py_func", None)
        if py is not None:
            files.add(py.__code__.co_filename)
    return tuple(sorted(files))


def bind_kernels(fn: Callable[..., Any], twins: dict[str, Any], extra: tuple[str, ...] = ()) -> Callable[..., Any]:
    """A copy of ``fn`` (the same code) whose global names of kernels are bound to their compiled twins: numba
    resolves a global at compile time and cannot call a plain Python function."""
    import types

    glb = dict(fn.__globals__)
    glb.update(twins)
    out = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    # numba names a function's on-disk cache by its qualified name and invalidates it only when the function's own
    # file changes: a loop compiled against older kernels would load from the cache and run the old rules. The
    # kernels' source hash in the name gives every version of the kernels its own cache entry; the hash covers the
    # files of the helpers bound in too (an inlined helper from another module is part of the compiled code), and
    # the ``extra`` files (a compiler pipeline's module: its passes shape the compiled code as well).
    out.__qualname__ = f"{fn.__qualname__}_k{_digest(tuple(sorted({*_source_files(twins), *extra})))}"
    out.__module__ = fn.__module__
    return out
