"""The producer: admits requests under the current gear and, every tick, measures QPS and picks the gear.

Admission: a request takes the gear in force when it arrives and a first-stage replica chosen by that gear's
shares (smooth weighted round-robin, one pick per request, the same sequence the simulator walks vectorised).

Every ``tick_ms`` (100 ms by default) the producer closes the :class:`~cascadeserve.policy.QpsMeter` window and
applies the generation's :class:`~cascadeserve.policy.GearPolicy` decision for tick ``k`` (the tick at
``start + k·tick``, numbered as the simulator numbers its ticks), passing Q0, the first stage's queue length, so
the α·Q0 hysteresis keeps the gear while a backlog drains (or, with a gear schedule, the schedule's gear for the
tick). Ticks fall at ``start + k·tick`` exactly (not ``previous + tick``), so they do not drift and, on a fake
clock starting at 0, coincide with the simulator's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any

from cascadeserve.policy import GearDecision, QpsMeter
from cascadeserve.runtime.clock import Clock
from cascadeserve.runtime.generation import Generation
from cascadeserve.runtime.observer import Observer, TickEvent
from cascadeserve.runtime.request import Request

__all__ = ["Producer"]


class Producer:
    """Routes arrivals into the current generation and runs the gear-selection tick."""

    def __init__(self, gen: Generation, clock: Clock, observer: Observer) -> None:
        self.gen = gen
        self.clock = clock
        self.observer = observer
        self.tick_s = gen.plan.tick_ms / 1000.0
        self.start = clock.now()
        self.meter = QpsMeter(self.tick_s, start=self.start, min_arrivals=gen.plan.qps_min_arrivals)
        self.last_qps = 0.0
        self._k = 0
        self._next_rid = 0
        # called with (t, qps) after each tick's gear decision (serve --replan's load-drift watch); a runtime shares
        # its own list here, so listeners added before or after start() are heard
        self.listeners: list[Callable[[float, float], None]] = []

    def admit(self, payloads: Sequence[Any], deadline: float = math.inf) -> list[Request]:
        """Create and queue one request per payload (admission control is the caller's job)."""
        gen = self.gen
        now = self.clock.now()
        gear = gen.gear
        self.meter.record(len(payloads))
        loop = asyncio.get_running_loop()
        out = []
        for p in payloads:
            req = Request(self._next_rid, p, now, gen, gear, loop.create_future(), deadline)
            self._next_rid += 1
            gen.admit(req, now)
            out.append(req)
        return out

    def tick(self, t: float) -> GearDecision:
        """Close the QPS window at ``t`` and apply the gear decision to the current generation."""
        gen = self.gen
        qps = self.meter.tick(t)
        self.last_qps = qps
        # The tick's index from its time: t = start + k·tick up to rounding, and floor() would turn k - 1e-16 into
        # k - 1, hence the small allowance. (A tick called by hand between two ticks takes the earlier.)
        k = math.floor((t - self.start) / self.tick_s + 1e-6)
        decision = gen.gear_policy.decide(k, gen.gear, qps, gen.q0())
        switched = decision.gear != gen.gear
        if switched:
            gen.set_gear(decision.gear)
        gen.tune(t)  # online threshold tuning (if on): after the gear decision, as the simulator's tick
        self.observer.tick(TickEvent(t, decision, switched, gen.number))
        for listen in self.listeners:
            listen(t, qps)
        return decision

    async def run(self) -> None:
        """Tick forever at ``start + k·tick``; missed ticks (a stalled loop) are skipped, not replayed."""
        while True:
            self._k += 1
            t = self.start + self._k * self.tick_s
            await self.clock.sleep_until(t, order=-1)  # ticks come first at an instant
            self.tick(t)
            behind = int((self.clock.now() - self.start) / self.tick_s)
            if behind > self._k:
                self._k = behind
