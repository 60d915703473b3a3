"""The simulator's per-replica queue of forwarded samples, and how many producer ticks a trace spans.

Split from :mod:`cascadeserve.simulate.engine` (which applies the policy's decisions); these are its data
structures, with no decision in them: :func:`take_batch` takes the samples of a batch whose size the policy chose.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Forwarded", "take_batch", "tick_windows"]


class Forwarded:
    """Samples forwarded to a replica: chunks of request ids, each with the time it entered the queue."""

    __slots__ = ("chunks", "n", "oldest")

    def __init__(self) -> None:
        self.chunks: list[tuple[np.ndarray, float | np.ndarray]] = []
        self.n = 0
        self.oldest = math.inf

    def push(self, ids: np.ndarray, t: float | np.ndarray) -> None:
        if self.n == 0:
            self.oldest = t if isinstance(t, float) else float(np.min(t))
        self.chunks.append((ids, t))
        self.n += len(ids)

    def take(self, size: int) -> np.ndarray:
        """The ``size`` oldest samples (chunks are pushed in time order, so they are the front ones): a capped batch
        of a queue that only holds forwarded samples costs O(size), not O(queue)."""
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


def take_batch(
    f: Forwarded, pend_ids: np.ndarray, pend_t: np.ndarray, p: int, k: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Take a batch of ``size`` samples (the policy's :func:`~cascadeserve.policy.batch_size`) from one replica's
    queue: its forwarded samples ``f`` and its pending arrivals ``pend_ids[p:]`` (entered at ``pend_t[p:]``), of
    which the first ``k - p`` have arrived by the batch's start. Oldest first; at equal times forwarded samples go
    first. Returns the batch's ids and the pending arrays and position after it (``f`` keeps what is not taken).
    """
    present = f.n + (k - p)
    if f.n == 0:
        return pend_ids[p : p + size], pend_ids, pend_t, p + size
    if size == present:  # the whole queue: the forwarded chunks (in time order), then the arrivals
        parts = [c for c, _ in f.chunks]
        if k > p:
            parts.append(pend_ids[p:k])
        f.clear()
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)), pend_ids, pend_t, k
    if k == p:  # capped batch of forwarded samples only (a later stage): the oldest, front chunks first
        return f.take(size), pend_ids, pend_t, p
    # capped batch: oldest first across forwarded and newly arrived samples
    all_ids = np.concatenate([c for c, _ in f.chunks] + [pend_ids[p:k]])
    all_t = np.concatenate([np.broadcast_to(ct, (len(c),)) for c, ct in f.chunks] + [pend_t[p:k]])
    order = np.argsort(all_t, kind="stable")
    ids = all_ids[order[:size]]
    rest = order[size:]
    rest_f = rest[rest < f.n]
    rest_p = np.sort(rest[rest >= f.n])
    f.clear()
    if len(rest_f):
        f.push(all_ids[rest_f], all_t[rest_f])
    # un-taken new arrivals go back to the front of the pending slice
    back = all_ids[rest_p]
    return ids, np.concatenate([back, pend_ids[k:]]), np.concatenate([all_t[rest_p], pend_t[k:]]), 0


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
