"""The reference simulator: the serving runtime itself, on emulated devices and a virtual clock.

Nothing here decides or queues. A replay builds the runtime a server would run (:func:`~cascadeserve.runtime.
emulated_runtime`: the producer, a consumer per device, the plan's queues, devices that wait the profiled batch
runtime plus the plan's ``batch_overhead_ms`` and answer from the profile's records) on a
:class:`~cascadeserve.runtime.virtual.VirtualClock`, and plays the trace into it as a client would:

* every ``tick`` after the first (at ``k·tick``, before anything else at that instant) the producer's tick, after
  setting appendix C.2's QPS scale of that tick when the run has one (re-planning's load drift);
* at each arrival instant, after the tick, one ``submit`` per request (sample ``i mod n``, or ``samples[i]``),
  before any device event of that instant; a request the admission policy refuses is shed;
* at the end of the last tick window, every queue is told to drain (no more arrivals), and the replay runs until
  no event is left: a request still unanswered then is reported so.

The outcome of each request (its answer's time, model, gear, cache hit), every batch, every tick's decision and
every threshold change come from the runtime's own records and become a
:class:`~cascadeserve.simulate.SimResult`. Whatever the runtime does is, by construction, what the simulator
predicts; :mod:`cascadeserve.simulate.compiled` is the fast path checked against this one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.runtime import Overloaded, Recorder, Request, RuntimeOptions, emulated_runtime
from cascadeserve.runtime.virtual import VirtualClock, run_virtual
from cascadeserve.simulate.result import BatchRecord, SimResult, TickSeries, build_result
from cascadeserve.simulate.scenario import Scenario
from cascadeserve.simulate.ticks import tick_windows

__all__ = ["run_reference"]

# Orders at one instant (lowest first): the drain, the producer's tick and the arrivals come before every device
# event (devices wait with their rank, 0 and up). The drain goes first: the last window's end takes no tick.
_DRAIN, _TICK, _ARRIVALS = -2.0, -1.0, -0.5


def run_reference(
    scn: Scenario, arr: np.ndarray, sample_of: np.ndarray | None, qps_scale: np.ndarray | None, wall0: float
) -> SimResult:
    """Replay ``arr`` (validated, sorted seconds) through the runtime on a virtual clock (see the module doc)."""
    clock = VirtualClock()
    return run_virtual(_replay(scn, clock, arr, sample_of, qps_scale, wall0), clock)


def _options(scn: Scenario) -> RuntimeOptions:
    tuning, labels = scn.tuning, scn.profile.labels
    factory: Callable[[PlanTables], OnlineTuning] | None = None if tuning is None else (lambda _tables: tuning)
    return RuntimeOptions(
        max_in_flight=None,
        admission=scn.admission,
        run_producer=False,  # the replay ticks the producer itself, at k·tick, and stops ticking at the drain
        batch_limit=scn.batch_limit,
        gear_schedule=scn.gear_schedule,
        cache=scn.cache,
        tuning=factory,
        # tuning against labels takes each whole record's label from the profile (payloads are sample indices)
        tuning_labels=None if tuning is None else (lambda sample: int(labels[sample])),
        slowdowns=scn.slowdowns,
    )


async def _replay(
    scn: Scenario,
    clock: VirtualClock,
    arr: np.ndarray,
    sample_of: np.ndarray | None,
    qps_scale: np.ndarray | None,
    wall0: float,
) -> SimResult:
    prof, plan = scn.profile, scn.plan
    n, tick = len(arr), scn.tick_s
    n_ticks = tick_windows(arr, tick)
    samples = np.arange(n, dtype=np.int64) % prof.n_samples if sample_of is None else sample_of
    rec = Recorder()
    rt = emulated_runtime(
        prof, plan, clock=clock, observer=rec, options=_options(scn), batch_overhead_s=plan.batch_overhead_ms / 1000.0
    )
    await rt.start()
    gear_of = np.zeros(n, dtype=np.int64)
    shed = np.zeros(n, dtype=bool) if scn.admission is not None else None
    reqs: list[Request | None] = [None] * n
    times, sample_list = arr.tolist(), samples.tolist()

    def tick_at(w: int) -> Callable[[], None]:
        def producer_tick() -> None:  # after setting the tick's QPS scale (re-planning's load drift), if any
            if qps_scale is not None and len(qps_scale):
                rt.current.gear_policy.rescale(float(qps_scale[min(w, len(qps_scale) - 1)]))
            rt.producer.tick(w * tick)

        return producer_tick

    def arrive(a: int, b: int) -> Callable[[], None]:
        def submit() -> None:  # the requests of one instant, one call each, in arrival order
            for i in range(a, b):
                gear_of[i] = rt.gear
                try:
                    (reqs[i],) = rt.submit([sample_list[i]])
                except Overloaded:
                    assert shed is not None  # only an admission policy sheds
                    shed[i] = True

        return submit

    # The whole timeline, as timers: ticks (order -1), each arrival instant (order -0.5), the drain (order -2).
    for w in range(1, n_ticks):
        clock.call_at(w * tick, tick_at(w), order=_TICK)
    a = 0
    while a < n:
        b = a + 1
        while b < n and times[b] == times[a]:
            b += 1
        clock.call_at(times[a], arrive(a, b), order=_ARRIVALS)
        a = b
    clock.call_at(n_ticks * tick, rt.drain, order=_DRAIN)
    await clock.quiet()  # every event has happened (a request never answered stays so)
    result = _result(scn, rec, reqs, arr, samples, gear_of, shed, n_ticks, wall0)
    await rt.stop(grace_s=0.0)
    return result


def _result(
    scn: Scenario,
    rec: Recorder,
    reqs: list[Request | None],
    arr: np.ndarray,
    samples: np.ndarray,
    gear_of: np.ndarray,
    shed: np.ndarray | None,
    n_ticks: int,
    wall0: float,
) -> SimResult:
    prof, tick = scn.profile, scn.tick_s
    n = len(arr)
    row_of = {m: k for k, m in enumerate(prof.model_names)}
    finish = np.full(n, np.inf)
    answer_row = np.full(n, -1, dtype=np.int64)
    cached = np.zeros(n, dtype=bool) if scn.cache is not None else None
    for k, req in enumerate(reqs):
        if req is None or not req.future.done() or req.future.cancelled() or req.future.exception() is not None:
            continue
        ans = req.future.result()
        finish[k] = ans.finished
        answer_row[k] = row_of[ans.model]
        if cached is not None:
            cached[k] = ans.cached
    tick_qps = np.zeros(n_ticks)
    tick_gear = np.full(n_ticks, scn.gear_policy.initial(), dtype=np.int64)
    tick_q0 = np.zeros(n_ticks, dtype=np.int64)
    for w, ev in enumerate(rec.ticks[: max(n_ticks - 1, 0)], start=1):
        tick_qps[w], tick_gear[w], tick_q0[w] = ev.decision.qps, ev.decision.gear, ev.decision.q0
    busy = np.zeros((n_ticks + 1, scn.tables.n_devices))
    for b in rec.batches:  # busy seconds counted in the tick where the batch starts
        busy[min(int(b.start // tick), n_ticks) if n_ticks else 0, b.device] += b.end - b.start
    batches = (
        [BatchRecord(b.start, b.end, b.device, b.replica, b.row, b.size, b.answered) for b in rec.batches]
        if scn.record_batches
        else []
    )
    return build_result(
        arrivals=arr,
        samples=samples,
        finish=finish,
        answer_row=answer_row,
        gear=gear_of,
        predictions=prof.predictions,
        labels=prof.labels,
        stage_table=scn.tables.stage,
        ticks=TickSeries(tick, n_ticks, tick_qps, tick_gear, tick_q0, busy),
        wall_s=time.perf_counter() - wall0,
        batches=batches,
        cached=cached,
        shed=shed,
        threshold_changes=list(rec.threshold_changes),
        engine="reference",
    )
