"""Threshold tuning while serving: the runtime's side of :class:`~cascadeserve.policy.tuning.OnlineTuning`.

The policy core decides everything: which early exits are audited (its :class:`~cascadeserve.policy.tuning.
AuditSampler`, every ``1/f``-th early exit, counted across batches exactly as the simulator counts them), what a
whole record weighs, and when and to what a gear's thresholds change (:meth:`OnlineTuning.decide`). This module only
applies it, with the simulator's semantics (``simulate.engine``'s ``complete_tuned``; both ask
:meth:`~cascadeserve.policy.tuning.AuditSampler.split` which rows are answered and which audited):

* **Trails.** Each request carries the ``(certainty, prediction)`` of every stage it ran (``Request.trail``).
* **Audits.** An audited early exit is answered at once, like any exit, and a *continuation* (a copy of the request
  whose future is already resolved, ``Request.audit``) is forwarded through the remaining stages. It holds no
  admission slot and no client waits on it, so it never delays an answer; it does take device time, as the
  planner charges (``GearPlan.audit_fraction``). A continuation that a model fails on is dropped silently.
* **Whole records.** A request (or continuation) that reaches its gear's last stage has a whole record. With the
  last stage as the reference (``"audit"``) it goes to the gear's window at once (weight ``1/f`` for a
  continuation, 1 otherwise). With labels as the reference (``"label"``) it waits in a bounded map by request id
  until the client's feedback gives its label (:meth:`ServingTuning.label`); a request without feedback, or whose
  record was not whole (an early exit that was not audited), never enters a label window.
* **Decisions.** At every producer tick, after the gear decision, :meth:`ServingTuning.decide` asks the policy,
  and ``Generation.apply_thresholds`` applies a change to the serving generation's
  :class:`~cascadeserve.policy.PlanTables` in place (nothing queued moves; requests in flight use the new
  thresholds from their next exit decision) and to wherever its transport holds other copies (the Ray backend
  broadcasts it to every server).
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning, ThresholdDecision
from cascadeserve.runtime.request import Answer, Request

__all__ = ["ServingTuning", "TuningFactory", "change_json", "continuation", "extend_trails"]

TuningFactory = Callable[[PlanTables], OnlineTuning]
"""Builds the tuning of a served plan from the generation's own tables (``OnlineTuning.for_plan(tables, ...)``)."""

_RECENT = 64  # threshold changes kept for GET /v2/cascade/plan
_KEEP_CHANGES = 256  # the policy's change log keeps this many while serving (it would grow without bound)


class ServingTuning:
    """One generation's online tuning: trails, audits, whole records, and applied threshold changes."""

    __slots__ = ("_pending", "changes_total", "labels", "pending_limit", "recent", "tables", "tuning")

    def __init__(
        self,
        tuning: OnlineTuning,
        tables: PlanTables,
        *,
        pending_limit: int = 65_536,
        labels: Callable[[Any], int] | None = None,
    ) -> None:
        self.tuning = tuning
        self.labels = labels  # a replay's known labels by payload (the reference simulator): no waiting for feedback
        tuning.bound_log(_KEEP_CHANGES)
        self.tables = tables
        self.pending_limit = pending_limit
        # label reference: request id -> (gear, certainties, predictions, audited), waiting for the client's label
        self._pending: OrderedDict[int, tuple[int, list[float], list[int], bool]] = OrderedDict()
        self.recent: deque[ThresholdDecision] = deque(maxlen=_RECENT)
        self.changes_total = 0

    @property
    def reference(self) -> str:
        return self.tuning.reference

    # -- batches -------------------------------------------------------------------------------------------------
    def on_batch(
        self, row: int, batch: Sequence[Request], sure: Sequence[bool], labels: Sequence[int],
        certs: Sequence[float], garbage: Sequence[bool],
    ) -> list[bool]:  # fmt: skip
        """Bookkeeping of one finished batch of model ``row``, before its answers are applied: extend every trail,
        feed whole records, and say which rows are audited early exits (the caller answers those and forwards a
        :func:`continuation` of each)."""
        whole = extend_trails(self.tables, row, batch, labels, certs, garbage)
        n = len(batch)
        gears = np.fromiter((req.gear for req in batch), dtype=np.int64, count=n)
        last = self.tables.next_row[gears, row] < 0
        # answered already: an audit continuation, a request its deadline answered, or a row that failed
        answered = np.fromiter((req.audit or req.done or bad for req, bad in zip(batch, garbage, strict=True)), bool, n)
        _, audit = self.tuning.auditor.split(np.asarray(sure, dtype=bool), last, answered)  # the policy's rule
        for gear, reqs in whole.items():
            self._whole(gear, reqs)
        return audit.tolist()  # type: ignore[no-any-return]

    def on_answer(self, req: Request, answer: Answer, row: int, *, first: bool = True) -> bool:
        """A remote stage (model ``row``) answered ``req`` and its trail came back with the answer (the Ray
        backend, whose servers run the batches): feed its whole record if it ran its gear's last stage, and say
        whether this early exit is audited (``first``: this answer reached the client; one answered already, by
        its deadline, is not an early exit, as in :meth:`on_batch`). The one sampler of the generation decides, in
        the order the answers arrive, as :meth:`on_batch` does in the order the batches finish."""
        if answer.fallback or req.trail is None:
            return False  # an earlier stage's answer after a failure or the deadline: neither exit nor record
        if self.tables.next_row[req.gear, row] < 0:
            self._whole(req.gear, [req])
            return False
        one = np.ones(1, dtype=bool)
        _, audit = self.tuning.auditor.split(one, ~one, np.array([not first]))  # sure here, not last: the policy's rule
        return bool(audit[0])

    def on_audit_record(self, req: Request) -> None:
        """An audit continuation came back from the servers with its whole trail: feed it (weight ``1/f``)."""
        if req.trail is not None and len(req.trail) == len(self.tables.gear_rows(req.gear)):
            self._whole(req.gear, [req])

    def _whole(self, gear: int, reqs: list[Request]) -> None:
        if self.tuning.reference == "label" and self.labels is not None:
            known = self.labels
            self._record(gear, reqs, np.array([known(r.payload) for r in reqs], dtype=np.int64))
            return
        if self.tuning.reference == "label":
            for req in reqs:
                assert req.trail is not None
                self._pending[req.rid] = (gear, [c for c, _ in req.trail], [p for _, p in req.trail], req.audit)
                self._pending.move_to_end(req.rid)
            while len(self._pending) > self.pending_limit:
                self._pending.popitem(last=False)
            return
        self._record(gear, reqs, None)

    def _record(self, gear: int, reqs: list[Request], labels: np.ndarray | None) -> None:
        """Whole records into the gear's window, against ``labels`` (default: the last stage's predictions)."""
        cert = np.array([[c for c, _ in r.trail or ()] for r in reqs], dtype=np.float64)
        pred = np.array([[p for _, p in r.trail or ()] for r in reqs], dtype=np.int64)
        audited = np.array([r.audit for r in reqs], dtype=bool)
        self.tuning.record(gear, cert, pred, pred[:, -1] if labels is None else labels, audited)

    def label(self, rid: int, label: int) -> bool:
        """The client's label for request ``rid``: its whole record enters the gear's window with the label as the
        reference. ``False`` when there is no whole record for it (not audited, not yet complete, or evicted)."""
        rec = self._pending.pop(rid, None)
        if rec is None:
            return False
        gear, cert, pred, audited = rec
        self.tuning.record(
            gear, np.array([cert]), np.array([pred], dtype=np.int64), np.array([label], dtype=np.int64),
            np.array([audited]),
        )  # fmt: skip
        return True

    @property
    def pending(self) -> int:
        """Whole records waiting for a label."""
        return len(self._pending)

    # -- ticks ---------------------------------------------------------------------------------------------------
    def decide(self, now: float, gear: int) -> ThresholdDecision | None:
        """The tick's tuning decision for ``gear`` (the policy's; the generation applies it with :meth:`applied`)."""
        return self.tuning.decide(now, gear, self.tables)

    def applied(self, d: ThresholdDecision) -> None:
        """Apply ``d`` to the tables and log it (recent changes, the count; the policy bounds its own log)."""
        self.tables.apply_thresholds(d)
        self.recent.append(d)
        self.changes_total += 1

    def window_accuracy(self, gear: int) -> float | None:
        """The accuracy of the thresholds in force on ``gear``'s window (``None`` while it is short)."""
        return self.tuning.tuner.window_accuracy(gear, self.tables.thresholds_of(gear))

    def snapshot(self) -> dict[str, object]:
        """What ``GET /v2/cascade/plan`` shows: the thresholds in force, targets, windows, and recent changes."""
        gears = []
        for g in range(self.tables.n_gears):
            acc = self.window_accuracy(g)
            gears.append(
                {
                    "gear": g,
                    "thresholds": list(self.tables.thresholds_of(g)),
                    "target": self.tuning.tuner.target[g],
                    "window": len(self.tuning.tuner.windows[g]),
                    "window_accuracy": None if acc is None or math.isnan(acc) else acc,
                }
            )
        return {
            "reference": self.tuning.reference,
            "audit_fraction": self.tuning.auditor.fraction,
            "changes_total": self.changes_total,
            "gears": gears,
            "recent_changes": [change_json(d) for d in self.recent],
        }


def extend_trails(
    tables: PlanTables, row: int, batch: Sequence[Request], labels: Sequence[int], certs: Sequence[float],
    garbage: Sequence[bool],
) -> dict[int, list[Request]]:  # fmt: skip
    """Append model ``row``'s ``(certainty, prediction)`` to every sound row's trail; return the requests, per gear,
    whose record is now whole (this was their gear's last stage)."""
    nxt = tables.next_row
    whole: dict[int, list[Request]] = {}
    for k, req in enumerate(batch):
        if garbage[k]:
            continue
        if req.trail is None:
            req.trail = []
        req.trail.append((float(certs[k]), int(labels[k])))
        if nxt[req.gear, row] < 0:
            whole.setdefault(req.gear, []).append(req)
    return whole


def change_json(d: ThresholdDecision) -> dict[str, object]:
    return {
        "at": d.at,
        "gear": d.gear,
        "old": list(d.old),
        "new": list(d.new),
        "window_accuracy": d.window_accuracy,
        "accuracy": d.accuracy,
        "work_ms": d.work_ms,
        "reason": d.reason,
    }


def continuation(req: Request, answer: Answer) -> Request:
    """An audited early exit's continuation through the rest of its cascade: the same request id, gear and trail, a
    future already resolved (so nothing can answer it twice, fail it, or wait on it) and no deadline."""
    fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    fut.set_result(answer)
    c = Request(req.rid, req.payload, req.arrival, req.gen, req.gear, fut)
    c.trail = list(req.trail or ())
    c.audit = True
    c.best = req.best
    return c
