"""Online threshold tuning on the Ray backend: trails on the servers, audits and whole records at the front end.

The in-process runtime keeps one :class:`~cascadeserve.runtime.tuning.ServingTuning` per generation, so one
:class:`~cascadeserve.policy.tuning.AuditSampler` sequence decides which early exits are audited. On Ray the
batches run on the servers, so the work splits without a second sampler:

* **Servers** (:class:`ServerTuning`, a server generation's ``tuning``) only extend each request's trail with every
  stage's ``(certainty, prediction)``; the trail travels with a forwarded request to the next server and back with
  its answer (``accept`` streams ``(index, result, trail)``). A server never audits on its own: it answers every
  early exit as usual. An audit continuation that reaches its gear's last stage is resolved there (with that stage's
  prediction; nobody waits on it) so that its whole trail flows back; one whose scores come back non-finite is
  failed there, so nothing of it is left on a server.
* **The front end** owns the generation's real ``ServingTuning`` (the tuner, its windows and its one sampler). As
  each answer arrives (:meth:`~cascadeserve.runtime.tuning.ServingTuning.on_answer`) a whole record enters the
  gear's window, and an early exit asks the sampler; an audited one has already been answered (the client's future
  is resolved first) and a :func:`~cascadeserve.runtime.tuning.continuation` of it is routed, by the policy like
  any forward, to the next stage's replica. When the continuation's trail comes back whole it enters the window
  with the audit weight (:meth:`~cascadeserve.runtime.tuning.ServingTuning.on_audit_record`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cascadeserve.policy import PlanTables
from cascadeserve.runtime import Answer, Clock, Generation, Request, ServingError
from cascadeserve.runtime.request import Best
from cascadeserve.runtime.tuning import ServingTuning, continuation, extend_trails

__all__ = ["ServerTuning", "on_remote_answer"]


class ServerTuning(ServingTuning):
    """A server generation's tuning: trails only. The tuner, its windows and the audit sampler live at the front
    end (one sequence per generation, as in the in-process runtime), so this never decides nor records anything;
    only :meth:`on_batch` is ever called on it (servers have no producer tick)."""

    __slots__ = ("clock",)

    def __init__(self, tables: PlanTables, clock: Clock) -> None:  # no OnlineTuning here: nothing is decided here
        self.tables = tables
        self.clock = clock

    def on_batch(
        self, row: int, batch: Sequence[Request], sure: Sequence[bool], labels: Sequence[int],
        certs: Sequence[float], garbage: Sequence[bool],
    ) -> list[bool]:  # fmt: skip
        whole = extend_trails(self.tables, row, batch, labels, certs, garbage)
        for reqs in whole.values():
            for req in reqs:
                if req.audit and not req.done:  # a continuation ran its last stage: send its whole trail back
                    trail = req.trail or [(math.nan, -1)]
                    req.resolve(
                        Answer(trail[-1][1], trail[-1][0], "", len(trail) - 1, req.gear, req.queue_s,
                               req.compute_s, self.clock.now())
                    )  # fmt: skip
        for k, req in enumerate(batch):
            if garbage[k] and req.audit:  # the consumer drops it; here its caller is waiting: end it
                req.fail(ServingError("an audit continuation got non-finite scores"))
        return [False] * len(batch)


def on_remote_answer(gen: Generation, req: Request, answer: Answer, *, first: bool) -> None:
    """The front end's bookkeeping of one answer that came back from the servers with ``req.trail``
    (``first``: it answered the client; ``False`` for an audit continuation, or a request that its deadline
    answered already). Off the critical path: the client's future is resolved before this runs."""
    tuning = gen.tuning
    if tuning is None or isinstance(tuning, ServerTuning):  # a server only passes trails back
        return
    if req.audit:
        tuning.on_audit_record(req)
        return
    if not answer.model:
        return
    row = gen.model_names.index(answer.model)
    if tuning.on_answer(req, answer, row, first=first):
        req.best = Best(answer.label, answer.certainty, row)
        gen.forward(continuation(req, answer), row, gen.clock.now())
