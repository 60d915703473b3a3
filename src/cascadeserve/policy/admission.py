"""Admission, readiness and deadlines: accept a request, shed it with a retry hint, refuse it as too large; whether
the server should take traffic; and what a request whose deadline passes gets.

**Admission** bounds the requests in flight (admitted, not yet answered) so that no queue grows without bound
however hard clients push. A call of ``n`` rows is admitted whole or not at all:

* ``accept`` when ``n`` fits in the room left;
* ``shed`` when it would fit an idle server but not now: the client is told to retry after ``retry_after_s``
  (HTTP 503 with ``Retry-After``);
* ``too_large`` when ``n`` exceeds the bound itself: no wait can make it fit, so it is refused without a retry
  hint (HTTP 413), and a client that obeys ``Retry-After`` does not retry forever.

**Admission by time.** A bound on the *count* in flight says nothing about latency: 4,096 requests are 25 s of
queue for a plan that drains 160 per second. With a :class:`WaitBudget` the bound is derived from the plan's
capacity (the QPS its highest gear serves, the rate at which the backlog drains) and the latency SLO: a request
that would wait longer than ``max_wait_slos`` SLOs behind the backlog already admitted is shed at once, and told to
retry when the backlog will have drained enough to hold it (``Retry-After`` from the backlog, not a constant). A
count bound, if given, still applies (the tighter one holds).

**Admission by the front door's lag.** Both bounds count requests already admitted; requests still waiting in the
kernel's socket buffers for the event loop to read them are invisible to them. When the loop is the bottleneck (on
a 2-core host at twice its capacity, every request parsed, shed or not, before admission sees it) that unseen
queue grows without bound: the admitted requests kept the loop busy, the rest waited to be refused (measured: an
accepted p99 of 1.4–31 s as the client saw it, against 0.5–0.75 s from admission to answer). So with a
budget, a call is also shed while the loop runs more than ``max_lag_slos`` SLOs late (``lag_s``, measured by the
runtime on a real clock; always 0 on a virtual one) and the backlog admitted is at least a quarter of the bound:
refusing is cheaper than serving, so the loop catches up, and the floor keeps a lone request on a host that merely
paused (a scheduler hiccup, a GC) from being refused.

The plan's capacity is a promise made on profiled runtimes; a deployment that drains slower (shared cores, a cold
cache) would let requests wait longer than the budget. :class:`DrainMeter` measures the rate at which answers
leave while a backlog is present, and the time bound uses the lower of the two (``drain_qps`` in
:meth:`AdmissionPolicy.decide`), so the bound holds on the machine as it is.

**Readiness.** :func:`readiness` says whether the server should take traffic: not while stopping, not while
admission has been full for longer than a producer tick (a load balancer should send elsewhere), and not while a
consumer is stalled (a batch running, or requests waiting, far longer than any trigger allows).

**Deadlines.** When a request's deadline passes before the last stage answered, it is answered with the prediction
of the last stage that ran (``fallback``, Clipper's deadline rule), or failed (HTTP 504) when no stage has run yet.
The same rule answers the rows of a model that raised or returned garbage.

All of it is pure: the caller passes the count in flight, durations and what the request holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from cascadeserve.policy.kernels import NO_LIMIT, admitted

__all__ = [
    "DEFAULT_SLO_MS",
    "AdmissionDecision",
    "AdmissionPolicy",
    "DeadlineDecision",
    "DrainMeter",
    "Readiness",
    "WaitBudget",
    "on_deadline",
    "readiness",
]

DEFAULT_SLO_MS = 1000.0  # the latency objective assumed for a plan without a p95 SLO (an accuracy SLO, or none)


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """The verdict on one call of ``n`` rows (loggable, replayable)."""

    verdict: Literal["accept", "shed", "too_large"]
    n: int
    in_flight: int
    capacity: int | None
    retry_after_s: float | None = None  # set when shed
    lag_s: float = 0.0  # set when shed because the front door runs this late (module docstring)

    @property
    def accepted(self) -> bool:
        return self.verdict == "accept"

    def reason(self) -> str:
        if self.verdict == "too_large":
            return f"a call of {self.n} rows exceeds the admission capacity of {self.capacity} requests in flight"
        if self.lag_s > 0:
            return f"the front door is {self.lag_s * 1000:.0f} ms behind ({self.in_flight} in flight)"
        return f"admission queue full ({self.in_flight} of {self.capacity} in flight)"


@dataclass(frozen=True, slots=True)
class WaitBudget:
    """Admission by time: the backlog drains at ``capacity_qps``; no request admitted may wait more than
    ``max_wait_slos`` times ``slo_s`` behind it."""

    capacity_qps: float
    slo_s: float
    max_wait_slos: float = 2.0
    max_lag_slos: float = 0.5  # shed while the front door runs this many SLOs late (module docstring)

    def __post_init__(self) -> None:
        for name in ("capacity_qps", "slo_s", "max_wait_slos", "max_lag_slos"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")

    @classmethod
    def from_plan(
        cls,
        max_qps: float,
        slo_p95_ms: float | None,
        *,
        max_wait_slos: float = 2.0,
        capacity_qps: float | None = None,
    ) -> WaitBudget:
        """The budget of a plan serving up to ``max_qps`` (its highest gear) under a p95 SLO (``None``: the plan
        has none, and :data:`DEFAULT_SLO_MS` stands in). ``capacity_qps`` overrides the plan's figure (a
        deployment measured faster or slower than planned)."""
        cap = capacity_qps if capacity_qps is not None else max_qps
        slo_ms = slo_p95_ms if slo_p95_ms is not None else DEFAULT_SLO_MS
        return cls(float(cap), float(slo_ms) / 1000.0, max_wait_slos)

    @property
    def max_wait_s(self) -> float:
        return self.max_wait_slos * self.slo_s

    @property
    def max_lag_s(self) -> float:
        return self.max_lag_slos * self.slo_s

    @property
    def cap(self) -> int:
        """The backlog that takes ``max_wait_s`` to drain: the most requests that may be in flight at once."""
        return self.cap_at(self.capacity_qps)

    def rate(self, drain_qps: float | None) -> float:
        """The drain rate to plan with: the plan's capacity, or the measured rate where that is lower."""
        if drain_qps is None or not drain_qps > 0:
            return self.capacity_qps
        return min(self.capacity_qps, drain_qps)

    def cap_at(self, qps: float) -> int:
        return max(1, math.floor(min(qps * self.max_wait_s, 2.0**62) + 1e-9))

    def wait_s(self, backlog: int, drain_qps: float | None = None) -> float:
        """How long a request queued behind ``backlog`` others waits at the drain rate."""
        return backlog / self.rate(drain_qps)

    def retry_after_s(self, in_flight: int, n: int, cap: int, drain_qps: float | None = None) -> float:
        """When ``n`` more will fit under ``cap``: the time for the excess backlog to drain (whole seconds, at
        least one: the unit of HTTP's Retry-After)."""
        return max(1.0, float(math.ceil(self.wait_s(in_flight + n - cap, drain_qps))))


class DrainMeter:
    """The rate at which answers leave while a backlog waits: an exponentially weighted mean over windows of at
    least ``window_s`` during which the backlog stayed at ``saturation`` of the admission bound or more.
    :attr:`qps` is ``None`` until one such window closed, and again once it has recovered to the plan's capacity.

    Only a server near its bound shows its capacity: below it, answers leave as fast as requests arrive. Measuring
    whenever anything is in flight (as this meter once did) read the *arrival* rate at moderate load as the
    capacity, the bound shrank to it, and the next burst was shed, which kept the measured rate low: on an H100
    serving real MiniLMs at up to 300 QPS that spiral shed 69 % of a trace the plan carried.

    **Recovery.** A reading taken under overload can be far below what the server drains once the overload ends
    (the front door was the bottleneck, a neighbour held the cores); and a bound small enough is never saturated
    for a whole window again (a bound of 1 is left the moment its one request is answered), so a low reading would
    never be replaced: after 60 s at twice the capacity, a server kept refusing every call of 2 rows for minutes.
    So while the backlog is below ``saturation`` of the bound, the estimate relaxes toward the plan's capacity
    (``ceiling``) with time constant ``recover_s``, and is dropped (``None``: the plan's figure) once within 1 % of
    it. A server still slower than planned is read again at its next saturated window."""

    __slots__ = ("_done0", "_last", "_t0", "_weight", "qps", "recover_s", "saturation", "window_s")

    def __init__(
        self, window_s: float = 0.5, weight: float = 0.5, saturation: float = 0.5, recover_s: float = 1.0
    ) -> None:
        if not window_s > 0 or not 0 < weight <= 1 or not 0 < saturation <= 1 or not recover_s > 0:
            raise ValueError("window_s and recover_s must be positive, weight and saturation in (0, 1]")
        self.window_s = window_s
        self._weight = weight
        self.saturation = saturation
        self.recover_s = recover_s
        self._t0: float | None = None
        self._last: float | None = None  # the previous observation (recovery runs on the time since)
        self._done0 = 0
        self.qps: float | None = None

    def observe(
        self,
        now: float,
        answered_total: int,
        in_flight: int,
        bound: int | None = None,
        ceiling: float | None = None,
    ) -> float | None:
        """Feed the running count of answers, the bound in force (``None``: none, any backlog counts) and the
        plan's capacity to recover toward (``None``: no recovery); returns the current estimate."""
        last, self._last = self._last, now
        backlog = 1 if bound is None else max(1, math.ceil(self.saturation * bound))
        if in_flight < backlog:  # not near the bound: the window restarts at the next busy moment
            self._t0 = None
            if self.qps is not None and ceiling is not None and last is not None and self.qps < ceiling:
                gap = ceiling - self.qps
                gap *= math.exp(-max(0.0, now - last) / self.recover_s)
                self.qps = None if gap <= 0.01 * ceiling else ceiling - gap
            return self.qps
        if self._t0 is None:
            self._t0, self._done0 = now, answered_total
            return self.qps
        span = now - self._t0
        if span >= self.window_s:
            rate = (answered_total - self._done0) / span
            self.qps = rate if self.qps is None else self._weight * rate + (1 - self._weight) * self.qps
            self._t0, self._done0 = now, answered_total
        return self.qps


class AdmissionPolicy:
    """Admit, shed or refuse against a bound on requests in flight: the count ``capacity`` (``None``: no count
    bound) and, with a ``budget``, the bound derived from time; the tighter one holds."""

    __slots__ = ("budget", "capacity", "limit", "retry_after_s")

    def __init__(self, capacity: int | None, retry_after_s: float = 1.0, budget: WaitBudget | None = None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError("admission capacity must be at least 1")
        if not retry_after_s > 0:
            raise ValueError("retry_after_s must be positive")
        self.capacity = capacity
        self.retry_after_s = retry_after_s
        self.budget = budget
        bounds = [b for b in (capacity, None if budget is None else budget.cap) if b is not None]
        self.limit: int | None = min(bounds) if bounds else None  # the bound in force

    def bound(self, drain_qps: float | None = None) -> int | None:
        """The bound in force when the backlog drains at ``drain_qps`` (measured; ``None``: the plan's capacity)."""
        if drain_qps is None or self.budget is None:
            return self.limit
        timed = self.budget.cap_at(self.budget.rate(drain_qps))
        return timed if self.capacity is None else min(self.capacity, timed)

    def decide(self, n: int, in_flight: int, drain_qps: float | None = None, lag_s: float = 0.0) -> AdmissionDecision:
        """The verdict on a call of ``n`` rows with ``in_flight`` admitted, the backlog draining at ``drain_qps``
        (measured; ``None``: the plan's capacity) and the front door running ``lag_s`` late (module docstring)."""
        cap = self.limit if drain_qps is None else self.bound(drain_qps)
        budget = self.budget
        lagging = budget is not None and lag_s > budget.max_lag_s and cap is not None and 4 * in_flight >= cap
        if cap is None or (not lagging and in_flight + n <= cap):
            return AdmissionDecision("accept", n, in_flight, cap)
        if n > (self.limit if self.limit is not None else cap):  # past what even the plan's capacity holds: 413
            return AdmissionDecision("too_large", n, in_flight, cap)
        if budget is None:
            return AdmissionDecision("shed", n, in_flight, cap, self.retry_after_s)
        retry = max(budget.retry_after_s(in_flight, n, cap, drain_qps), float(math.ceil(lag_s)))
        return AdmissionDecision("shed", n, in_flight, cap, retry, lag_s if lagging else 0.0)

    def admits(self, n: int, in_flight: int, drain_qps: float | None = None) -> int:
        """How many of ``n`` single-row arrivals, decided one after another from ``in_flight``, are accepted: the
        bulk form of :meth:`decide` (each accepted row raises the count the next one sees), for the simulator."""
        cap = self.bound(drain_qps)
        return admitted(n, in_flight, NO_LIMIT if cap is None else cap)

    def full(self, in_flight: int, drain_qps: float | None = None, lag_s: float = 0.0) -> bool:
        """Whether a single row would be shed now."""
        return not self.decide(1, in_flight, drain_qps, lag_s).accepted


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether to take traffic, and why not."""

    ready: bool
    reason: str = ""


def readiness(accepting: bool, full_for_s: float | None, tick_s: float, stalled: str | None) -> Readiness:
    """Ready unless stopping, admission full for longer than one producer tick (``full_for_s``: how long it has
    been full, ``None`` when it is not), or a consumer stalled (``stalled`` says which, and how)."""
    if not accepting:
        return Readiness(False, "the server is stopping")
    if full_for_s is not None and full_for_s > tick_s:
        return Readiness(False, f"admission has been full for {full_for_s:.1f} s")
    if stalled is not None:
        return Readiness(False, stalled)
    return Readiness(True)


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
