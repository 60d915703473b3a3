"""The discrete-event simulator of a cascadeserve deployment (paper appendix C).

It replays an arrival trace against a gear plan and a profile, applying the decisions of :mod:`cascadeserve.policy`
exactly as the runtime does (only the clock differs) and deciding nothing itself:

* every ``tick`` (100 ms, at ``k·tick``) the producer measures QPS and applies the plan's
  :class:`~cascadeserve.policy.GearPolicy`; the tick's arrivals are admitted under that gear (by an optional
  :class:`~cascadeserve.policy.AdmissionPolicy`, the rest shed) and routed by :class:`~cascadeserve.policy.Routers`;
* a free device asks :func:`~cascadeserve.policy.next_batch` which replica fires and when, and
  :func:`~cascadeserve.policy.batch_size` how many samples it takes; a batch lasts the profile's runtime (plus the
  plan's ``batch_overhead_ms``); :meth:`~cascadeserve.policy.PlanTables.exits` says who is answered, the rest go on;
* request ``i`` uses validation sample ``i mod n``; at one instant the order is tick, arrivals, device events (the
  runtime on a fake clock replays it so); after the last tick window queues drain, and a request that never
  completes is reported unanswered. A Ray plan also pays its process hops (:mod:`cascadeserve.simulate.hops`).

The optional hooks are listed in :mod:`cascadeserve.simulate` (off, each costs an ``is None`` test). Speed comes
from working per *batch*: a tick's arrivals are routed in one vectorised call, and exits and forwarding are a few
numpy operations per batch (a per-sample path on the same policy calls serves batches of ≤ 16).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np

from cascadeserve.plan import GearPlan
from cascadeserve.policy import (
    AdmissionPolicy,
    BatchDecision,
    BatchTrigger,
    GearSchedule,
    PlanTables,
    QpsMeter,
    Routers,
    batch_members,
    batch_size,
    next_batch,
)
from cascadeserve.policy.adaptive import BatchLimit, batch_limit_for, capped_trigger
from cascadeserve.policy.cache import PredictionCache
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile
from cascadeserve.profile.slowdown import Slowdowns
from cascadeserve.simulate.compiled import Engine, run_compiled, unsupported
from cascadeserve.simulate.hops import charge_hops
from cascadeserve.simulate.queues import Forwarded, take_batch, tick_windows
from cascadeserve.simulate.result import BatchRecord, SimResult, build_result

__all__ = ["Simulator", "simulate", "tick_windows"]

_TABLE_BATCH = 4096
_SMALL_BATCH = 16  # a speed switch only: up to this size a batch's exits and forwarding run per sample (same results)
_NO_BATCH = BatchDecision(math.inf, math.inf, -1, -1)
_EMPTY_I = np.empty(0, dtype=np.int64)
_EMPTY_F = np.empty(0, dtype=np.float64)


class Simulator:
    """One simulation run. Build it, call :meth:`run`; the object is not reusable."""

    def __init__(
        self,
        profile: Profile,
        plan: GearPlan,
        *,
        record_batches: bool = False,
        batch_limit: BatchLimit | None = None,
        gear_schedule: GearSchedule | None = None,
        cache: PredictionCache[int] | None = None,
        slowdowns: Slowdowns | None = None,
        admission: AdmissionPolicy | None = None,
        tuning: OnlineTuning | None = None,
        engine: Engine = "auto",
    ) -> None:
        plan.check_against(profile)
        if engine not in ("auto", "compiled", "python"):
            raise ValueError(f"engine: {engine!r} is not one of auto, compiled, python")
        self.engine: Engine = engine
        self.batch_limit = batch_limit if batch_limit is not None else batch_limit_for(plan)
        self.cache = cache
        self.slowdowns = slowdowns or None
        self._device_names = [d.name for d in plan.devices]
        self.admission = admission
        self.profile = profile
        self.plan = plan
        self.tables = PlanTables(plan, {m: profile.index(m) for m in profile.model_names})
        # thresholds re-tuned online live in this run's own tables (``tuning.for_plan(sim.tables, ...)``)
        self.tuning = tuning
        self.gear_policy = self.tables.gear_policy(gear_schedule)  # refuses a schedule naming a missing gear
        self.record_batches = record_batches
        self.tick_s = plan.tick_ms / 1000.0
        self._rt_tables = [m.runtime.table(_TABLE_BATCH) for m in profile.models]

    def run(
        self,
        arrivals: Sequence[float] | np.ndarray,
        samples: np.ndarray | None = None,
        qps_scale: np.ndarray | None = None,
    ) -> SimResult:
        """Replay ``arrivals``; request ``i`` uses validation sample ``samples[i]`` (default ``i mod n``); tick ``w``
        scales its measured QPS by ``qps_scale[w]`` when given (the last factor holds past its end). A plan served
        on Ray also pays its process hops (:mod:`~cascadeserve.simulate.hops`)."""
        hop_ms = self.plan.hop_ms or (self.profile.ray_hop_ms if self.plan.backend == "ray" else 0.0)
        return charge_hops(self._replay(arrivals, samples, qps_scale), self.plan, hop_ms)

    def _replay(
        self, arrivals: Sequence[float] | np.ndarray, samples: np.ndarray | None, qps_scale: np.ndarray | None
    ) -> SimResult:
        wall0 = time.perf_counter()
        arr = np.asarray(arrivals, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError("arrivals must be a 1-D array of times in seconds")
        if len(arr) and (np.any(np.diff(arr) < 0) or arr[0] < 0):
            raise ValueError("arrival times must be non-negative and sorted")
        tb = self.tables
        n, n_samples = len(arr), self.profile.n_samples
        sample_of = None if samples is None else np.asarray(samples, dtype=np.int64)
        if sample_of is not None and (
            sample_of.shape != arr.shape or (n and (sample_of.min() < 0 or sample_of.max() >= n_samples))
        ):
            raise ValueError(f"samples must hold one validation sample index in [0, {n_samples}) per arrival")
        if self.engine == "compiled" or (self.engine == "auto" and unsupported(self) is None):
            return run_compiled(self, arr, sample_of, wall0, qps_scale)
        r_count, d_count = tb.n_replicas, tb.n_devices
        cert = self.profile.certainties
        replica_row = tb.replica_row.tolist()
        replica_device = tb.replica_device.tolist()
        device_replicas = tb.device_replicas
        single_gear = tb.n_gears == 1

        finish = np.full(n, np.inf)
        admission = self.admission
        shed = None if admission is None else np.zeros(n, dtype=bool)
        counts = [0, 0]  # admitted, answered (in flight = the difference), kept only with an admission policy
        answer_row = np.full(n, -1, dtype=np.int64)
        gear_of = np.zeros(n, dtype=np.int64)

        tick = self.tick_s
        n_ticks = tick_windows(arr, tick)
        bounds = np.searchsorted(arr, tick * np.arange(n_ticks + 1), side="left").tolist() if n else [0]
        tick_qps = np.zeros(n_ticks)
        tick_gear = np.zeros(n_ticks, dtype=np.int64)
        tick_q0 = np.zeros(n_ticks, dtype=np.int64)
        tick_busy = np.zeros((n_ticks + 1, d_count))
        batches: list[BatchRecord] = []

        pend_ids: list[np.ndarray] = [_EMPTY_I] * r_count
        pend_t: list[np.ndarray] = [_EMPTY_F] * r_count
        pos = [0] * r_count
        fwd = [Forwarded() for _ in range(r_count)]
        busy: list[tuple[int, np.ndarray, float] | None] = [None] * d_count
        busy_until = [math.inf] * d_count
        free_at = [0.0] * d_count
        ready: list[BatchDecision] = [_NO_BATCH] * d_count
        dirty = [True] * d_count
        routers: Routers = tb.new_routers()
        meter = QpsMeter(tick, min_arrivals=self.plan.qps_min_arrivals)
        limiter = self.batch_limit
        cache = self.cache
        tuning = self.tuning
        cached = np.zeros(n, dtype=bool) if cache is not None else None
        slowdowns = self.slowdowns
        device_names = self._device_names
        gear_policy = self.gear_policy
        gear = gear_policy.initial()
        triggers: Sequence[BatchTrigger] = tb.triggers_for(gear)
        clock = 0.0  # time of the last processed event
        overhead_s = self.plan.batch_overhead_ms / 1000.0

        # Per replica: when its trigger fires, ignoring "not before now" (-inf = already ready), and the time its
        # oldest sample entered. Recomputed only for replicas whose queue or trigger changed.
        rep_t = [math.inf] * r_count
        rep_first = [math.inf] * r_count
        rep_dirty = [True] * r_count

        def refresh(r: int) -> None:
            rep_dirty[r] = False
            f = fwd[r]
            p = pos[r]
            n_pend = len(pend_ids[r]) - p
            if f.n == 0 and n_pend == 0:
                rep_t[r] = math.inf
                return
            first = min(f.oldest, float(pend_t[r][p])) if n_pend else f.oldest
            trig = triggers[r] if limiter is None else capped_trigger(triggers[r], limiter.limit(r))
            need = trig.min_queue - f.n
            if need <= 0:
                mth = -math.inf
            elif need <= n_pend:
                mth = float(pend_t[r][p + need - 1])
            else:
                mth = math.inf
            rep_t[r] = trig.fire_time(-math.inf, first, mth)
            rep_first[r] = first

        def compute_ready(d: int) -> BatchDecision:
            now = max(clock, free_at[d])
            cands: list[tuple[float, float, int, int]] = []
            for r in device_replicas[d]:
                if rep_dirty[r]:
                    refresh(r)
                t = rep_t[r]
                if t < math.inf:
                    cands.append((now if t < now else t, rep_first[r], 0, r))
            decision = next_batch(cands)
            return _NO_BATCH if decision is None else decision

        def start(d: int, t: float, r: int) -> None:
            rep_dirty[r] = True
            f = fwd[r]
            p = pos[r]
            pt = pend_t[r]
            k = p if p == len(pt) else int(np.searchsorted(pt, t, side="right", sorter=None))
            k = max(k, p)
            size = batch_size(triggers[r], f.n + (k - p), None if limiter is None else limiter.limit(r))
            members = batch_members(size, f, pt[p:k])  # which of the present samples, in which order
            ids = take_batch(f, pend_ids[r], p, members)
            pos[r] = p + members.arrived
            row = replica_row[r]
            tab = self._rt_tables[row]
            secs = (tab[size] if size < len(tab) else self.profile.models[row].runtime.seconds(size)) + overhead_s
            if slowdowns is not None:
                secs *= slowdowns.factor(device_names[d], t, self.profile.models[row].name)
            busy[d] = (r, ids, t)
            busy_until[d] = t + secs
            w = min(int(t // tick), n_ticks) if n_ticks else 0
            tick_busy[w, d] += secs

        def complete(d: int, t: float) -> None:
            entry = busy[d]
            assert entry is not None
            r, ids, t0 = entry
            if limiter is not None:
                limiter.observe(r, t - t0, len(ids))
                rep_dirty[r] = True  # the cap may have moved the trigger
            busy[d] = None
            busy_until[d] = math.inf
            free_at[d] = t
            dirty[d] = True
            row = replica_row[r]
            if tuning is not None:
                complete_tuned(d, t, r, ids, t0, row, tuning)
                return
            if len(ids) <= _SMALL_BATCH:
                complete_small(d, t, r, ids, t0, row)
                return
            c = cert[row, ids % n_samples if sample_of is None else sample_of[ids]]
            sure = tb.exits(row, c, None if single_gear else gear_of[ids])
            ans = ids[sure]
            finish[ans] = t
            counts[1] += len(ans)
            answer_row[ans] = row
            if cache is not None:
                for s_id in (ans % n_samples if sample_of is None else sample_of[ans]).tolist():
                    cache.store(s_id, row)
            if self.record_batches:
                batches.append(BatchRecord(t0, t, d, r, row, len(ids), len(ans)))
            if len(ans) == len(ids):
                return
            forward(ids[~sure], row, t)

        def forward(fw: np.ndarray, row: int, t: float) -> None:
            push(routers.forward_split(row, fw, None if single_gear else gear_of[fw]), t)

        def push(parts: Sequence[tuple[int, np.ndarray | list[int]]], t: float) -> None:
            for rr, sub in parts:
                fwd[rr].push(sub if isinstance(sub, np.ndarray) else np.array(sub, dtype=np.int64), t)
                rep_dirty[rr] = True
                dirty[replica_device[rr]] = True

        preds = self.profile.predictions
        labels = self.profile.labels
        audited = np.zeros(n, dtype=bool) if self.tuning is not None else None

        def complete_tuned(d: int, t: float, r: int, ids: np.ndarray, t0: float, row: int, tu: OnlineTuning) -> None:
            # The same exit decision, plus audit sampling (policy.tuning.AuditSampler): an audited early exit is
            # answered here and also runs the remaining stages, off the critical path; a sample whose record is
            # whole (at its gear's last stage) goes to the tuner's window.
            assert audited is not None
            s_idx = ids % n_samples if sample_of is None else sample_of[ids]
            g_arr = gear_of[ids]
            sure = tb.exits(row, cert[row, s_idx], None if single_gear else g_arr)
            last = tb.next_row[g_arr, row] < 0
            prior = audited[ids]
            answer, aud = tu.auditor.split(sure, last, prior)
            audited[ids[aud]] = True
            ans = ids[answer]
            finish[ans] = t
            counts[1] += len(ans)
            answer_row[ans] = row
            if cache is not None:
                for s_id in s_idx[answer].tolist():
                    cache.store(s_id, row)
            if self.record_batches:
                batches.append(BatchRecord(t0, t, d, r, row, len(ids), len(ans)))
            if last.any():
                for g in np.unique(g_arr[last]).tolist():
                    sel = last & (g_arr == g)
                    rows = list(tb.gear_rows(g))
                    s_sel = s_idx[sel]
                    tu.record(g, cert[rows][:, s_sel].T, preds[rows][:, s_sel].T, labels[s_sel], prior[sel])
            go_on = (~sure | prior | aud) & ~last
            if go_on.any():
                forward(ids[go_on], row, t)

        cert_lists = [c.tolist() for c in cert]
        exits_list = tb.exits_list

        def complete_small(d: int, t: float, r: int, ids: np.ndarray, t0: float, row: int) -> None:
            # The same decisions as the vectorised path, one sample at a time: for the small batches of low load,
            # a dozen numpy calls on arrays of 1-16 elements cost more than a Python loop.
            il = ids.tolist()
            crow = cert_lists[row]
            gl = None if single_gear else gear_of[ids].tolist()
            sl = [i % n_samples for i in il] if sample_of is None else sample_of[ids].tolist()
            sure = exits_list(row, [crow[s] for s in sl], gl)
            n_ans = 0
            unsure: list[int] = []
            for k, i in enumerate(il):
                if sure[k]:
                    finish[i] = t
                    answer_row[i] = row
                    n_ans += 1
                    if cache is not None:
                        cache.store(sl[k], row)
                else:
                    unsure.append(k)
            counts[1] += n_ans
            if self.record_batches:
                batches.append(BatchRecord(t0, t, d, r, row, len(il), n_ans))
            if unsure:
                gears = None if gl is None else [gl[k] for k in unsure]
                push(routers.forward_split_list(row, [il[k] for k in unsure], gears), t)

        def queued(r: int) -> int:
            return fwd[r].n + len(pend_ids[r]) - pos[r]

        def run_until(t_end: float) -> None:
            nonlocal clock
            while True:
                best_t = t_end
                best_d = -1
                for d in range(d_count):
                    if busy[d] is not None:
                        t = busy_until[d]
                    else:
                        if dirty[d]:
                            ready[d] = compute_ready(d)
                            dirty[d] = False
                        t = ready[d].at
                    if t < best_t:
                        best_t = t
                        best_d = d
                if best_d < 0:
                    return
                clock = best_t
                if busy[best_d] is not None:
                    complete(best_d, best_t)
                else:
                    start(best_d, best_t, ready[best_d].replica)

        def enqueue(ids: np.ndarray) -> None:
            """Route admitted requests to first-stage replicas under the current gear."""
            for rr, sub in routers.admit_split(gear, ids):
                p = pos[rr]
                if p == len(pend_ids[rr]):
                    pend_ids[rr] = sub
                    pend_t[rr] = arr[sub]
                else:
                    pend_ids[rr] = np.concatenate([pend_ids[rr][p:], sub])
                    pend_t[rr] = np.concatenate([pend_t[rr][p:], arr[sub]])
                pos[rr] = 0
                rep_dirty[rr] = True
                dirty[replica_device[rr]] = True

        for w in range(n_ticks):
            t_w = w * tick
            if w > 0:
                meter.record(bounds[w] - bounds[w - 1])
                qps = meter.tick(t_w)
                if qps_scale is not None and len(qps_scale):
                    gear_policy.rescale(float(qps_scale[min(w, len(qps_scale) - 1)]))
                q0 = tb.q0(gear, queued)
                new_gear = gear_policy.decide(w, gear, qps, q0).gear
                tick_qps[w] = qps
                tick_q0[w] = q0
                if new_gear != gear:
                    gear = new_gear
                    triggers = tb.triggers_for(gear)
                    dirty = [True] * d_count
                    rep_dirty = [True] * r_count
            if tuning is not None:
                change = tuning.decide(w * tick, gear, tb)
                if change is not None:
                    tb.apply_thresholds(change)
            tick_gear[w] = gear
            clock = t_w
            a, b = bounds[w], bounds[w + 1]
            if b > a:
                gear_of[a:b] = gear
                if admission is not None and shed is not None:
                    k = admission.admits(b - a, counts[0] - counts[1])
                    shed[a + k : b] = True
                    counts[0] += k
                    b = a + k
            if b > a:
                if cache is not None and cached is not None:
                    # One arrival at a time, after the device events before it, as the runtime sees them: a hit
                    # (an answer given before this arrival) is answered now and never queued.
                    for i in range(a, b):
                        t_i = float(arr[i])
                        run_until(t_i)
                        clock = t_i
                        hit = cache.lookup(i % n_samples if sample_of is None else int(sample_of[i]))
                        if hit is None:
                            enqueue(np.array([i], dtype=np.int64))
                        else:
                            finish[i] = t_i
                            answer_row[i] = hit
                            cached[i] = True
                            counts[1] += 1  # a hit is answered at once: it leaves flight as it enters
                else:
                    enqueue(np.arange(a, b, dtype=np.int64))
            run_until((w + 1) * tick)  # the next tick at (w+1)·tick exactly, as the runtime producer ticks

        # Drain: no more arrivals, so from the end of the last tick every queue fires as soon as its device is free.
        # (Not earlier: until then a queue short of its minimum length was still waiting for arrivals.)
        clock = n_ticks * tick
        triggers = tb.triggers_for(gear, draining=True)
        dirty = [True] * d_count
        rep_dirty = [True] * r_count
        run_until(math.inf)

        return build_result(
            arrivals=arr,
            samples=np.arange(n, dtype=np.int64) % n_samples if sample_of is None else sample_of,
            finish=finish,
            answer_row=answer_row,
            gear=gear_of,
            predictions=self.profile.predictions,
            labels=self.profile.labels,
            stage_table=tb.stage,
            tick_s=tick,
            n_ticks=n_ticks,
            tick_qps=tick_qps,
            tick_gear=tick_gear,
            tick_q0=tick_q0,
            tick_busy_s=tick_busy,
            wall_s=time.perf_counter() - wall0,
            batches=batches,
            cached=cached,
            shed=shed,
            threshold_changes=[] if tuning is None else list(tuning.changes),
            engine="python",
        )


def simulate(
    profile: Profile,
    plan: GearPlan,
    arrivals: Sequence[float] | np.ndarray,
    *,
    record_batches: bool = False,
    batch_limit: BatchLimit | None = None,
    gear_schedule: GearSchedule | None = None,
    cache: PredictionCache[int] | None = None,
    slowdowns: Slowdowns | None = None,
    samples: np.ndarray | None = None,
    admission: AdmissionPolicy | None = None,
    tuning: OnlineTuning | None = None,
    engine: Engine = "auto",
) -> SimResult:
    """Simulate ``plan`` serving ``arrivals`` (seconds, sorted) with ``profile``'s runtimes and records.

    ``batch_limit``, ``gear_schedule``, ``cache``, ``slowdowns`` and ``tuning`` are the optional hooks
    (:mod:`cascadeserve.simulate` lists them; those that hold state want fresh ones per run); ``samples`` gives
    each request's validation sample (default ``i mod n``). ``engine``: ``"auto"`` runs the compiled loop
    (:mod:`cascadeserve.simulate.compiled`) unless a hook needs the Python reference loop; ``"compiled"`` or
    ``"python"`` forces one. Both replay the same trajectory to the bit.
    """
    return Simulator(
        profile,
        plan,
        record_batches=record_batches,
        batch_limit=batch_limit,
        gear_schedule=gear_schedule,
        cache=cache,
        slowdowns=slowdowns,
        admission=admission,
        tuning=tuning,
        engine=engine,
    ).run(arrivals, samples)
