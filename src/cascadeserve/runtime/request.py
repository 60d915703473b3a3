"""Requests and answers: what travels through the cascade and what comes back.

A :class:`Request` is one sample. It keeps the plan generation and the gear it was admitted under for its whole
life (as in the simulator: a gear switch changes the cascade only for later arrivals). It collects the time it
spent queued and computing, and the prediction of the last stage that ran, which a deadline turns into a
``fallback`` answer. Its future is resolved through :meth:`Request.resolve` and :meth:`Request.fail` only, which
guarantee that a request is answered exactly once: the second attempt (a batch finishing after the deadline
already answered, say) is refused and returns ``False``.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Protocol

from cascadeserve.errors import RequestError, UpstreamError
from cascadeserve.models.base import TextOutput
from cascadeserve.policy.failure import FailureKind, StageFailureDecision, on_stage_failure
from cascadeserve.runtime.clock import Cancellable

__all__ = [
    "Answer",
    "Best",
    "ClientGone",
    "DeadlineExceeded",
    "ModelFailed",
    "Overloaded",
    "Owner",
    "Request",
    "RuntimeStopped",
    "ServingError",
    "TooLarge",
    "stage_failure",
]


class ServingError(Exception):
    """A request could not be answered; ``status`` is the HTTP status the front end should send."""

    status = 500


class Overloaded(ServingError):
    """The admission queue is full (HTTP 503 with Retry-After: ``retry_after_s``)."""

    status = 503

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TooLarge(ServingError):
    """One call holds more rows than the admission capacity: no retry can succeed (HTTP 413)."""

    status = 413


class RuntimeStopped(ServingError):
    """The runtime is stopping or stopped and takes no new work (HTTP 503)."""

    status = 503


class ClientGone(ServingError):
    """The client disconnected before the request started; nobody is left to answer (HTTP 499, logged only)."""

    status = 499


class DeadlineExceeded(ServingError):
    """The request's deadline passed before any stage ran (HTTP 504)."""

    status = 504


class ModelFailed(ServingError):
    """A model raised while running the batch holding this request (HTTP 500 naming the model)."""

    status = 500

    def __init__(self, model: str, cause: BaseException, status: int = 500) -> None:
        what = str(cause) if isinstance(cause, UpstreamError) else f"{type(cause).__name__}: {cause}"
        # a request the stage cannot serve as asked: the model's own words are the client's answer (400)
        super().__init__(str(cause) if isinstance(cause, RequestError) else f"model {model!r} failed: {what}")
        self.model = model
        self.status = status  # 400 for a request error, 502/504 for an upstream stage (policy/failure.py)
        self.param = cause.param if isinstance(cause, RequestError) else None
        self.code = cause.code if isinstance(cause, RequestError) else None


def stage_failure(model: str, cause: BaseException) -> tuple[StageFailureDecision, ModelFailed]:
    """The stage-failure rule's decision for a batch of ``model`` that raised ``cause``, and the error its
    requests get where no earlier stage ran."""
    kind: FailureKind = "model"
    if isinstance(cause, UpstreamError):
        kind = "upstream_timeout" if cause.kind == "timeout" else "upstream_error"
    elif isinstance(cause, RequestError):
        kind = "request"
    decision = on_stage_failure(kind)
    return decision, ModelFailed(model, cause, decision.status)


class Owner(Protocol):
    """What a request needs from the plan generation that admitted it (the runtime's ``Generation``)."""

    def release(self, req: Request, answer: Answer | None, error: ServingError | None) -> None:
        """Called exactly once per request, when it is answered or failed."""
        ...

    def answer_early(self, req: Request, now: float, error: ServingError) -> bool:
        """Answer ``req`` now from the last stage that ran, or fail it with ``error`` (deadlines, lost servers)."""
        ...


@dataclass(frozen=True, slots=True)
class Answer:
    """The runtime's answer to one request."""

    label: int
    certainty: float
    model: str  # the model that answered
    stage: int  # its 0-based stage in the request's cascade
    gear: int  # the gear the request was admitted under
    queue_s: float  # total time spent waiting in queues
    compute_s: float  # total time spent in batches (every stage that ran)
    finished: float  # clock time of the answer
    fallback: bool = False  # answered by an earlier stage because the deadline passed
    emulated: bool = False
    cached: bool = False  # answered from the prediction cache, without queueing
    output: TextOutput | None = None  # a generative stage's answer (text and tokens); None for a classifier


@dataclass(frozen=True, slots=True)
class Best:
    """The prediction of the last stage that ran on a request: what a deadline or a lost server falls back to."""

    label: int
    certainty: float
    row: int  # the model row that made it


class Request:
    """One sample in flight (mutable bookkeeping, touched only on the event loop)."""

    __slots__ = (
        "arrival",
        "audit",
        "best",
        "best_output",
        "cache_epoch",
        "cache_key",
        "compute_s",
        "deadline",
        "enqueued",
        "future",
        "gear",
        "gen",
        "payload",
        "queue",
        "queue_s",
        "rid",
        "timer",
        "trail",
    )

    def __init__(
        self,
        rid: int,
        payload: Any,
        arrival: float,
        gen: Owner,
        gear: int,
        future: asyncio.Future[Answer],
        deadline: float = math.inf,
    ) -> None:
        self.rid = rid
        self.payload = payload
        self.arrival = arrival
        self.gen = gen
        self.gear = gear
        self.future = future
        self.deadline = deadline
        self.enqueued = arrival
        self.queue: Any = None  # the ReplicaQueue holding it, if any
        self.queue_s = 0.0
        self.compute_s = 0.0
        self.best: Best | None = None  # the last stage that ran: its prediction, for a fallback
        self.best_output: TextOutput | None = None  # and its generated answer, for a generative stage
        self.timer: Cancellable | None = None
        self.cache_key: Any = None  # the prediction cache's key when the runtime caches answers (a miss)
        self.cache_epoch = 0  # the cache's epoch at lookup: an answer of an invalidated epoch is not stored
        # Threshold tuning (runtime/tuning.py): (certainty, prediction) of every stage run so far, and whether this
        # is an audit continuation (an answered early exit running the rest of its cascade, off the critical path)
        self.trail: list[tuple[float, int]] | None = None
        self.audit = False

    @property
    def done(self) -> bool:
        return self.future.done()

    def resolve(self, answer: Answer) -> bool:
        """Answer the request; ``False`` (and nothing changes) if it was already answered."""
        if self.future.done():
            return False
        self.future.set_result(answer)
        self._finish(answer, None)
        return True

    def fail(self, error: ServingError) -> bool:
        """Fail the request; ``False`` if it was already answered."""
        if self.future.done():
            return False
        self.future.set_exception(error)
        self._finish(None, error)
        return True

    def _finish(self, answer: Answer | None, error: ServingError | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.gen.release(self, answer, error)
