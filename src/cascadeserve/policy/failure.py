"""What the requests of a batch get when their stage fails: the stage-failure rule, written once.

A stage can fail in two ways that call for different answers:

* a **local model** raised (a poison row, a bug, garbage scores): the failure may belong to one row only, so the
  batch is rerun one row at a time to find the rows that fail alone (``isolate_rows``), and a row that fails gets
  the answer of the earlier stage that ran, flagged ``fallback``, or HTTP 500 when none ran;
* a **request** the stage cannot serve as asked (:class:`~cascadeserve.errors.RequestError`: a prompt past its
  context): the client's to fix, so a row that fails alone gets HTTP 400 with the model's message where no earlier
  stage ran (an earlier stage's answer, flagged ``fallback``, where one did), the batch rerun row by row to find it;
* an **upstream** stage (a remote OpenAI-compatible server) is down, answered an error, or timed out: every row of
  the batch fails alike and rerunning rows one by one would only multiply the wait (a timeout per row), so the
  whole batch falls back at once: each request gets the earlier stage's answer, flagged ``fallback`` as the deadline
  rule does, or, where no earlier stage ran, fails with HTTP 502 (the upstream answered an error or could not be
  reached) or 504 (it did not answer within its timeout).

The runtime (``runtime/consumer.py``) applies the decision; the earlier answer itself is the deadline rule's
(:func:`~cascadeserve.policy.admission.on_deadline`: the last stage that ran). The simulator models no failures,
so it has nothing to apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FailureKind", "StageFailureDecision", "on_stage_failure"]

FailureKind = Literal["model", "request", "upstream_error", "upstream_timeout"]


@dataclass(frozen=True, slots=True)
class StageFailureDecision:
    """How a failed batch is answered: rerun it row by row (``isolate_rows``) or fall back at once; the HTTP
    ``status`` of a request that no earlier stage can answer; and whether an earlier answer is used (``fallback``)."""

    kind: FailureKind
    isolate_rows: bool
    status: int
    fallback: bool = True


_STATUS: dict[str, int] = {"model": 500, "request": 400, "upstream_error": 502, "upstream_timeout": 504}


def on_stage_failure(kind: FailureKind) -> StageFailureDecision:
    """The stage-failure rule (module docstring)."""
    if kind not in _STATUS:
        raise ValueError(f"unknown stage failure kind {kind!r}")
    return StageFailureDecision(kind, isolate_rows=kind in ("model", "request"), status=_STATUS[kind])
