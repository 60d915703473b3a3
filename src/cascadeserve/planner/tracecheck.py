"""The trace check: replay a finished plan on the arrivals it is meant for, and plan again against a retargeted
internal SLO: tighter while the replay misses the user's SLO, looser while it meets it with slack.

Why it is needed: Algorithm 1 checks each QPS range in steady state at the range's top QPS (SP4) and weights gear
accuracies by the QPS distribution (SP2). A replay of the real trace adds what neither sees: gear switches driven
by a noisy 100 ms QPS measurement with hysteresis, the backlog a rise in load leaves behind when the gear changes,
and the validation samples the requests happen to cycle through. On the Twitter trace these cost a plan a few
percent of p95 or a few tenths of a point of accuracy, enough to miss the SLO it was planned for (a p95 ≤ 50 ms
plan replayed at 51.4 ms; an accuracy ≥ 0.6045 plan replayed at 0.6037). The other way round, holding the SLO at
every range's top QPS in steady state is stricter than a p95 over a trace whose peaks are brief, so a plan can
meet the SLO with room to spare that a looser internal SLO turns into accuracy (or latency).

The search, per round, from the replay's p95 ``P`` and accuracy ``a`` (:class:`SloSearch`): the first step is
proportional to the miss or the slack, ``L' = L'_prev · (L / P) · (1 − LATENCY_MARGIN)`` for a latency SLO ``L``
and ``A' = A'_prev + (A − a) + ACCURACY_MARGIN`` for an accuracy SLO ``A``, but at most a factor
:data:`MAX_LATENCY_STEP` (or :data:`MAX_ACCURACY_STEP` points) per round, because a plan that overloads on the
trace misses by far more than its SLO is off (a p95 ≤ 100 ms plan replayed at 1.6 s, while one planned for 80 ms
replays at 98 ms). Once one internal SLO has met the user's and another has missed, the next is their midpoint
(bisection). The search stops after the rounds, when the internal SLO stops moving, or when a retargeted SLO is
infeasible. The kept plan is the best one whose replay meets the user's SLO (:func:`rank`: the most accurate
under a latency SLO, the fastest under an accuracy SLO); when none does, the one that came closest, and the check
says it was not met: the plan is still the planner's best answer, and the caller decides what a miss means.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from cascadeserve.plan import SLO

__all__ = [
    "ACCURACY_MARGIN",
    "LATENCY_MARGIN",
    "MAX_ACCURACY_STEP",
    "MAX_LATENCY_STEP",
    "SloSearch",
    "TraceCheck",
    "rank",
    "shortfall",
]

LATENCY_MARGIN = 0.02
ACCURACY_MARGIN = 1e-4
MAX_LATENCY_STEP = 1.5  # a latency SLO moves by at most this factor per round
MAX_ACCURACY_STEP = 0.01  # an accuracy SLO by at most this many points


@dataclass(frozen=True)
class TraceCheck:
    """The replay of the kept plan: its p95 and accuracy on the check arrivals, and whether they meet the SLO."""

    met: bool
    p95_ms: float
    accuracy: float
    requests: int
    rounds: int  # the round whose plan was kept (0: the first, planned for the user's SLO)
    planned_for: float  # the internal SLO value the kept plan was planned for (the user's when rounds == 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self, slo: SLO) -> str:
        unit = " ms" if slo.kind == "p95_ms" else ""
        how = "met" if self.met else "MISSED"
        return (
            f"trace check {how}: p95 {self.p95_ms:.1f} ms, accuracy {self.accuracy:.4f} over {self.requests:,} "
            f"requests ({slo}; planned for {self.planned_for:g}{unit} after {self.rounds} re-plan(s))"
        )


def shortfall(slo: SLO, p95_ms: float, accuracy: float) -> float:
    """How far a replay is from meeting ``slo``: ≤ 0 when it meets it; relative excess latency, or missing accuracy."""
    if slo.kind == "p95_ms":
        return p95_ms / slo.value - 1.0
    return slo.value - accuracy


class SloSearch:
    """The internal SLO to plan for next, from the replays so far (the module's rule)."""

    def __init__(self, user: SLO) -> None:
        self.user = user
        self.met: float | None = None  # the loosest internal value whose plan met the user's SLO
        self.missed: float | None = None  # the tightest internal value whose plan missed it

    def next(self, internal: SLO, p95_ms: float, accuracy: float) -> SLO | None:
        """The next internal SLO after a replay of a plan made for ``internal``; ``None`` when it stops moving."""
        u, v = self.user, internal.value
        latency = u.kind == "p95_ms"
        # "looser" is a larger latency bound, or a smaller accuracy target
        looser = max if latency else min
        tighter = min if latency else max
        if shortfall(u, p95_ms, accuracy) <= 0:
            self.met = v if self.met is None else looser(self.met, v)
        else:
            self.missed = v if self.missed is None else tighter(self.missed, v)
        if self.met is not None and self.missed is not None:
            nxt = math.sqrt(self.met * self.missed) if latency else (self.met + self.missed) / 2
        elif latency:
            prop = v * (u.value / p95_ms) * (1.0 - LATENCY_MARGIN)
            nxt = min(max(prop, v / MAX_LATENCY_STEP), v * MAX_LATENCY_STEP)
        else:
            prop = v + (u.value - accuracy) + ACCURACY_MARGIN
            nxt = min(max(prop, v - MAX_ACCURACY_STEP), v + MAX_ACCURACY_STEP)
        if not latency and not 0.0 < nxt < 1.0:
            return None
        if abs(nxt - v) <= (0.005 * v if latency else ACCURACY_MARGIN):
            return None  # another plan would be the same plan
        return SLO(kind=u.kind, value=nxt)


def rank(user: SLO, check: TraceCheck) -> tuple[float, ...]:
    """Sort key, best first: plans that meet ``user`` before those that miss; among those that meet, the most
    accurate (latency SLO) or the fastest (accuracy SLO); among those that miss, the closest."""
    if not check.met:
        return (1.0, shortfall(user, check.p95_ms, check.accuracy))
    if user.kind == "p95_ms":
        return (0.0, -check.accuracy, check.p95_ms)
    return (0.0, check.p95_ms, -check.accuracy)
