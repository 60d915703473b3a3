"""Batch costs against the plan's, over HTTP: ``GET /v2/cascade/costs`` and the cost metrics.

The server's :class:`~cascadeserve.runtime.costs.CostMonitor` sees every batch. This module shows what it saw:

* ``GET /v2/cascade/costs`` (inference token, when the server has one): per model, the median and the mean of
  measured / profiled batch time since the start (``factor_vs_profile``, ``mean_factor_vs_profile``: what
  ``profile calibrate --url`` scales the profile by), the median over the watch's window against the costs in
  force, and the last cost drift;
* ``cascadeserve_cost_factor{model}``: the window's factor (NaN before a batch), and
  ``cascadeserve_cost_drifts_total``: how many times batches departed from the plan's costs for long enough.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from cascadeserve.http.openapi import describe
from cascadeserve.runtime.costs import CostMonitor

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["CostCollector", "cost_routes"]


class _Api(Protocol):
    """What the route needs of the app's handlers (``http.app``; a Protocol, so no import goes back up there)."""

    costs: CostMonitor | None

    def _auth(self, request: Request, *, admin: bool = False) -> Response | None: ...


class CostCollector(Collector):
    def __init__(self, monitor: CostMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        snap = self.monitor.snapshot()
        g = GaugeMetricFamily(
            "cascadeserve_cost_factor",
            "Median measured / planned batch time per model over the cost window (1: as planned).",
            labels=["model"],
        )
        for m in snap["models"]:
            f = m["window_factor"]
            g.add_metric([m["model"]], math.nan if f is None else float(f))
        yield g
        c = CounterMetricFamily(
            "cascadeserve_cost_drifts", "Times batches ran off the plan's costs beyond the tolerance, sustained."
        )
        c.add_metric([], float(snap["drifts"]))
        yield c


def cost_routes(api: _Api) -> list[BaseRoute]:
    @describe(responses=(401, 403, 404), secured=True)
    async def costs(request: Request) -> Response:
        """Batch costs measured while serving, per model, against the profile and the costs in force."""
        if (bad := api._auth(request)) is not None:
            return bad
        if api.costs is None:
            return JSONResponse({"error": "this server does not watch batch costs"}, status_code=404)
        return JSONResponse(api.costs.snapshot())

    return [Route("/v2/cascade/costs", costs, methods=["GET"])]
