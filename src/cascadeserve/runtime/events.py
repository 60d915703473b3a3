"""What the server says it is doing: one log line per change of state, and the state itself for metrics and status.

:class:`ServingEvents` is an observer (answers and ticks), a listener of the cost monitor and a reader of its
runtime. It applies the decisions of :mod:`cascadeserve.policy.episodes` (shedding started and stopped, the served
p95 over the window against the SLO) and says, once each, the cost drifts the
:class:`~cascadeserve.policy.costs.CostWatch` decides and the plans swapped in (with the generation's
:class:`~cascadeserve.runtime.observer.SwapReason`). Every line goes to the ``cascadeserve.events`` logger at
warning level (so it shows on stderr without logging set up, beside the server's banner and warnings), starts with
the cascade's name and the event's phrase, and is counted by its kind (:data:`EVENTS`) (``cascadeserve_events_total``:
:mod:`cascadeserve.http.events`)::

    tweets: shedding started: 38 requests refused with 503 (offered 400 QPS, the plan holds up to 50 QPS; ...)
    tweets: shedding stopped: 5213 requests shed in 12.4 s (none for 5 s)
    tweets: cost drift: lr-chars batches take x6.02 the plan's cost (41 batches in the last 2 s)
    tweets: plan swapped in: generation 1, re-planned with the measured costs (lr-chars x6.02)
    tweets: SLO missed: p95 142.3 ms over the last 10 s, SLO 100 ms (1203 answers)
    tweets: SLO met again: p95 88.1 ms over the last 10 s, SLO 100 ms (missed for 23.0 s)

The runtime's state that ``cascadeserve up``'s status line shows (:meth:`ServingEvents.status`) is read from here
too: the p95 is the one the last check computed on the event loop, so another thread reads it without racing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cascadeserve.policy.costs import CostDrift
from cascadeserve.policy.episodes import EpisodeSettings, ShedEpisode, ShedWatch, SloEpisode, SloWatch
from cascadeserve.runtime.observer import NullObserver, TickEvent
from cascadeserve.runtime.request import Answer, Request, ServingError

if TYPE_CHECKING:
    from cascadeserve.runtime.costs import CostMonitor
    from cascadeserve.runtime.server import Runtime

__all__ = ["EVENTS", "SWAP_REASONS", "ServingEvents", "ServingStatus"]

log = logging.getLogger("cascadeserve.events")

EVENTS = ("shedding_started", "shedding_stopped", "cost_drift", "plan_swapped", "slo_missed", "slo_met")
SWAP_REASONS = ("manual", "load_drift", "cost_drift")


@dataclass(frozen=True, slots=True)
class ServingStatus:
    """A snapshot of a serving cascade: the load, the gear, the served p95 against the SLO and the shedding."""

    qps: float  # requests offered per second over the last second (shed ones too)
    gear: int
    gears: int
    p95_ms: float | None  # over the SLO window (None: no answer in it)
    slo_ms: float | None
    window_s: float
    shed: int  # rows shed since the start
    shedding: bool
    slo_missed: bool


class ServingEvents(NullObserver):
    """Applies the episode decisions to one served cascade and says each change once (module docstring)."""

    def __init__(self, name: str, settings: EpisodeSettings | None = None) -> None:
        self.name = name
        self.settings = s = settings or EpisodeSettings()
        self.sheds = ShedWatch(s.shed_quiet_s)
        self.slo = SloWatch(s.slo_window_s, s.slo_min_answers, s.slo_check_s)
        self.counts = dict.fromkeys(EVENTS, 0)
        self.swaps = dict.fromkeys(SWAP_REASONS, 0)  # plans swapped in, by reason
        self.runtime: Runtime | None = None
        self._cost_window_s: float | None = None
        self.qps = 0.0  # requests offered per second over the last second (for the status line)
        self._offered = (-math.inf, 0)  # (time, arrivals counted) at the last QPS reading

    def attach(self, runtime: Runtime, costs: CostMonitor | None = None) -> None:
        """Read the shed count, the SLO and the plan's generations from ``runtime`` (the one this observes), and hear
        the cost drifts of its cost monitor ``costs``."""
        self.runtime = runtime
        if costs is not None:
            costs.listeners.append(self.on_cost_drift)
            self._cost_window_s = costs.watch.settings.window_s

    # -- observer ----------------------------------------------------------------------------------------------
    def answered(self, req: Request, answer: Answer | None, error: ServingError | None, now: float) -> None:
        self.slo.answered(now, now - req.arrival)

    def tick(self, event: TickEvent) -> None:
        rt = self.runtime
        if rt is None:
            return
        now = event.time
        self._read_qps(now, rt.producer.meter.total)
        shed = self.sheds.check(now, rt.shed_total)
        if shed is not None:
            self._say("shedding_started" if shed.started else "shedding_stopped", self._shed_line(shed, rt))
        slo = self.slo.check(now, rt.slo_ms)
        if slo is not None:
            self._say("slo_missed" if slo.missed else "slo_met", _slo_line(slo))

    def plan_swapped(self, generation: int) -> None:
        rt = self.runtime
        gen = None if rt is None else next((g for g in rt.generations if g.number == generation), None)
        reason = None if gen is None else gen.reason
        kind = "manual" if reason is None else reason.kind
        self.swaps[kind] = self.swaps.get(kind, 0) + 1
        why = {
            "manual": "swapped in by hand",
            "load_drift": "re-planned for the measured QPS distribution",
            "cost_drift": "re-planned with the measured batch costs",
        }.get(kind, kind)
        detail = "" if reason is None or not reason.detail else f" ({reason.detail})"
        self._say("plan_swapped", f"plan swapped in: generation {generation}, {why}{detail}")

    # -- the cost monitor's listener ---------------------------------------------------------------------------
    def on_cost_drift(self, decision: CostDrift) -> None:
        window = "" if self._cost_window_s is None else f" in the last {self._cost_window_s:g} s"
        parts = [
            f"{c.model} batches take x{c.factor:.2f} the plan's cost ({c.batches} batches{window})"
            for c in decision.departed
        ]
        self._say("cost_drift", "cost drift: " + "; ".join(parts))

    def _read_qps(self, now: float, total: int) -> None:
        """Offered QPS over the last second: the producer's one-tick reading is 0 or 10 at 10 QPS, steadier here."""
        t0, n0 = self._offered
        if now - t0 >= 1.0:
            if t0 > -math.inf:
                self.qps = (total - n0) / (now - t0)
            self._offered = (now, total)

    # -- state -------------------------------------------------------------------------------------------------
    @property
    def shedding(self) -> bool:
        return self.sheds.active

    @property
    def slo_missed(self) -> bool:
        return self.slo.missed

    def status(self) -> ServingStatus | None:
        """The cascade now (``None`` before its runtime started); safe to call from another thread."""
        rt = self.runtime
        if rt is None or not rt.generations:
            return None
        try:
            gen = rt.current
        except RuntimeError:  # not started
            return None
        return ServingStatus(
            qps=self.qps,
            gear=gen.gear,
            gears=len(gen.plan.gears),
            p95_ms=self.slo.p95_ms,
            slo_ms=rt.slo_ms,
            window_s=self.slo.window_s,
            shed=rt.shed_total,
            shedding=self.sheds.active,
            slo_missed=self.slo.missed,
        )

    # -- lines -------------------------------------------------------------------------------------------------
    def _say(self, kind: str, line: str) -> None:
        self.counts[kind] += 1
        log.warning("%s: %s", self.name, line)

    def _shed_line(self, e: ShedEpisode, rt: Runtime) -> str:
        if not e.started:
            quiet = self.settings.shed_quiet_s
            return f"shedding stopped: {e.shed} requests shed in {e.last - e.since:.1f} s (none for {quiet:g} s)"
        plan = rt.plan
        return (
            f"shedding started: {e.shed} requests refused with 503 (offered {rt.producer.last_qps:.0f} QPS, the plan "
            f"holds up to {plan.max_qps:g} QPS; admission holds at most {rt.admission_policy.limit} requests)"
        )


def _slo_line(e: SloEpisode) -> str:
    over = f"over the last {e.window_s:g} s, SLO {e.slo_ms:g} ms"
    if e.missed:
        return f"SLO missed: p95 {e.p95_ms:.1f} ms {over} ({e.answers} answers)"
    p95 = "no answers" if math.isnan(e.p95_ms) else f"p95 {e.p95_ms:.1f} ms"
    return f"SLO met again: {p95} {over} (missed for {e.time - e.since:.1f} s)"
