"""Re-planning while serving (``serve --replan auto|notify|off``): watch the load, re-plan in a child process, swap.

A :class:`Replanner` listens to the runtime's producer ticks and applies the decisions of
:class:`~cascadeserve.policy.replan.LoadDrift` (the same object the simulator drives,
:mod:`cascadeserve.simulate.replan`):

* **Scaling** (appendix C.2, for accuracy-SLO plans): every check (1 s by default) re-estimates the factor by which
  measured QPS is multiplied before the gear lookup; it is set on the current generation's gear selector and used
  from the next tick.
* **Drift**: when the measured distribution over the plan's ranges is more than the threshold (KS distance) from the
  plan's, a re-plan starts, unless one is running: ``python -m cascadeserve.planner.replan`` in a **separate
  process** (``asyncio`` subprocess; the event loop keeps serving), bounded by ``timeout_s`` (then killed). A failure
  (non-zero exit, timeout, an unreadable plan) is logged and counted, never raised into serving.
* When it finishes, ``LoadDrift.judge`` compares the new plan's predicted objective with the current plan's on the
  measured QPS: ``auto`` hot-swaps it in (:meth:`~cascadeserve.runtime.Runtime.swap_plan`: new requests go to the
  new generation, requests in flight finish under the old one, so nothing is dropped), ``notify`` keeps it as
  ``proposed`` (exposed by ``GET /v2/cascade/plan`` and a metric) and logs it, ``keep`` logs why not.

**Cost drift** (:mod:`cascadeserve.runtime.costs`): when batches run off the plan's costs beyond the tolerance for
long enough, ``notify`` logs which models and by how much (and counts it), and ``auto`` re-plans in the same child
process from the profile calibrated by the departed models' batches of the last window, by the rule ``profile
calibrate --url`` applies (:meth:`~cascadeserve.runtime.costs.CostMonitor.calibrated`: per batch size and against the
host's load where the batches show them), for the plan's own QPS distribution, and swaps it in: the old plan's
predictions are known to be wrong, so there is nothing to judge. Later re-plans start from the calibrated profile.

Every step is logged on the ``cascadeserve.replan`` logger (warnings, so they show without logging set up), except
what the server's events line already says (:mod:`cascadeserve.runtime.events`: a cost drift, a plan swapped in),
which is logged here at info level.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import GearPlan
from cascadeserve.policy.costs import CostDrift
from cascadeserve.policy.drift import DriftDecision
from cascadeserve.policy.replan import DriftSettings, LoadDrift, ReplanVerdict, planned_weights
from cascadeserve.profile import Profile, save_profile
from cascadeserve.runtime.costs import CostMonitor
from cascadeserve.runtime.observer import SwapReason
from cascadeserve.runtime.server import Runtime

__all__ = ["REPLAN_COMMAND", "ReplanOptions", "ReplanStats", "Replanner"]

log = logging.getLogger("cascadeserve.replan")
REPLAN_COMMAND: tuple[str, ...] = (sys.executable, "-m", "cascadeserve.planner.replan")


@dataclass(frozen=True)
class ReplanOptions:
    """``serve --replan`` and its thresholds; ``profile_dir`` is what the child process plans from."""

    settings: DriftSettings
    profile_dir: Path
    timeout_s: float = 300.0
    command: tuple[str, ...] = REPLAN_COMMAND  # tests may give another (a failing or a slow one)


@dataclass
class ReplanStats:
    """Counters and the last state, for metrics and ``GET /v2/cascade/plan``."""

    started: int = 0
    finished: int = 0
    failed: int = 0
    swapped: int = 0
    notified: int = 0
    cost_drifts: int = 0  # cost drifts seen (each one re-planned under auto, reported under notify)
    distance: float = 0.0  # the KS distance at the last check
    scale: float = 1.0
    running: bool = False
    last: str = ""  # one line: what the last re-plan decided, and why
    proposed: GearPlan | None = None  # notify: the better plan, not swapped in
    history: list[str] = field(default_factory=list)


class Replanner:
    """Applies :class:`~cascadeserve.policy.replan.LoadDrift` to a runtime (module docstring)."""

    def __init__(
        self,
        runtime: Runtime,
        options: ReplanOptions,
        check: Callable[[GearPlan], None] | None = None,
        *,
        costs: CostMonitor | None = None,
    ) -> None:
        self.runtime = runtime
        self.options = options
        self.profile_dir = options.profile_dir  # what re-plans start from (a calibrated copy after a cost drift)
        self.costs = costs
        if costs is not None:
            costs.listeners.append(self.on_cost_drift)
        self.check = check  # the deployment's checks of a plan to swap in (those of PUT /v2/cascade/plan)
        self.stats = ReplanStats()
        self._drift: LoadDrift | None = None
        self._plan: GearPlan | None = None  # the plan ``_drift`` follows
        self._task: asyncio.Task[None] | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="cascadeserve-replan-")
        runtime.tick_listeners.append(self.on_tick)

    # -- every tick (on the event loop: cheap, except one O(window) check per second) --------------------------
    def on_tick(self, t: float, qps: float) -> None:
        try:
            self._on_tick(t, qps)
        except Exception as e:  # the producer's tick loop must never die of the drift watch
            self.stats.failed += 1
            self.stats.last = f"the load-drift watch failed on a tick: {e!r}"
            log.warning("%s", self.stats.last)

    def _on_tick(self, t: float, qps: float) -> None:
        plan = self.runtime.plan
        drift = self._drift
        if drift is None:
            drift = self._drift = LoadDrift(plan, self.options.settings)
            self._plan = plan
        elif plan is not self._plan:  # swapped, by us or by PUT /v2/cascade/plan: follow the plan in force
            drift.replanned(plan)
            self._plan = plan
        lt = drift.tick(qps, t)
        self.stats.scale = lt.scale
        if drift.scaling:
            self.runtime.current.gear_policy.rescale(lt.scale)
        if lt.drift is not None:
            self.stats.distance = lt.drift.distance
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._replan(lt.drift, plan))

    # -- the background re-plan --------------------------------------------------------------------------------
    async def _replan(self, decision: DriftDecision, plan: GearPlan) -> None:
        s = self.stats
        s.started += 1
        s.running = True
        weights = ",".join(f"{w:.6g}" for w in decision.measured)
        log.warning(
            "load drift: KS distance %.3f over %.3f; measured range weights %s; re-planning in a child process",
            decision.distance,
            self.options.settings.threshold,
            weights,
        )
        new = await self._planned(plan, weights, "")
        if new is None:
            return
        s.finished += 1
        drift = self._drift
        assert drift is not None
        current = self.runtime.plan
        verdict = drift.judge(current, new)
        self._apply(verdict, new, f"KS distance {decision.distance:.3f} over {self.options.settings.threshold:.3f}")

    async def _planned(
        self, plan: GearPlan, weights: str, what: str, profile: Callable[[], Path] | None = None
    ) -> GearPlan | None:
        """A re-plan in the child process, checked as PUT /v2/cascade/plan would be (from ``profile()``'s directory
        when given); ``None`` (logged and counted, serving goes on) when anything fails."""
        s = self.stats
        try:
            new = await self._run_planner(plan, weights, s.started, None if profile is None else profile())
            if self.check is not None:
                self.check(new)  # refuses a plan this deployment cannot serve, as PUT /v2/cascade/plan would
        except asyncio.CancelledError:
            raise
        except Exception as e:  # whatever went wrong, serving goes on
            s.failed += 1
            s.last = f"re-plan {s.started}{what} failed: {e}"
            log.warning("%s", s.last)
            return None
        finally:
            s.running = False
            self._task = None
        return new

    async def _run_planner(self, plan: GearPlan, weights: str, n: int, profile_dir: Path | None = None) -> GearPlan:
        d = Path(self._dir.name)
        src, out = d / f"current-{n}.json", d / f"replanned-{n}.json"
        plan.save(src)
        o = self.options
        proc = await asyncio.create_subprocess_exec(
            *o.command,
            str(profile_dir or self.profile_dir),
            str(src),
            weights,
            str(out),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._proc = proc
        try:
            _, err = await asyncio.wait_for(proc.communicate(), o.timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            msg = f"the planner ran past --replan-timeout-s ({o.timeout_s:g} s) and was stopped"
            raise CascadeServeError(msg) from None
        finally:
            self._proc = None
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()
            raise CascadeServeError(f"the planner exited {proc.returncode}: {tail[-1] if tail else 'no message'}")
        return GearPlan.from_json(out.read_text(), path=out)

    # -- cost drift (from the cost monitor, on the event loop) -----------------------------------------------------
    def on_cost_drift(self, decision: CostDrift) -> None:
        s = self.stats
        s.cost_drifts += 1
        mode = self.options.settings.mode
        if mode == "notify":
            s.notified += 1
            s.last = f"{decision.describe()}; the plan's predictions do not hold (--replan auto re-plans with them)"
        elif mode == "auto" and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._replan_costs(decision, self.runtime.plan))
            return
        elif mode == "auto":
            s.last = f"{decision.describe()}; a re-plan is already running, this one waits for the next drift"
        else:
            return
        s.history.append(s.last)
        # notify: the drift's own line is the events line (runtime/events.py); what notify adds is in the plan's notes
        (log.info if mode == "notify" else log.warning)("%s", s.last)

    async def _replan_costs(self, decision: CostDrift, plan: GearPlan) -> None:
        s = self.stats
        s.started += 1
        s.running = True
        monitor = self.costs
        assert monitor is not None
        models = ", ".join(c.model for c in decision.departed)
        log.warning("re-planning with the measured costs of %s in a child process (cost drift)", models)
        where = f"this server at t={decision.time:.1f} s (cost drift)"
        cal_dir = Path(self._dir.name) / f"calibrated-{s.started}"
        made: list[Profile] = []

        def calibrated() -> Path:  # inside the re-plan's guard: a failure here is counted and logged like the rest
            made.append(monitor.calibrated(decision, where))
            return save_profile(made[0], cal_dir)

        weights = ",".join(f"{w:.6g}" for w in planned_weights(plan))
        new = await self._planned(plan, weights, " (cost drift)", calibrated)
        if new is None:
            return
        s.finished += 1
        self.profile_dir = cal_dir
        factors = ", ".join(f"{c.model} x{c.factor:.2f}" for c in decision.departed)
        gen = self.runtime.swap_plan(new, SwapReason("cost_drift", factors))
        monitor.recalibrated(made[0], self.runtime.clock.now())
        s.swapped += 1
        s.proposed = None
        s.last = f"swapped in a plan made with the measured costs (generation {gen}): {decision.describe()}"
        s.history.append(s.last)
        log.info("%s", s.last)  # the swap's own line is the events line (runtime/events.py)

    def _apply(self, verdict: ReplanVerdict, new: GearPlan, drift: str) -> None:
        s = self.stats
        if verdict.action == "swap":
            gen = self.runtime.swap_plan(new, SwapReason("load_drift", f"{drift}; {verdict.reason}"))
            s.swapped += 1
            s.proposed = None
            s.last = f"swapped in the re-planned plan (generation {gen}): {verdict.reason}"
        elif verdict.action == "notify":
            s.notified += 1
            s.proposed = new
            s.last = f"a re-planned plan is better, not swapped in (--replan notify): {verdict.reason}"
        else:
            s.last = f"kept the current plan: the re-planned one is {verdict.reason}"
        s.history.append(s.last)
        # a swap's own line is the events line (runtime/events.py); notify and keep are said here
        (log.info if verdict.action == "swap" else log.warning)("%s", s.last)

    def notes(self) -> dict[str, str]:
        """What ``GET /v2/cascade/plan`` adds to the plan's notes."""
        s = self.stats
        out = {
            "replan": f"{self.options.settings.mode}; started {s.started}, finished {s.finished}, failed {s.failed}, "
            f"swapped {s.swapped}; KS distance {s.distance:.3f}; QPS scale {s.scale:.4g}"
            + ("; re-planning now" if s.running else ""),
        }
        if s.last:
            out["replan_last"] = s.last
        if s.proposed is not None:
            out["replan_proposed"] = s.proposed.to_json(indent=None)
        return out

    async def stop(self) -> None:
        """Stop a running re-plan (its child process is killed)."""
        task, proc = self._task, self._proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._dir.cleanup()
