"""The dataflow dispatch decision: which worker runs a dataflow task (``cascadeserve.flow``'s executors apply it).

Cloudflow's locality-aware scheduling (paper §4): a task that starts with a key-value lookup runs on a worker that
has the key cached, when one does; otherwise, and for every other task, on the least-loaded worker. Ties go to
the lowest worker index, so a run is reproducible. The executors keep the loads (tasks sent and not finished, or
sent so far where completions are not observed) and the cache directory; this function only decides.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple

__all__ = ["DispatchDecision", "pick_worker"]


class DispatchDecision(NamedTuple):
    worker: int
    local: bool  # the worker has the task's key cached (a locality hit)


def pick_worker(loads: Sequence[int], holders: Collection[int] = ()) -> DispatchDecision:
    """The worker for a task: the least loaded of those holding its key, else the least loaded of all."""
    if not loads:
        raise ValueError("no worker to dispatch to")
    pool = sorted(h for h in holders if 0 <= h < len(loads))
    if pool:
        return DispatchDecision(min(pool, key=lambda w: (loads[w], w)), True)
    return DispatchDecision(min(range(len(loads)), key=lambda w: (loads[w], w)), False)
