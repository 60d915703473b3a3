"""The evaluation harness that redraws the paper's results (§6): cost grid, trade-off curves, degradation
timelines, ablations, the planner's quality against exhaustive and random search (:mod:`cascadeserve.eval.quality`),
and the report page. Every system runs on the shared simulator (and, for timelines, on the runtime); see
:mod:`cascadeserve.baselines`.

Two harnesses that drive a real server over HTTP live here too, outside the server itself, and are imported on
their own (they pull in HTTP clients): :mod:`cascadeserve.eval.loadgen`, the open-loop load generator behind
``cascadeserve bench``, and :mod:`cascadeserve.eval.fidelity`, the simulator against ``serve --emulate``
(``cascadeserve eval fidelity``, paper Fig. 13)."""

from __future__ import annotations

from cascadeserve.eval.grid import CompareResult, SystemGrid, compare, evaluate_system, min_devices
from cascadeserve.eval.report import family_max_qps, grid_table, run_all, versions, write_report
from cascadeserve.eval.timeline import degradation, pareto, sliding, trade_off_curves

__all__ = [
    "CompareResult",
    "SystemGrid",
    "compare",
    "degradation",
    "evaluate_system",
    "family_max_qps",
    "grid_table",
    "min_devices",
    "pareto",
    "run_all",
    "sliding",
    "trade_off_curves",
    "versions",
    "write_report",
]
