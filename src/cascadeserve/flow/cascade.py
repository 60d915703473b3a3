"""A cascade is a dataflow, too: recognise the paper's cascade shape and serve it with gears.

:func:`recognise` reads a flow *as written* (before the optimiser) and returns a :class:`CascadeShape` when it
is a cascade, or the reason it is not. The recognised shape, for ``k ≥ 1`` models::

    x  = fl.<pre>...                                  # zero or more map/filter/lookup operators (no model)
    s1 = x.map(model(m1))
    s2 = s1.filter(uncertain(t1)).map(model(m2))      # each later stage: the rows the previous one is unsure of
    ...
    fl.output = s1.join(s2, how="left")...join(sk, how="left").map(cascade_answer).<post>...

with every join on the row id, every model reading the same input column, every ``uncertain`` reading its
stage's ``conf`` column, ``cascade_answer`` reading the stages' ``label``/``conf`` columns, and ``<post>`` zero or
more map/filter operators. Nothing else may be in the flow (a second branch makes it something else). A flow
whose last step is the paper's ``max_conf`` (a user function) is *not* recognised: taking the most confident
answer is not what a cascade answers, so serving it with gears could change the answers.

``deploy(backend="gears", ...)`` builds a :class:`GearExecutor`: the pre- and post-processing operators run in
this process, the cascade on cascadeserve's gear runtime (:func:`~cascadeserve.runtime.local_runtime`, the same
producer, batch triggers, forwarding and device threads as ``cascadeserve serve``). Its plan is ``plan=`` if
given (served as is), else the gear planner's (``planner=`` with ``profile=``, ``devices=``, ``slo=`` and
``max_qps=``), else a one-gear :func:`~cascadeserve.plan.fixed_plan` of exactly the flow's cascade (``profile=``
and optionally ``devices=``, ``min_queue=``, ``max_wait_ms=``). With the flow's own thresholds (a fixed plan)
the answers are the flow's answers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cascadeserve.cascade import Cascade
from cascadeserve.flow.combine import Join
from cascadeserve.flow.executor import Executor, check_input
from cascadeserve.flow.graph import Graph
from cascadeserve.flow.kvs import KVStore, WorkerCache
from cascadeserve.flow.models import CascadeAnswer, ModelOp, Uncertain
from cascadeserve.flow.operators import Filter, Lookup, Map, Operator
from cascadeserve.flow.schema import FlowError, Schema
from cascadeserve.flow.table import Table, _RowId
from cascadeserve.plan import SLO, Device, GearPlan, fixed_plan
from cascadeserve.profile import Profile

__all__ = ["CascadeShape", "GearExecutor", "NotACascade", "recognise"]


class NotACascade(FlowError):
    """The flow is not of a shape :func:`recognise` knows; the message says where it differs."""


@dataclass(frozen=True)
class CascadeShape:
    pre: tuple[Operator, ...]
    models: tuple[ModelOp, ...]
    thresholds: tuple[float, ...]
    post: tuple[Operator, ...]
    answer: Operator  # the map(cascade_answer)
    column: str  # the input column every model reads

    @property
    def cascade(self) -> Cascade:
        return Cascade(tuple(m.name for m in self.models), self.thresholds)


def _model(op: Operator | None) -> ModelOp | None:
    return op.fn if isinstance(op, Map) and isinstance(op.fn, ModelOp) else None


def _plain(op: Operator | None) -> bool:
    if isinstance(op, (Filter, Lookup)):
        return not isinstance(getattr(op, "fn", None), Uncertain)
    return isinstance(op, Map) and not isinstance(op.fn, (ModelOp, CascadeAnswer))


def recognise(graph: Graph) -> CascadeShape:
    """The cascade a flow is, or :class:`NotACascade` saying why not."""
    nodes = graph.nodes
    used: set[int] = {0}
    i = graph.output
    post: list[Operator] = []
    while _plain(nodes[i].op) and not isinstance(nodes[i].op, Lookup):
        post.append(nodes[i].op)  # type: ignore[arg-type]
        used.add(i)
        i = nodes[i].inputs[0]
    ans = nodes[i].op
    if not (isinstance(ans, Map) and isinstance(ans.fn, CascadeAnswer)):
        raise NotACascade(f"the output is not map(cascade_answer) followed by maps/filters (found {nodes[i].label})")
    used.add(i)
    answer_fn: CascadeAnswer = ans.fn
    j = nodes[i].inputs[0]
    stages: list[int] = []
    while isinstance(nodes[j].op, Join):
        join = nodes[j].op
        assert isinstance(join, Join)
        if join.how != "left" or not isinstance(join.key, _RowId):
            raise NotACascade(f"{join.label}: a cascade joins its stages with a left join on the row id")
        used.add(j)
        stages.append(nodes[j].inputs[1])
        j = nodes[j].inputs[0]
    stages.append(j)
    stages.reverse()
    models: list[ModelOp] = []
    thresholds: list[float] = []
    for k, s in enumerate(stages):
        m = _model(nodes[s].op)
        if m is None:
            raise NotACascade(f"stage {k + 1} ({nodes[s].label}) is not a model operator")
        if (m.label, m.conf) != (answer_fn.label, answer_fn.conf):
            raise NotACascade(f"model {m.name!r} writes {m.label!r}/{m.conf!r}, cascade_answer reads others")
        models.append(m)
        used.add(s)
        if k == 0:
            continue
        f = nodes[s].inputs[0]
        flt = nodes[f].op
        if not (isinstance(flt, Filter) and isinstance(flt.fn, Uncertain)) or nodes[f].inputs != (stages[k - 1],):
            raise NotACascade(f"stage {k + 1} must read filter(uncertain(t)) of stage {k}")
        if flt.fn.conf != models[k - 1].conf:
            raise NotACascade(f"uncertain reads {flt.fn.conf!r}, stage {k} writes {models[k - 1].conf!r}")
        if not 0.0 <= flt.fn.threshold <= 1.0:
            raise NotACascade(f"threshold {flt.fn.threshold} is outside [0, 1]")
        thresholds.append(flt.fn.threshold)
        used.add(f)
    if len({m.name for m in models}) != len(models):
        raise NotACascade("a cascade cannot use one model twice")
    pre: list[Operator] = []
    p = nodes[stages[0]].inputs[0]
    while p != 0:
        if not _plain(nodes[p].op) or len(nodes[p].inputs) != 1:
            raise NotACascade(f"before the first model only maps, filters and lookups may run (found {nodes[p].label})")
        pre.append(nodes[p].op)  # type: ignore[arg-type]
        used.add(p)
        p = nodes[p].inputs[0]
    pre.reverse()
    if used != set(range(len(nodes))):
        extra = sorted(set(range(len(nodes))) - used)
        raise NotACascade(f"the flow has operators outside the cascade shape: {[nodes[x].label for x in extra]}")
    in_schema: Schema = pre[-1].out if pre else graph.schema
    col = models[0].input or in_schema[0].name
    for m in models:
        if (m.input or in_schema[0].name) != col:
            raise NotACascade(f"every model must read the same input column ({col!r}); {m.name!r} does not")
    if len({m.certainty_name for m in models}) != 1:
        raise NotACascade("every model of a cascade uses the same certainty function")
    return CascadeShape(tuple(pre), tuple(models), tuple(thresholds), tuple(post[::-1]), ans, col)


class GearExecutor(Executor):
    """A recognised cascade served by the gear runtime; pre/post-processing in this process."""

    backend = "gears"

    def __init__(
        self,
        graph: Graph,
        store: KVStore | None = None,
        *,
        profile: Profile | None = None,
        plan: GearPlan | None = None,
        devices: Sequence[Device] | None = None,
        planner: Any = None,
        slo: SLO | None = None,
        max_qps: float | None = None,
        min_queue: int = 1,
        max_wait_ms: float | None = None,
        threads: int = 4,
    ) -> None:
        super().__init__(graph)
        self.shape = recognise(graph)
        self.column = self.shape.column
        self.plan = self._plan(profile, plan, devices, planner, slo, max_qps, min_queue, max_wait_ms)
        missing = sorted(set(self.plan.models()) - {m.name for m in self.shape.models})
        if missing:
            raise FlowError(f"deploy(backend='gears'): the plan uses models the flow does not have: {missing}")
        self.ctx = WorkerCache(store)
        from cascadeserve.runtime import local_runtime  # deferred: asyncio lives in the runtime, not in the core

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="flow-gears-loop", daemon=True)
        self._thread.start()
        models = {m.name: m.scores for m in self.shape.models}
        self.runtime = local_runtime(self.plan, models, certainty=self.shape.models[0].certainty_name)
        self._call(self.runtime.start())
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="flow-gears")

    def _plan(
        self,
        profile: Profile | None,
        plan: GearPlan | None,
        devices: Sequence[Device] | None,
        planner: Any,
        slo: SLO | None,
        max_qps: float | None,
        min_queue: int,
        max_wait_ms: float | None,
    ) -> GearPlan:
        if plan is not None:
            return plan
        if profile is None:
            raise FlowError("deploy(backend='gears'): give plan=, or profile= (and planner=, slo=, max_qps=)")
        hw = list(devices) if devices else [Device(name="flow0", memory_mb=1e6)]
        if planner is not None:
            if slo is None or max_qps is None:
                raise FlowError("deploy(backend='gears', planner=...): give slo= and max_qps= too")
            fitted: GearPlan = planner.fit(profile, hw, slo, max_qps).plan_
            return fitted
        return fixed_plan(profile, self.shape.cascade, hw, min_queue=min_queue, max_wait_ms=max_wait_ms)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _serve(self, payloads: list[Any]) -> list[Any]:
        reqs = self.runtime.submit(payloads)
        return list(await asyncio.gather(*[r.future for r in reqs]))

    def _run(self, table: Table) -> Table:
        for op in self.shape.pre:
            table = op.apply([table], self.ctx)
        payloads = table.column(self.column)
        answers = self._call(self._serve(payloads)) if payloads else []
        out = self.shape.answer.out
        t = Table.of(out, [(int(a.label), float(a.certainty)) for a in answers], list(table.ids))
        for op in self.shape.post:
            t = op.apply([t], self.ctx)
        return t

    def execute(self, table: Table) -> Future[Table]:
        self._refuse_closed()
        return self._pool.submit(self._run, check_input(self.graph, table))

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._pool.shutdown(wait=True)
        self._call(self.runtime.stop(grace_s=1.0))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
