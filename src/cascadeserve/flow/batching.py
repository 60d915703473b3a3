"""Batching across ``execute`` calls: a queue per batch-aware node, fired as the policy's batch decision says.

Calls reach a batch-aware node one by one; each waits in the node's queue. Whenever fewer than ``concurrency``
batches of the node are in flight (its workers are free), the queue fires: how many calls the batch takes is
:func:`cascadeserve.policy.batch_size` under the drain trigger (everything queued, up to ``max_batch`` calls; the
paper's default is 10), the same decision the cascade runtime applies to a draining queue. The executor runs the
batch in one invocation, splits the output back to the calls (:func:`split_rows`), resolves each call's future
and reports :meth:`Batcher.done`, which fires the next batch.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from cascadeserve.flow.operators import Context, Operator
from cascadeserve.flow.table import Table
from cascadeserve.policy.batching import batch_size, drain_trigger

__all__ = ["Batcher", "Call", "run_batched", "split_rows"]


@dataclass
class Call:
    payload: Any  # what the executor needs to run this call's part (its input table, or a reference to it)
    future: Future[Any] = field(default_factory=Future)


class Batcher:
    """The queue of one batch-aware node. ``fire(calls)`` must resolve every call's future, then call ``done()``."""

    def __init__(self, max_batch: int, concurrency: int, fire: Callable[[list[Call]], None]) -> None:
        self.trigger = drain_trigger(max_batch)
        self.concurrency = max(1, concurrency)
        self.fire = fire
        self._queue: deque[Call] = deque()
        self._in_flight = 0
        self._lock = threading.Lock()
        self.sizes: list[int] = []  # calls per fired batch (tests and benchmarks read it)

    def submit(self, payload: Any) -> Future[Any]:
        call = Call(payload)
        with self._lock:
            self._queue.append(call)
        self._pump()
        return call.future

    def done(self) -> None:
        with self._lock:
            self._in_flight -= 1
        self._pump()

    def _pump(self) -> None:
        while True:
            with self._lock:
                if self._in_flight >= self.concurrency or not self._queue:
                    return
                n = batch_size(self.trigger, len(self._queue))
                calls = [self._queue.popleft() for _ in range(n)]
                self._in_flight += 1
                self.sizes.append(n)
            try:
                self.fire(calls)
            except BaseException as e:  # the executor could not even start the batch: fail its calls, go on
                for c in calls:
                    if not c.future.done():
                        c.future.set_exception(e)
                self.done()


def split_rows(out: Table, origin: Sequence[int], owners: Sequence[int], n_calls: int) -> list[Table]:
    """Split a batched output back to its calls: output row ``k`` came from input row ``origin[k]``, which
    belongs to call ``owners[origin[k]]``; each call keeps its rows in order."""
    data: list[list[tuple[Any, ...]]] = [[] for _ in range(n_calls)]
    ids: list[list[int]] = [[] for _ in range(n_calls)]
    for k, o in enumerate(origin):
        c = owners[o]
        data[c].append(out.rows_[k])
        ids[c].append(out.ids[k])
    return [Table.of(out.schema, data[c], ids[c], out.grouping) for c in range(n_calls)]


def run_batched(op: Operator, tables: Sequence[Table], ctx: Context) -> list[Table]:
    """Run a row-wise operator once over the rows of several calls' tables and split the result back."""
    first = tables[0]
    rows = [r for t in tables for r in t.rows_]
    ids = [i for t in tables for i in t.ids]
    owners = [c for c, t in enumerate(tables) for _ in t.rows_]
    merged = Table.of(first.schema, rows, ids, first.grouping)
    out, origin = op.apply_rows(merged, ctx)
    return split_rows(out, origin, owners, len(tables))
