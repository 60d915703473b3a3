"""The runtime's cost monitor: every finished batch against the costs the plan was made with.

:class:`CostMonitor` is an observer (only :meth:`batch` does anything) and a producer tick listener. It feeds each
batch to the policy's :class:`~cascadeserve.policy.costs.CostWatch` and, on every tick, applies the watch's
decision: a :class:`~cascadeserve.policy.costs.CostDrift` is counted and handed to the listeners (the server's events
line, :mod:`cascadeserve.runtime.events`; ``serve --replan auto`` re-plans with the measured costs:
:mod:`cascadeserve.runtime.replanner`).

The costs "in force" are those of the profile the plan in force was made with (the served profile, or after a
re-plan with measured costs the recalibrated one: :meth:`calibrated`, :meth:`recalibrated`), slowed by the host's
load as that profile's busy factors say, plus the plan's per-batch overhead (``batch_overhead_ms``, which the
simulator charges on every batch too); so after a swap the watch compares batches with the costs the new plan
assumed, not the stale ones. Besides the watch's window, the monitor keeps the last ``keep`` batches per model since
the start (or the last recalibration), each as its ratio to the *profile's* runtime, the host's load when it started,
its size and when it ended: that is what ``profile calibrate --url`` reads after a ``bench`` run, when the window may
already have emptied, and what a re-plan with measured costs calibrates from (the batches of the last window, by
the same rule).

It also keeps, per answer at the first stage, the time the request spent beyond its server time (queues and
batches): on the local backend a few microseconds, on Ray the process hop there and back as it is while serving
(:mod:`cascadeserve.simulate.hops`). ``profile calibrate --url`` records its mean and p95 as the profile's
``ray_hop_ms`` / ``ray_hop_p95_ms`` when the server runs on Ray: the start-up run that measures it first (one
second, the cheapest model, no HTTP, a Ray instance still warming up) is one sample of other conditions, and read
2.3x the serving figure on a quiet host (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from cascadeserve.policy.costs import CostDrift, CostSettings, CostWatch, mean_and_p95, trimmed_mean
from cascadeserve.profile import Profile, calibrate
from cascadeserve.profile.calibration import snapshot_factors
from cascadeserve.profile.host import HostFit, contended, fit_contention, size_factors
from cascadeserve.profile.spread import served_spread
from cascadeserve.runtime.observer import BatchEvent, NullObserver
from cascadeserve.runtime.request import Answer, Request, ServingError

__all__ = ["CostMonitor"]


class CostMonitor(NullObserver):
    """Watches batch costs against the profile's (module docstring)."""

    def __init__(
        self,
        profile: Profile,
        settings: CostSettings | None = None,
        *,
        overhead_ms: float = 0.0,
        keep: int = 20_000,
        devices: int = 1,
        backend: str = "local",
    ) -> None:
        self.profile = profile
        self.overhead_s = overhead_ms / 1000.0
        self.watch = CostWatch(profile.model_names, settings)
        self.in_force = profile  # the costs the plan in force was made with (recalibrated)
        self._rows = {m: i for i, m in enumerate(profile.model_names)}
        self._curves = [m.runtime for m in profile.models]  # the profile's: every ratio kept is against these
        self._planned = list(self._curves)  # the costs in force, per model (the curve of the profile in force)
        self._busy = [m.busy_factor for m in profile.models]
        self._since: list[deque[float]] = [deque(maxlen=keep) for _ in profile.models]
        self._ends: list[deque[float]] = [deque(maxlen=keep) for _ in profile.models]  # when each batch ended
        # per model, each batch's share of the other devices busy when it started, beside its ratio (profile/host.py)
        self.devices = devices
        self._shares: list[deque[float]] = [deque(maxlen=keep) for _ in profile.models]
        self._sizes: list[deque[int]] = [deque(maxlen=keep) for _ in profile.models]  # each batch's size beside them
        # per first-stage answer, its latency beyond its server time (s): one hop each way on Ray (docstring)
        self.backend = backend
        self._hops: deque[float] = deque(maxlen=keep)
        self.listeners: list[Callable[[CostDrift], None]] = []
        self.drifts = 0
        self.last: CostDrift | None = None
        self.now = 0.0  # the clock at the last batch or tick (for the snapshot)

    # -- observer and tick listener ------------------------------------------------------------------------------
    def batch(self, event: BatchEvent) -> None:
        row = self._rows.get(event.model)
        if row is None or event.failed:
            return
        profiled_s = self._curves[row].ms_of(event.size) / 1000.0
        seconds = event.end - event.start
        # the cost in force: the curve in force at this size, slowed by the host's load as the plan assumed
        in_force_s = self._planned[row].ms_of(event.size) / 1000.0
        planned = contended(in_force_s, self._busy[row], event.host_share)
        self.watch.observe(row, event.end, seconds, planned + self.overhead_s)
        if profiled_s > 0:
            self._since[row].append(seconds / profiled_s)
            self._ends[row].append(event.end)
            self._shares[row].append(event.host_share)
            self._sizes[row].append(event.size)
        self.now = max(self.now, event.end)

    def answered(self, req: Request, answer: Answer | None, error: ServingError | None, now: float) -> None:
        # a first-stage answer crossed to its server and back once; a cached one never left, and a fallback's time
        # is its deadline's
        if answer is None or answer.stage != 0 or answer.cached or answer.fallback:
            return
        self._hops.append(max(now - req.arrival - answer.queue_s - answer.compute_s, 0.0))

    def on_tick(self, t: float, qps: float) -> None:
        self.now = max(self.now, t)
        decision = self.watch.check(t)
        if decision is None:
            return
        self.drifts += 1
        self.last = decision
        # no line of its own: the server's events (runtime/events.py, a listener) say each drift once
        for listen in self.listeners:
            listen(decision)

    @property
    def applied(self) -> dict[str, float]:
        """Per model, how many times the profile's runtimes the costs in force are (the mean over the curve's batch
        sizes: a recalibration by batch size scales each size by its own factor)."""
        return {
            m: float(np.mean(np.asarray(p.ms) / np.maximum(np.asarray(c.ms), 1e-12)))
            for m, c, p in zip(self.profile.model_names, self._curves, self._planned, strict=True)
        }

    def recalibrated(self, profile: Profile, now: float) -> None:
        """A plan made with ``profile``'s costs (:meth:`calibrated`) is in force from ``now``: the watch compares
        batches with its curves and busy factors, and everything measured so far is forgotten."""
        self.in_force = profile
        self._planned = [profile.model(m).runtime for m in self.profile.model_names]
        self._busy = [profile.model(m).busy_factor for m in self.profile.model_names]
        self.watch.reset(now)
        for d in (*self._since, *self._ends, *self._shares, self._hops):
            d.clear()
        for z in self._sizes:
            z.clear()

    def calibrated(self, decision: CostDrift, source: str) -> Profile:
        """The profile in force with each model ``decision`` names recalibrated from its batches of the watch's last
        window, by the rule ``profile calibrate --url`` applies to the whole run
        (:func:`~cascadeserve.profile.calibration.snapshot_factors`: the factor with the host's other devices idle
        and the busy factor where the batches could be fitted against the host's load, and a factor per batch size
        where several sizes had enough batches), from the profile's own runtimes. The other models keep the costs
        in force."""
        since = decision.time - self.watch.settings.window_s
        got = snapshot_factors(self.snapshot(since=since), 1)
        departed = {c.model for c in decision.departed}
        for m in set(got.factors) - departed:
            got.drop(m)
        base = dataclasses.replace(
            self.in_force,
            models=tuple(self.profile.model(m.name) if m.name in got.factors else m for m in self.in_force.models),
        )
        return calibrate(base, got.factors, source=source, busy=got.busy, sizes=got.sizes, spread=got.spread)

    # -- what GET /v2/cascade/costs shows ------------------------------------------------------------------------
    def snapshot(self, since: float = -math.inf) -> dict[str, Any]:
        """Per model: the window's factor against the costs in force, and the median and (trimmed) mean of the
        batches that ended at ``since`` or later (default: since the start or the last recalibration) against the
        profile (``profile calibrate`` scales the profile by the mean)."""
        window = {c.model: c for c in self.watch.factors(self.now)}
        fits = self.contention(since)
        applied = self.applied
        models = []
        for m in self.profile.model_names:
            ratios, shares, sizes = self._batches(self._rows[m], since)
            n = len(ratios)
            w = window.get(m)
            fit = fits.get(m)
            # per batch size (enough batches of it): the factor with the other devices idle where the contention
            # was fitted, else the plain mean (profile calibrate scales each size of the curve by its own)
            sized = fit.by_size if fit is not None else size_factors(ratios, sizes)
            busy = fit.busy_factor if fit is not None else self._busy[self._rows[m]]
            spread = served_spread(self.profile, self._rows[m], ratios, shares, sizes, busy) if n else None
            models.append(
                {
                    "model": m,
                    "factor_vs_profile": float(np.median(ratios)) if n else None,
                    # what calibration uses: a queue's wait grows with the mean service time, not its median, and
                    # under contention batches run long more often than short; the top 1 % (stalls) is left out
                    "mean_factor_vs_profile": trimmed_mean(ratios) if n else None,
                    # the spread: a queue's tail grows with the service time's variance, which no mean describes
                    "p95_factor_vs_profile": float(np.percentile(ratios, 95)) if n else None,
                    "batches": n,
                    "window_factor": None if w is None else w.factor,
                    "window_batches": 0 if w is None else w.batches,
                    "applied": applied[m],
                    # against the host's load: the factor with the other devices idle, and how much slower with all
                    # of them busy (profile calibrate applies both when they could be fitted)
                    "alone_factor": None if fit is None else fit.alone,
                    "busy_factor": None if fit is None else fit.busy_factor,
                    "busy_share": None if fit is None else fit.share,
                    "size_factors": {str(b): f for b, f in sized.items()},
                    # the σ of each batch's time beyond what its rule, its size's factor and the host's load explain
                    # (profile/spread.py; None: too few batches): a queue's tail near saturation grows with it
                    "batch_spread": spread,
                }
            )
        s = self.watch.settings
        hop_ms, hop_p95_ms = mean_and_p95(self._hops)
        return {
            "profile": self.profile.name,
            "backend": self.backend,
            # first-stage answers' time beyond their server time: the process hop on Ray (module docstring)
            "hop": {"answers": len(self._hops), "mean_ms": hop_ms * 1000.0, "p95_ms": hop_p95_ms * 1000.0},
            "calibration": self.in_force.calibration,
            "tolerance": s.tolerance,
            "window_s": s.window_s,
            "drifts": self.drifts,
            "last_drift": None if self.last is None else self.last.describe(),
            "models": models,
        }

    def contention(self, since: float = -math.inf) -> dict[str, HostFit]:
        """Per model, its batch times (those that ended at ``since`` or later) fitted against the share of the other
        devices busy when each started (only the models whose batches saw a spread of shares:
        :func:`~cascadeserve.profile.host.fit_contention`)."""
        out: dict[str, HostFit] = {}
        for m, row in self._rows.items():
            fit = fit_contention(*self._batches(row, since))
            if fit is not None:
                out[m] = fit
        return out

    def _batches(self, row: int, since: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Model ``row``'s batches that ended at ``since`` or later: ratios to the profile, host shares, sizes."""
        ratios = np.asarray(self._since[row], dtype=np.float64)
        shares = np.asarray(self._shares[row], dtype=np.float64)
        sizes = np.asarray(self._sizes[row], dtype=np.int64)
        if since == -math.inf:
            return ratios, shares, sizes
        keep = np.asarray(self._ends[row], dtype=np.float64) >= since
        return ratios[keep], shares[keep], sizes[keep]
