"""Admission and deadlines: accept a request, shed it with a retry hint, refuse it as too large; and what a
request whose deadline passes gets.

**Admission** bounds the requests in flight (admitted, not yet answered) so that no queue grows without bound
however hard clients push. A call of ``n`` rows is admitted whole or not at all:

* ``accept`` when ``n`` fits in the room left;
* ``shed`` when it would fit an idle server but not now: the client is told to retry after ``retry_after_s``
  (HTTP 503 with ``Retry-After``);
* ``too_large`` when ``n`` exceeds the capacity itself: no wait can make it fit, so it is refused without a retry
  hint (HTTP 413), and a client that obeys ``Retry-After`` does not retry forever.

**Deadlines.** When a request's deadline passes before the last stage answered, it is answered with the prediction
of the last stage that ran (``fallback``, Clipper's deadline rule), or failed (HTTP 504) when no stage has run yet.

Both are pure: the caller passes the count in flight and what the request holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["AdmissionDecision", "AdmissionPolicy", "DeadlineDecision", "on_deadline"]


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """The verdict on one call of ``n`` rows (loggable, replayable)."""

    verdict: Literal["accept", "shed", "too_large"]
    n: int
    in_flight: int
    capacity: int | None
    retry_after_s: float | None = None  # set when shed

    @property
    def accepted(self) -> bool:
        return self.verdict == "accept"

    def reason(self) -> str:
        if self.verdict == "too_large":
            return f"a call of {self.n} rows exceeds the admission capacity of {self.capacity} requests in flight"
        return f"admission queue full ({self.in_flight} of {self.capacity} in flight)"


class AdmissionPolicy:
    """Admit, shed or refuse against a bound on requests in flight (``capacity=None``: unbounded)."""

    __slots__ = ("capacity", "retry_after_s")

    def __init__(self, capacity: int | None, retry_after_s: float = 1.0) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError("admission capacity must be at least 1")
        if not retry_after_s > 0:
            raise ValueError("retry_after_s must be positive")
        self.capacity = capacity
        self.retry_after_s = retry_after_s

    def decide(self, n: int, in_flight: int) -> AdmissionDecision:
        cap = self.capacity
        if cap is None or in_flight + n <= cap:
            return AdmissionDecision("accept", n, in_flight, cap)
        if n > cap:
            return AdmissionDecision("too_large", n, in_flight, cap)
        return AdmissionDecision("shed", n, in_flight, cap, self.retry_after_s)


@dataclass(frozen=True, slots=True)
class DeadlineDecision:
    """What a request whose deadline passed gets: the answer of model row ``fallback_row``, or a failure."""

    fallback_row: int | None

    @property
    def fails(self) -> bool:
        return self.fallback_row is None


def on_deadline(last_row_run: int | None) -> DeadlineDecision:
    """The deadline rule: fall back to the last stage that ran (``last_row_run``), or fail when none ran."""
    return DeadlineDecision(last_row_run)
