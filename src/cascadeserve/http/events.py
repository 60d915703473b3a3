"""The server's events as metrics: what :class:`~cascadeserve.runtime.events.ServingEvents` says, read at scrape time.

* ``cascadeserve_shedding``: 1 while a shedding episode lasts (from the first shed until none for the quiet spell);
* ``cascadeserve_slo_miss``: 1 while the served p95 over the SLO window is over the SLO (as the event lines say);
* ``cascadeserve_served_p95_seconds``: that p95, at the last check (NaN: no answer in the window), and
  ``cascadeserve_slo_p95_seconds``: the SLO it is held to (NaN without one);
* ``cascadeserve_events_total{kind}``: the event lines said, by kind (``shedding_started``, ``shedding_stopped``,
  ``cost_drift``, ``plan_swapped``, ``slo_missed``, ``slo_met``), and
  ``cascadeserve_plan_swaps_by_reason_total{reason}``: plans swapped in, by why (``manual``, ``load_drift``,
  ``cost_drift``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from cascadeserve.runtime.events import ServingEvents

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["EventCollector"]


class EventCollector(Collector):
    def __init__(self, events: ServingEvents) -> None:
        self.events = events

    def collect(self) -> Iterator[Metric]:
        ev = self.events
        shedding = GaugeMetricFamily(
            "cascadeserve_shedding", "1 while requests are being shed (until none for the quiet spell), else 0."
        )
        shedding.add_metric([], 1.0 if ev.shedding else 0.0)
        yield shedding
        miss = GaugeMetricFamily(
            "cascadeserve_slo_miss", "1 while the served p95 over the SLO window is over the SLO, else 0."
        )
        miss.add_metric([], 1.0 if ev.slo_missed else 0.0)
        yield miss
        p95 = GaugeMetricFamily(
            "cascadeserve_served_p95_seconds", "p95 latency of the answers of the SLO window (admission to answer)."
        )
        got = ev.slo.p95_ms
        p95.add_metric([], math.nan if got is None else got / 1000.0)
        yield p95
        rt = ev.runtime
        slo_ms = None if rt is None else rt.slo_ms
        slo = GaugeMetricFamily("cascadeserve_slo_p95_seconds", "The p95 latency objective in force (NaN: none).")
        slo.add_metric([], math.nan if slo_ms is None else slo_ms / 1000.0)
        yield slo
        kinds = CounterMetricFamily(
            "cascadeserve_events", "State changes the server logged, by kind (one log line each).", labels=["kind"]
        )
        for kind, n in ev.counts.items():
            kinds.add_metric([kind], float(n))
        yield kinds
        swaps = CounterMetricFamily("cascadeserve_plan_swaps_by_reason", "Plans swapped in, by why.", labels=["reason"])
        for reason, n in ev.swaps.items():
            swaps.add_metric([reason], float(n))
        yield swaps
