"""The embedded executor: every task on a worker thread of this process.

Workers come in resource classes: ``cpu`` (``workers`` of them, 4 by default) and ``gpu`` (``gpu_workers``, 1 by
default: model operators marked ``resources="gpu"`` run there, one batch at a time, like the runtime's device
threads). Each worker is one thread with its own :class:`~cascadeserve.flow.kvs.WorkerCache` in front of the
store. A task runs on the worker :func:`cascadeserve.policy.dispatch.pick_worker` chooses: the least loaded of its
class, or, for a node the optimiser marked for locality, the least loaded of those that have the lookup's key
cached.

Execution is driven by future callbacks, so no thread ever waits for another task: a node starts when all its
inputs are done (an ``anyof`` when the first succeeds), a batch-aware node queues its call in the node's
:class:`~cascadeserve.flow.batching.Batcher`. Errors travel down to the output future.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from cascadeserve.flow.batching import Batcher, Call, run_batched
from cascadeserve.flow.executor import Executor, check_input
from cascadeserve.flow.graph import Graph, Node
from cascadeserve.flow.kvs import KVStore, WorkerCache
from cascadeserve.flow.operators import Lookup
from cascadeserve.flow.schema import FlowError
from cascadeserve.flow.table import Table
from cascadeserve.policy.dispatch import pick_worker

__all__ = ["LocalExecutor", "Worker"]


class Worker:
    def __init__(self, name: str, store: KVStore | None, cache_bytes: int) -> None:
        self.name = name
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"flow-{name}")
        self.cache = WorkerCache(store, cache_bytes)
        self.load = 0
        self.tasks = 0


def _transfer(src: Future[Any], dst: Future[Any]) -> None:
    if dst.done():
        return
    if src.cancelled():
        dst.set_exception(FlowError("the deployment was closed before this call finished"))
        return
    e = src.exception()
    if e is not None:
        dst.set_exception(e)
    else:
        dst.set_result(src.result())


def _when_all(ins: Sequence[Future[Table]], then: Callable[[list[Table]], None], out: Future[Any]) -> None:
    """Call ``then(tables)`` once every input is done; fail ``out`` with the first input error instead."""
    if not ins:
        then([])
        return
    left = [len(ins)]
    lock = threading.Lock()

    def one(_: Future[Table]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if not last:
            return
        for f in ins:
            e = f.exception()
            if e is not None:
                if not out.done():
                    out.set_exception(e)
                return
        then([f.result() for f in ins])

    for f in ins:
        f.add_done_callback(one)


def _first(ins: Sequence[Future[Table]]) -> Future[Table]:
    """The first input to succeed (anyof); fails only when every input failed, with the first error."""
    out: Future[Table] = Future()
    lock = threading.Lock()
    failed: list[BaseException] = []

    def one(f: Future[Table]) -> None:
        e = f.exception()
        with lock:
            if out.done():
                return
            if e is None:
                out.set_result(f.result())
                return
            failed.append(e)
            if len(failed) == len(ins):
                out.set_exception(failed[0])

    for f in ins:
        f.add_done_callback(one)
    return out


class LocalExecutor(Executor):
    backend = "local"

    def __init__(
        self,
        graph: Graph,
        store: KVStore | None = None,
        *,
        workers: int = 4,
        gpu_workers: int = 1,
        cache_bytes: int = 1 << 30,
    ) -> None:
        super().__init__(graph)
        self.store = store
        self.classes: dict[str, list[Worker]] = {
            "cpu": [Worker(f"cpu{i}", store, cache_bytes) for i in range(max(1, workers))],
            "gpu": [Worker(f"gpu{i}", store, cache_bytes) for i in range(max(1, gpu_workers))],
        }
        self._lock = threading.Lock()
        self._directory: dict[str, set[int]] = {}  # key -> workers (of the node's class) that fetched it
        self.locality_hits = 0
        self.batchers: dict[int, Batcher] = {}
        for i, n in enumerate(graph.nodes):
            if n.batch and n.op is not None:
                pool = self.classes[n.op.resources]
                self.batchers[i] = Batcher(n.max_batch, len(pool), self._fire_for(i, n))

    # -- dispatch ---------------------------------------------------------------------------------------------
    def _key(self, node: Node, tables: Sequence[Table]) -> str | None:
        lk = node.dispatch
        if not isinstance(lk, Lookup) or not tables or not len(tables[0]):
            return None
        return lk.key_of(tables[0].rows_[0])

    def _acquire(self, node: Node, tables: Sequence[Table]) -> Worker:
        assert node.op is not None
        pool = self.classes[node.op.resources]
        key = self._key(node, tables)
        with self._lock:
            holders = self._directory.get(key, set()) if key is not None else set()
            d = pick_worker([w.load for w in pool], holders)
            w = pool[d.worker]
            w.load += 1
            w.tasks += 1
            if key is not None:
                self.locality_hits += int(d.local)
                self._directory.setdefault(key, set()).add(d.worker)
        return w

    def _release(self, w: Worker) -> None:
        with self._lock:
            w.load -= 1

    # -- nodes ------------------------------------------------------------------------------------------------
    def _run(self, node: Node, ins: Sequence[Future[Table]]) -> Future[Table]:
        out: Future[Table] = Future()
        op = node.op
        assert op is not None

        def start(tables: list[Table]) -> None:
            w = self._acquire(node, tables)
            try:
                f = w.pool.submit(op.apply, tables, w.cache)
            except RuntimeError as e:  # the pool was shut down (close() during a call)
                self._release(w)
                out.set_exception(e)
                return

            def finish(f: Future[Table]) -> None:
                self._release(w)
                _transfer(f, out)

            f.add_done_callback(finish)

        _when_all(ins, start, out)
        return out

    def _fire_for(self, index: int, node: Node) -> Callable[[list[Call]], None]:
        op = node.op
        assert op is not None

        def fire(calls: list[Call]) -> None:
            tables: list[Table] = [c.payload for c in calls]
            w = self._acquire(node, tables)
            batcher = self.batchers[index]

            def work() -> None:
                try:
                    outs = run_batched(op, tables, w.cache)
                except BaseException as e:
                    for c in calls:
                        c.future.set_exception(e)
                else:
                    for c, t in zip(calls, outs, strict=True):
                        c.future.set_result(t)
                finally:
                    self._release(w)
                    batcher.done()

            w.pool.submit(work)

        return fire

    def _batched(self, index: int, ins: Sequence[Future[Table]]) -> Future[Table]:
        out: Future[Table] = Future()

        def start(tables: list[Table]) -> None:
            f = self.batchers[index].submit(tables[0])
            f.add_done_callback(lambda f: _transfer(f, out))

        _when_all(ins, start, out)
        return out

    # -- the public face --------------------------------------------------------------------------------------
    def execute(self, table: Table) -> Future[Table]:
        self._refuse_closed()
        start: Future[Table] = Future()
        start.set_result(check_input(self.graph, table))
        handles: list[Future[Table]] = [start]
        for i, node in enumerate(self.graph.nodes[1:], start=1):
            ins = [handles[j] for j in node.inputs]
            if node.any:
                handles.append(_first(ins))
            elif node.batch:
                handles.append(self._batched(i, ins))
            else:
                handles.append(self._run(node, ins))
        return handles[-1]

    def cache_stats(self) -> dict[str, tuple[int, int]]:
        """``worker -> (hits, misses)`` of its cache."""
        return {w.name: (w.cache.hits, w.cache.misses) for pool in self.classes.values() for w in pool}

    def close(self) -> None:
        super().close()
        for pool in self.classes.values():
            for w in pool:
                w.pool.shutdown(wait=False, cancel_futures=True)
