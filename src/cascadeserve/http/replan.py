"""``serve --replan``'s metrics: the drift KS distance, the current QPS scale, and the re-plan counters.

Read from the :class:`~cascadeserve.runtime.replanner.Replanner` at scrape time (nothing on the serving path):

* ``cascadeserve_load_drift_ks_distance``: the KS distance at the last drift decision (0 before any);
* ``cascadeserve_qps_scale``: the factor measured QPS is multiplied by before the gear lookup (appendix C.2);
* ``cascadeserve_replans_total{state}``: re-plans ``started``, ``finished``, ``failed``, ``swapped`` in and
  ``notified`` (better, not swapped: ``--replan notify``);
* ``cascadeserve_replan_running`` and ``cascadeserve_replan_proposed`` (1 while a better plan awaits the operator).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from cascadeserve.runtime.replanner import Replanner

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["ReplanCollector"]


class ReplanCollector(Collector):
    def __init__(self, replanner: Replanner) -> None:
        self.replanner = replanner

    def collect(self) -> Iterator[Metric]:
        s = self.replanner.stats
        d = GaugeMetricFamily(
            "cascadeserve_load_drift_ks_distance",
            "KS distance of the measured QPS distribution from the plan's, at the last drift decision.",
        )
        d.add_metric([], s.distance)
        yield d
        sc = GaugeMetricFamily("cascadeserve_qps_scale", "Factor applied to measured QPS before the gear lookup.")
        sc.add_metric([], s.scale)
        yield sc
        c = CounterMetricFamily("cascadeserve_replans", "Background re-plans by outcome.", labels=["state"])
        for k in ("started", "finished", "failed", "swapped", "notified"):
            c.add_metric([k], getattr(s, k))
        yield c
        r = GaugeMetricFamily("cascadeserve_replan_running", "1 while a re-plan runs in its child process.")
        r.add_metric([], 1.0 if s.running else 0.0)
        yield r
        p = GaugeMetricFamily("cascadeserve_replan_proposed", "1 while a better re-planned plan awaits (notify).")
        p.add_metric([], 0.0 if s.proposed is None else 1.0)
        yield p
