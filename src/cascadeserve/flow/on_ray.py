"""The Ray executor: ``deploy(backend="ray")`` runs every task on Ray actors, for flows that span machines.

At deploy time ``workers`` CPU actors (and ``gpu_workers`` actors holding one GPU each; GPU operators run on the
CPU actors when there are none) receive the compiled graph once; each keeps its own
:class:`~cascadeserve.flow.kvs.WorkerCache` in front of the store and runs up to ``threads`` tasks at once (so
competing replicas of a slow operator overlap). An execution is driven from a thread of this process that walks
the graph in order and chains Ray object references: a task's inputs are the references its parents returned,
so intermediate tables move between actors through Ray's object store, never through the driver, and an unfused
chain of n operators costs n actor calls where a fused one costs one. The exceptions:

* ``anyof`` waits (``ray.wait``) for the first of its inputs and passes that reference on;
* a batch-aware node queues its call in the node's :class:`~cascadeserve.flow.batching.Batcher`, which sends up
  to ``max_batch`` calls to one actor in one invocation that returns one reference per call;
* a node dispatched by locality is sent to the actor :func:`cascadeserve.policy.dispatch.pick_worker` picks from
  the directory of which actor has fetched which key (for a key read from a column, the driver reads the
  node's small input table to learn it: the paper's "to be continued" split before a lookup).

Loads are the actor calls sent so far (completions are not tracked per call), so plain dispatch is round-robin.
The store must reach the actors: a :class:`~cascadeserve.flow.kvs.RedisStore` is shared; a
:class:`~cascadeserve.flow.kvs.MemoryStore` is copied to each actor at deploy time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import ray

from cascadeserve.backends.ray.loopback import start_local
from cascadeserve.flow.batching import Batcher, Call, run_batched
from cascadeserve.flow.executor import Executor, check_input
from cascadeserve.flow.graph import Graph, Node
from cascadeserve.flow.kvs import KVStore, WorkerCache
from cascadeserve.flow.operators import Lookup
from cascadeserve.flow.table import Table
from cascadeserve.policy.dispatch import pick_worker

__all__ = ["FlowWorker", "RayExecutor"]


class FlowWorker:
    """One Ray actor: runs nodes of the deployed graph against its own cache."""

    def __init__(self, graph: Graph, store: KVStore | None, cache_bytes: int) -> None:
        self.graph = graph
        self.cache = WorkerCache(store, cache_bytes)

    def run(self, index: int, *tables: Table) -> Table:
        op = self.graph.nodes[index].op
        assert op is not None
        return op.apply(list(tables), self.cache)

    def run_batch(self, index: int, *tables: Table) -> Any:
        op = self.graph.nodes[index].op
        assert op is not None
        outs = run_batched(op, list(tables), self.cache)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def stats(self) -> tuple[int, int]:
        return self.cache.hits, self.cache.misses

    def ready(self) -> bool:
        return True


_RemoteWorker: Any = ray.remote(FlowWorker)


class RayExecutor(Executor):
    backend = "ray"

    def __init__(
        self,
        graph: Graph,
        store: KVStore | None = None,
        *,
        workers: int = 2,
        gpu_workers: int = 0,
        threads: int = 4,
        cache_bytes: int = 1 << 30,
        driver_threads: int = 64,
    ) -> None:
        super().__init__(graph)
        if not ray.is_initialized():  # a new local instance, on 127.0.0.1 only (ray.init() in the caller joins one)
            start_local(include_dashboard=False, log_to_driver=False, configure_logging=False)
        cpu = [
            _RemoteWorker.options(num_cpus=0, max_concurrency=threads).remote(graph, store, cache_bytes)
            for _ in range(max(1, workers))
        ]
        gpu = [
            _RemoteWorker.options(num_cpus=0, num_gpus=1, max_concurrency=threads).remote(graph, store, cache_bytes)
            for _ in range(gpu_workers)
        ]
        self.classes: dict[str, list[Any]] = {"cpu": cpu, "gpu": gpu or cpu}
        ray.get([a.ready.remote() for a in cpu + gpu])
        self._loads: dict[str, list[int]] = {k: [0] * len(v) for k, v in self.classes.items()}
        self._directory: dict[tuple[str, str], set[int]] = {}
        self._lock = threading.Lock()
        self.locality_hits = 0
        self._drivers = ThreadPoolExecutor(max_workers=driver_threads, thread_name_prefix="flow-ray-driver")
        self._watchers = ThreadPoolExecutor(max_workers=8, thread_name_prefix="flow-ray-watch")
        self.batchers: dict[int, Batcher] = {}
        for i, n in enumerate(graph.nodes):
            if n.batch and n.op is not None:
                self.batchers[i] = Batcher(n.max_batch, len(self.classes[n.op.resources]), self._fire_for(i, n))

    # -- dispatch ---------------------------------------------------------------------------------------------
    def _pick(self, node: Node, key: str | None) -> Any:
        assert node.op is not None
        cls = node.op.resources
        with self._lock:
            loads = self._loads[cls]
            holders = self._directory.get((cls, key), set()) if key is not None else set()
            d = pick_worker(loads, holders)
            loads[d.worker] += 1
            if key is not None:
                self.locality_hits += int(d.local)
                self._directory.setdefault((cls, key), set()).add(d.worker)
        return self.classes[cls][d.worker]

    def _key(self, node: Node, refs: Sequence[Any]) -> str | None:
        lk = node.dispatch
        if not isinstance(lk, Lookup):
            return None
        if isinstance(lk.key, str):
            return lk.key
        table: Table = ray.get(refs[0])
        return lk.key_of(table.rows_[0]) if len(table) else None

    # -- batching ---------------------------------------------------------------------------------------------
    def _fire_for(self, index: int, node: Node) -> Any:
        def fire(calls: list[Call]) -> None:
            actor = self._pick(node, None)
            refs = actor.run_batch.options(num_returns=len(calls)).remote(index, *[c.payload for c in calls])
            refs = [refs] if len(calls) == 1 else list(refs)
            for c, r in zip(calls, refs, strict=True):
                c.future.set_result(r)
            batcher = self.batchers[index]

            def watch() -> None:
                try:
                    ray.wait(refs, num_returns=len(refs), fetch_local=False)
                finally:
                    batcher.done()

            self._watchers.submit(watch)

        return fire

    # -- execution --------------------------------------------------------------------------------------------
    def _drive(self, table: Table) -> Table:
        refs: list[Any] = [ray.put(table)]
        for i, node in enumerate(self.graph.nodes[1:], start=1):
            ins = [refs[j] for j in node.inputs]
            if node.any:
                ready, _ = ray.wait(ins, num_returns=1, fetch_local=False)
                refs.append(ready[0])
            elif node.batch:
                refs.append(self.batchers[i].submit(ins[0]).result())
            else:
                actor = self._pick(node, self._key(node, ins))
                refs.append(actor.run.remote(i, *ins))
        out: Table = ray.get(refs[-1])
        return out

    def execute(self, table: Table) -> Future[Table]:
        self._refuse_closed()
        start = check_input(self.graph, table)
        return self._drivers.submit(self._drive, start)

    def cache_stats(self) -> dict[str, tuple[int, int]]:
        actors = [a for pool in (self.classes["cpu"], self.classes["gpu"]) for a in pool]
        seen: dict[int, Any] = {id(a): a for a in actors}
        return {f"worker{k}": tuple(ray.get(a.stats.remote())) for k, a in enumerate(seen.values())}

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._drivers.shutdown(wait=False, cancel_futures=True)
        self._watchers.shutdown(wait=False, cancel_futures=True)
        for pool in self.classes.values():
            for a in pool:
                with contextlib.suppress(Exception):  # already gone (a shared CPU pool is listed twice)
                    ray.kill(a)
