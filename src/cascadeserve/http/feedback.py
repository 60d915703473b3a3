"""Feedback: ``POST /v2/models/{m}/feedback`` takes true labels of answered requests and hands them on.

Every answered V2 request that carried an ``id`` (and every Clipper ``query_id``) is kept in a bounded window,
:class:`AnsweredLog`, with what the client was told per row (label, model, stage, certainty) and, when the
deployment selects among alternatives, what the selection layer needs (exp3's pick, exp4's member labels).
Feedback names a request by that id::

    {"id": "req-17", "label": 3}                 one row
    {"id": "req-17", "label": [3, 1]}            a request of several rows: one label per row
    {"ids": ["a", "b"], "labels": [3, 1]}        several requests at once

and it

* updates the selection policy (:class:`~cascadeserve.store.Selector`) of the request's context;
* appends ``(certainty, correct)`` to :class:`StageOutcomes`, a bounded window per answering model (cascade
  stage): what a threshold tuner reads to see how each stage's certainty predicts its correctness online;
* under ``serve --tune --tune-reference label``, gives the label to the runtime's tuning: a row whose request ran
  every stage of its gear (answered by the last stage, or an audited early exit whose continuation finished) adds
  its whole record to the gear's window with the label as the reference (``tuning_records`` in the answer counts
  them). Other rows (early exits that were not audited), and requests that never get feedback, add nothing.

An id that was never answered, or has left the window, is 404; a label that is not an integer (or a list of the
wrong length) is 400 naming the field. Feedback for a request is accepted once: the id leaves the window.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cascadeserve.policy.selection import Pick
from cascadeserve.store import Selector

__all__ = ["AnsweredLog", "AnsweredRow", "FeedbackError", "StageOutcomes", "apply_feedback", "parse_feedback"]


class FeedbackError(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True, slots=True)
class AnsweredRow:
    """One answered row as the feedback needs it."""

    label: int
    model: str
    stage: int
    certainty: float
    context: str = ""
    pick: Pick | None = None  # exp3: the alternative that served it and its probability
    members: tuple[int | None, ...] | None = None  # exp4: each alternative's label (None: no answer)
    request: int | None = None  # the runtime's request id (online tuning with labels as the reference)


class AnsweredLog:
    """The last ``capacity`` answered requests by id (oldest forgotten first)."""

    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self._rows: OrderedDict[str, tuple[AnsweredRow, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    def record(self, rid: str, rows: Sequence[AnsweredRow]) -> None:
        self._rows[rid] = tuple(rows)
        self._rows.move_to_end(rid)
        while len(self._rows) > self.capacity:
            self._rows.popitem(last=False)

    def take(self, rid: str) -> tuple[AnsweredRow, ...] | None:
        return self._rows.pop(rid, None)

    def peek(self, rid: str) -> tuple[AnsweredRow, ...] | None:
        return self._rows.get(rid)


@dataclass
class StageOutcomes:
    """A bounded window of labelled outcomes ``(certainty, correct)`` per answering model."""

    window: int = 10_000
    by_model: dict[str, deque[tuple[float, bool]]] = field(default_factory=dict)

    def add(self, model: str, certainty: float, correct: bool) -> None:
        q = self.by_model.get(model)
        if q is None:
            q = self.by_model[model] = deque(maxlen=self.window)
        q.append((certainty, correct))

    def outcomes(self, model: str) -> list[tuple[float, bool]]:
        return list(self.by_model.get(model, ()))

    def accuracy(self, model: str) -> float | None:
        q = self.by_model.get(model)
        return None if not q else sum(c for _, c in q) / len(q)


def _label(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise FeedbackError(f"{where}: expected an integer class label, got {json.dumps(value)}")
    return int(value)


def parse_feedback(obj: object) -> list[tuple[str, object]]:
    """``(id, label or labels)`` pairs from a feedback body (400 naming the field when malformed)."""
    if not isinstance(obj, dict):
        raise FeedbackError("body: expected a JSON object with 'id' and 'label' (or 'ids' and 'labels')")
    if "ids" in obj or "labels" in obj:
        ids, labels = obj.get("ids"), obj.get("labels")
        if not isinstance(ids, list) or not all(isinstance(i, str | int) for i in ids):
            raise FeedbackError("ids: expected a list of request ids")
        if not isinstance(labels, list) or len(labels) != len(ids):
            raise FeedbackError(f"labels: expected a list of {len(ids)} labels, one per id")
        return [(str(i), lab) for i, lab in zip(ids, labels, strict=True)]
    rid = obj.get("id")
    if not isinstance(rid, str | int) or isinstance(rid, bool):
        raise FeedbackError("id: expected the V2 request id (a string)")
    if "label" not in obj:
        raise FeedbackError("label: missing")
    return [(str(rid), obj["label"])]


def apply_feedback(
    log: AnsweredLog,
    pairs: Sequence[tuple[str, object]],
    outcomes: StageOutcomes,
    selector: Selector | None,
    on_label: Callable[[AnsweredRow, int], bool] | None = None,
) -> dict[str, Any]:
    """Check every pair first (nothing is applied when one is bad), then update the selection and the windows.

    ``on_label`` (online tuning with labels as the reference) hears every labelled row and says whether it added a
    whole record to a tuning window; their count is the answer's ``tuning_records``."""
    checked: list[tuple[str, tuple[AnsweredRow, ...], list[int]]] = []
    for k, (rid, value) in enumerate(pairs):
        rows = log.peek(rid)
        if rows is None:
            raise FeedbackError(f"id {rid!r}: no answered request with this id (unknown, expired or given)", 404)
        where = "label" if len(pairs) == 1 else f"labels[{k}]"
        if isinstance(value, list):
            if len(value) != len(rows):
                raise FeedbackError(f"{where}: {len(value)} labels for a request of {len(rows)} rows")
            labels = [_label(v, f"{where}[{j}]") for j, v in enumerate(value)]
        elif len(rows) != 1:
            raise FeedbackError(f"{where}: request {rid!r} had {len(rows)} rows; give a list of labels")
        else:
            labels = [_label(value, where)]
        checked.append((rid, rows, labels))
    correct = 0
    total = 0
    records = 0
    for rid, rows, labels in checked:
        log.take(rid)
        for row, label in zip(rows, labels, strict=True):
            ok = row.label == label
            correct += ok
            total += 1
            outcomes.add(row.model, row.certainty, ok)
            if on_label is not None and on_label(row, label):
                records += 1
            if selector is not None:
                if row.pick is not None:
                    selector.feedback_exp3(row.pick, ok, row.context)
                elif row.members is not None:
                    selector.feedback_exp4(row.members, label, row.context)
    out: dict[str, Any] = {"accepted": total, "correct": correct}
    if on_label is not None:
        out["tuning_records"] = records
    return out
