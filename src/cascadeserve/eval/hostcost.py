"""Costs of the host, measured under serving conditions: the profile's runtimes as a served batch pays them.

``profile measure`` times each model alone. On the serving host a batch also competes with the HTTP front end that
parses every request, the other devices' threads and the client, so it runs slower (1.25-2x on a 2-core box). This
module measures that in a few seconds, with the real pieces, and returns the per-model factors that
:func:`cascadeserve.profile.calibrate` applies:

1. a **probe plan**: every model of the family in one cascade (cheapest first, thresholds at 1, so every request
   runs every stage), every model on every device, a minimum queue of 1; or a plan made for the workload (below);
2. the real HTTP server with the real models on 127.0.0.1 (:func:`cascadeserve.http.build_app`), in this process;
3. Poisson arrivals of real validation inputs over HTTP (:func:`cascadeserve.eval.loadgen.run_load`) for
   ``seconds``, in four equal steps at 0.5, 1, 1.5 and 2 times ``busy`` times the probe plan's capacity (``busy``
   on average): the quiet steps run batches of one while the other devices idle, the busy ones larger batches
   beside busy devices, so the fit sees both the host's load and the batch sizes that load forms. The capacity is
   the profile's at first and, from the second step on, the one the batches measured so far give: on a host twice
   as fast as the profiler's a probe at the profiled capacity would never form a batch of two;
4. the server's cost monitor (:class:`~cascadeserve.runtime.costs.CostMonitor`): per model, the mean measured /
   profiled batch time over every batch (``mean_factor_vs_profile``; a queue's wait follows the mean service time).

The probe prices every model, but with every request running every stage, up to twice the family's capacity: its
front end parses more requests and the loop hands on more stages than a served cascade's, and on a GIL-bound family
that load lands in the batch times. Given ``plan`` (made for a workload, from ``profile``), it serves that plan **as
planned** instead, at a quarter, half, three quarters and all of its top QPS, and prices the models that plan ran
often enough (``min_batches``), with their batch spread too: what ``profile calibrate --url`` reads from a served
run of that plan, without waiting for one. Those costs are the plan's own; a plan made from them may run other
models, or the same ones harder, than the plan they were measured under (measured: re-planning from them chose a
heavier tweets cascade whose 60 QPS p95 then ran +37 % over its simulation), so ``up`` plans from the probe's.

``profile calibrate --models`` and the demo use it; ``profile calibrate --url`` reads the same monitor from a
server someone else is loading.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.eval.loadgen import LoadReport, run_load
from cascadeserve.http import Server, build_app
from cascadeserve.plan import Device, GearPlan, fixed_plan
from cascadeserve.policy.costs import CostSettings
from cascadeserve.profile import Profile, calibrate
from cascadeserve.profile.calibration import describe_sizes, snapshot_factors
from cascadeserve.runtime import ModelConfig
from cascadeserve.traces import poisson

__all__ = ["HostCosts", "measure_host_costs", "probe_plan", "snapshot_hop"]


@dataclass(frozen=True)
class HostCosts:
    """What a calibration run measured: factors per model (measured / profiled batch time, mean), batches seen."""

    factors: dict[str, float]
    batches: dict[str, int]
    busy: dict[str, float]  # busy factors, where the batches' host load spread enough to fit them (profile/host.py)
    sizes: dict[str, dict[int, float]]  # per model, factors per batch size where several sizes had enough batches
    spread: dict[str, float]  # per model, the batch spread (only from a plan served as planned: the probe's is not)
    qps: float
    seconds: float
    loads: tuple[LoadReport, ...]  # one per step

    def describe(self) -> str:
        def one(m: str, f: float) -> str:
            busy = f" alone, x{self.busy[m]:.2f} busy" if m in self.busy else ""
            by = self.sizes.get(m)
            sized = f" ({describe_sizes(by)})" if by else ""
            return f"{m} x{f:.2f}{busy}{sized} ({self.batches[m]} batches)"

        parts = ", ".join(one(m, f) for m, f in self.factors.items())
        steps = "/".join(f"{r.sent / (self.seconds / len(self.loads)):.3g}" for r in self.loads)
        load = f"{steps} QPS in {len(self.loads)} steps"
        return f"{parts}; {load} of real inputs over HTTP for {self.seconds:g} s"


def probe_plan(profile: Profile, devices: int, memory_mb: float = 1e9) -> GearPlan:
    """Every model, cheapest first, in one cascade whose thresholds send every request through every stage."""
    order = tuple(profile.by_cost())
    cascade = Cascade(order, tuple(1.0 for _ in order[:-1]))
    devs = tuple(Device(name=f"dev{i}", memory_mb=memory_mb) for i in range(devices))
    return fixed_plan(profile, cascade, devs, batch_overhead_ms=0.0)


_STEPS = (0.5, 1.0, 1.5, 2.0)  # the probe's load per quarter of its run, times ``busy`` x capacity (mean: busy)
_PLAN_STEPS = (0.25, 0.5, 0.75, 1.0)  # a planned workload's load per quarter of its run, times its top QPS


_UNBOUNDED_QPS = 1e8  # a plan whose top gear reaches this far names no load of its own (fixed_plan's 1e9)


def _capacity_qps(profile: Profile, plan: GearPlan, batch: int = 8) -> float:
    """Requests per second the plan's devices carry when every request runs every model, at the profiled cost."""
    per_request_ms = sum(float(m.runtime.ms_at(batch)) / batch for m in profile.models if m.name in plan.models())
    return len(plan.devices) * 1000.0 / max(per_request_ms, 1e-6)


def measure_host_costs(
    profile: Profile,
    models: ModelConfig,
    rows: np.ndarray,
    *,
    devices: int = 2,
    seconds: float = 8.0,
    busy: float = 0.5,
    plan: GearPlan | None = None,
    min_batches: int = 1,
    name: str = "calibrate",
    seed: int = 0,
) -> HostCosts:
    """Serve the probe plan, or ``plan`` as planned (made from ``profile``), with the real ``models`` and measure batch
    costs (module doc); models with fewer than ``min_batches`` batches are left out."""
    if not (seconds > 0 and 0 < busy <= 2):
        raise ValueError(f"seconds must be positive and busy in (0, 2], got {seconds!r}, {busy!r}")
    p = plan or probe_plan(profile, devices)
    planned = plan is not None and plan.max_qps < _UNBOUNDED_QPS  # its own top QPS, else the probe's steps
    capacity = _capacity_qps(profile, p)
    step = seconds / len(_STEPS)
    # measuring is the point here: the probe's batches are expected to run off the profile's costs, so no drift
    # decisions (an infinite tolerance); the monitor still records every batch
    app = build_app(profile, p, models=models, name=name, costs=CostSettings(tolerance=math.inf))
    loads: list[LoadReport] = []
    with Server(app, "127.0.0.1", 0, grace_s=5.0) as server:
        for k, f in enumerate(_PLAN_STEPS if planned else _STEPS):
            qps = f * p.max_qps if planned else f * busy * capacity
            arrivals = poisson(qps, step, seed=seed + k).arrivals
            loads.append(asyncio.run(run_load(server.url, name, arrivals, rows=rows)))
            if not planned and app.costs is not None:  # the next step's load follows what batches cost so far
                so_far = snapshot_factors(app.costs.snapshot(), 1)
                if so_far.factors:
                    capacity = _capacity_qps(calibrate(profile, so_far.factors, source="", sizes=so_far.sizes), p)
        snap: dict[str, Any] = app.costs.snapshot() if app.costs is not None else {"models": []}
    got = snapshot_factors(snap, min_batches)
    batches = {m["model"]: int(m["batches"]) for m in snap["models"] if m["model"] in got.factors}
    mean_qps = sum(r.sent for r in loads) / seconds
    spread = got.spread if planned else {}  # the probe runs past the family's capacity: its scatter is not serving's
    return HostCosts(got.factors, batches, got.busy, got.sizes, spread, mean_qps, seconds, tuple(loads))


def snapshot_hop(snapshot: dict[str, Any], min_answers: int) -> tuple[float, float] | None:
    """From a ``/v2/cascade/costs`` answer of a server on Ray: the process hop's mean and p95 (ms) as serving saw
    it, per first-stage answer; None on another backend or with fewer than ``min_answers`` answers."""
    hop = snapshot.get("hop") or {}
    if snapshot.get("backend") != "ray" or int(hop.get("answers") or 0) < min_answers:
        return None
    return float(hop["mean_ms"]), float(hop["p95_ms"])
