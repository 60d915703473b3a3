"""The trace check: replay a finished plan on the arrivals it is meant for, and plan again against a tighter
internal SLO while it misses the user's.

Why it is needed: Algorithm 1 checks each QPS range in steady state at the range's top QPS (SP4) and weights gear
accuracies by the QPS distribution (SP2). A replay of the real trace adds what neither sees: gear switches driven
by a noisy 100 ms QPS measurement with hysteresis, the backlog a rise in load leaves behind when the gear changes,
and the validation samples the requests happen to cycle through. On the Twitter trace these cost a plan a few
percent of p95 or a few tenths of a point of accuracy, enough to miss the SLO it was planned for (a p95 ≤ 50 ms
plan replayed at 51.4 ms; an accuracy ≥ 0.6045 plan replayed at 0.6037).

The rule, per round, from the replay's p95 ``P`` and accuracy ``a``:

* latency SLO ``L``, ``P > L``: plan again for ``L' = L'_prev · (L / P) · (1 − LATENCY_MARGIN)``;
* accuracy SLO ``A``, ``a < A``: plan again for ``A' = A'_prev + (A − a) + ACCURACY_MARGIN``.

The first plan whose replay meets the user's SLO is kept. When a tightened SLO is infeasible, or the rounds run
out, the plan that came closest is kept and the check says it was not met: the plan is still the planner's best
answer, and the caller decides what a miss means.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cascadeserve.plan import SLO

__all__ = ["ACCURACY_MARGIN", "LATENCY_MARGIN", "TraceCheck", "shortfall", "tighten"]

LATENCY_MARGIN = 0.02
ACCURACY_MARGIN = 1e-4


@dataclass(frozen=True)
class TraceCheck:
    """The replay of the kept plan: its p95 and accuracy on the check arrivals, and whether they meet the SLO."""

    met: bool
    p95_ms: float
    accuracy: float
    requests: int
    rounds: int  # plans made after the first (0: the first plan met the SLO, or tightening was impossible)
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


def tighten(user: SLO, internal: SLO, p95_ms: float, accuracy: float) -> SLO:
    """The next internal SLO after a replay missed ``user`` while planned for ``internal`` (the module's rule)."""
    if user.kind == "p95_ms":
        return SLO(kind="p95_ms", value=internal.value * (user.value / p95_ms) * (1.0 - LATENCY_MARGIN))
    return SLO(kind="accuracy", value=internal.value + (user.value - accuracy) + ACCURACY_MARGIN)
