"""The simulator's per-replica queue of forwarded samples, and how many producer ticks a trace spans.

Split from :mod:`cascadeserve.simulate.engine` (which applies the policy's decisions); these are its data
structures, with no decision in them: :func:`take_batch` takes the samples of a batch whose size and members the
policy chose.
"""

from __future__ import annotations

import math

import numpy as np

from cascadeserve.policy import BatchMembers

__all__ = ["Forwarded", "take_batch", "tick_windows"]


class Forwarded:
    """Samples forwarded to a replica: chunks of request ids, each with the time it entered the queue."""

    __slots__ = ("chunks", "n", "oldest")

    def __init__(self) -> None:
        self.chunks: list[tuple[np.ndarray, float | np.ndarray]] = []
        self.n = 0
        self.oldest = math.inf

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> float:
        """When the ``i``-th oldest sample entered the queue (the policy's batch membership reads the front ones)."""
        for ids, t in self.chunks:
            if i < len(ids):
                return t if isinstance(t, float) else float(t[i])
            i -= len(ids)
        raise IndexError("past the forwarded queue's end")

    def push(self, ids: np.ndarray, t: float | np.ndarray) -> None:
        if self.n == 0:
            self.oldest = t if isinstance(t, float) else float(np.min(t))
        self.chunks.append((ids, t))
        self.n += len(ids)

    def take(self, size: int) -> np.ndarray:
        """The ``size`` oldest samples (chunks are pushed in time order, so they are the front ones): a capped batch
        of a queue that only holds forwarded samples costs O(size), not O(queue)."""
        if size == self.n:  # the whole queue (the common case): every chunk, in order
            parts = [ids for ids, _ in self.chunks]
            self.clear()
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        taken: list[np.ndarray] = []
        need = size
        chunks = self.chunks
        i = 0
        while need > 0:
            ids, t = chunks[i]
            if len(ids) <= need:
                taken.append(ids)
                need -= len(ids)
                i += 1
            else:
                taken.append(ids[:need])
                chunks[i] = (ids[need:], t if isinstance(t, float) else t[need:])
                need = 0
        del chunks[:i]
        self.n -= size
        if self.n == 0:
            self.oldest = math.inf
        else:
            t0 = chunks[0][1]
            self.oldest = t0 if isinstance(t0, float) else float(np.min(t0))
        return taken[0] if len(taken) == 1 else np.concatenate(taken)

    def clear(self) -> None:
        self.chunks = []
        self.n = 0
        self.oldest = math.inf


def take_batch(f: Forwarded, pend_ids: np.ndarray, p: int, m: BatchMembers) -> np.ndarray:
    """The ids of the batch that the policy's :func:`~cascadeserve.policy.batch_members` decision ``m`` picked from
    one replica's queue: ``m.forwarded`` from the front of its forwarded samples ``f`` (which keeps the rest) and
    ``m.arrived`` from the front of its pending arrivals ``pend_ids[p:]`` (the caller moves ``p`` on by as many),
    in the decision's order."""
    ids_a = pend_ids[p : p + m.arrived]
    if m.forwarded == 0:
        return ids_a
    ids_f = f.take(m.forwarded)
    if m.order is None:  # forwarded first
        return ids_f if m.arrived == 0 else np.concatenate([ids_f, ids_a])
    ids = np.empty(m.forwarded + m.arrived, dtype=np.int64)
    from_f = np.array(m.order, dtype=bool)
    ids[from_f] = ids_f
    ids[~from_f] = ids_a
    return ids


def tick_windows(arrivals: np.ndarray, tick_s: float) -> int:
    """How many producer ticks a trace spans: the windows ``[k·tick, (k+1)·tick)`` up to the last arrival's.

    The queues drain from the end of the last window on (``tick_windows(...) * tick_s``). Floor division alone would
    disagree with the window bounds: 0.5 // 0.1 is 4.0, yet 5 * 0.1 == 0.5, so an arrival at 0.5 lies in the sixth
    window, and without the correction it would never be admitted.
    """
    if not len(arrivals):
        return 0
    last = float(arrivals[-1])
    n = int(last // tick_s) + 1
    while tick_s * n <= last:
        n += 1
    return n
