"""The compiled event loop: the simulator of :mod:`cascadeserve.simulate.engine`, in numba, for runs without hooks.

It replays exactly the trajectory of the reference engine (the runtime on a virtual clock, ``engine="reference"``):
the same order at one instant (the producer's tick, then the arrivals, then device events, the lowest device first
on a tie), the same cached "ready" decisions per device, the same batch contents and order (the policy's
:func:`~cascadeserve.policy.batch_members`: a capped batch takes the oldest first across forwarded and new samples,
forwarded first on a tie, slot by slot with the kernel ``takes_forwarded``; the whole queue lists forwarded samples
first), the same forwarding (unsure samples in batch order, each by its own gear's router, as the runtime does) and
the same router positions. The decisions are the functions of :mod:`cascadeserve.policy.kernels`, called by name and
compiled as their twins (``fire_time``, ``prefer``, ``take_count``, ``takes_forwarded``, ``stage_exits``,
``swrr_pick``, ``select_gear``, ``scheduled_gear``, ``windowed_qps``, ``admitted``); this module only keeps queues
and clocks.

Queues are linked lists through one ``nxt`` array indexed by request (a request sits in at most one queue or batch
at a time): per replica a queue of first-stage arrivals (without admission, a tick's arrivals are queued at its
start, some still in the future, and a trigger reads their times; with admission each is queued when it arrives and
is admitted) and a queue of forwarded samples with the time each entered it, per device the batch it runs. Pushing
and taking cost O(1) per sample, and no Python object is made per batch.

The run's data travels as named records (:mod:`cascadeserve.simulate.loop_records`): the loop takes the requests,
the plan's tables, its routers, the batch costs, the gear controller and the options, allocates the queue and device
state and the outcomes, and returns a :class:`~cascadeserve.simulate.loop_records.LoopOutput`. A record's fields are
read once per compiled function (:class:`~cascadeserve.simulate.loop_compiler.RecordFieldHoisting`), so the event
loop reads them as the plain arrays they are.

The entry point, :func:`build_loop`, compiles on first use (or loads numba's on-disk cache) and returns the compiled
function; :mod:`cascadeserve.simulate.compiled` builds its records and turns its output into a ``SimResult``.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, cast

import numpy as np

from cascadeserve.policy.kernels import (
    admitted,
    aimd_next,
    compile_calling_kernels,
    scheduled_gear,
    select_gear,
    windowed_qps,
)
from cascadeserve.profile.host import busy_at, contended, host_peers, host_share
from cascadeserve.simulate.loop_queues import (
    F_N,
    HELPERS,
    P_N,
    exits,
    exits_audited,
    forward,
    ready,
    record_batch,
    route,
    take,
    token_secs,
    woken,
)
from cascadeserve.simulate.loop_records import (
    LoopCosts,
    LoopGears,
    LoopInputs,
    LoopOptions,
    LoopOutput,
    LoopPlan,
    LoopRoutes,
    new_outcomes,
    new_state,
)

__all__ = ["CompiledLoop", "LoopOutput", "build_loop"]


def _loop(inp_f, plan_f, routes_f, costs_f, gears_f, opts_f):  # type: ignore[no-untyped-def]  # numba types them
    """One run: the state and outcomes allocated, the events replayed (:func:`_ticks`); a :class:`LoopOutput`. Each
    argument is the plain tuple of a record's fields (see :func:`build_loop`), named here."""
    inp, plan, routes = LoopInputs(*inp_f), LoopPlan(*plan_f), LoopRoutes(*routes_f)
    costs, gears, opts = LoopCosts(*costs_f), LoopGears(*gears_f), LoopOptions(*opts_f)
    n = inp.arr.shape[0]
    st = new_state(n, plan, routes, opts, gears.gear0)
    out = new_outcomes(n, gears.n_ticks, plan.dev_start.shape[0] - 1, opts.use_admission)
    res = _ticks(inp, plan, routes, costs, gears, opts, st, out)
    if res.table_short:  # a batch past the runtime table: the caller rebuilds it bigger and runs again
        return res
    answer_row, stage, gear_of, stage_table = out.answer_row, out.stage, out.gear_of, plan.stage_table
    last_row = stage_table.shape[1] - 1
    for i in range(n):
        if answer_row[i] < 0:  # as SimResult has always reported an unanswered request: the last row's stage
            stage[i] = stage_table[gear_of[i], last_row]
    return res


def _output(short, out, rec_f, rec_i):  # type: ignore[no-untyped-def]
    """The run's :class:`LoopOutput`: ``short`` (0, or the batch size past the runtime table), the outcomes, the
    recorded batches."""
    return LoopOutput(
        short, out.finish, out.answer_row, out.correct, out.stage, out.gear_of, out.shed, out.tick_qps, out.tick_gear,
        out.tick_q0, out.tick_busy, rec_f, rec_i,
    )  # fmt: skip


def _ticks(inp, plan, routes, costs, gears, opts, st, out):  # type: ignore[no-untyped-def]
    """The event loop proper, tick by tick (the producer's tick, then the tick's arrivals and device events, then
    the drain), over the state and outcomes :func:`_loop` allocated; returns the :class:`LoopOutput` (its
    ``table_short`` the batch size that ran past the runtime table, else 0)."""
    inf = math.inf
    arr = inp.arr
    n_ticks = gears.n_ticks
    tick = gears.tick
    d_count = plan.dev_start.shape[0] - 1
    t_len = costs.rt.shape[1]
    cur_wait = plan.max_wait
    rec_f = np.empty((1024 if opts.record else 0, 2))
    rec_i = np.empty((1024 if opts.record else 0, 5), np.int64)
    n_rec = 0
    scratch = np.empty(4096, np.int64)
    gear = gears.gear0
    clock = 0.0
    admitted_n = 0
    answered_n = 0

    # The QPS meter counts every arrival, ``bounds``, shed or admitted: the gear follows the offered load (metering
    # only the admitted would read an overload that admission sheds as a lighter load and keep the costlier gear).
    for w in range(n_ticks + 1):
        gear, clock, lo, hi, nxt_arrival, cur_wait = _tick_begin(
            w, gear, clock, cur_wait, plan, routes, gears, opts, st, out
        )
        t_stop = (w + 1) * tick if w < n_ticks else inf
        b_w = gears.bounds[w + 1] if w < n_ticks else 0
        if not opts.use_admission:
            nxt_arrival = b_w
        while True:  # device events up to the next arrival to admit (with admission), else to the next tick
            if hi > lo:  # route arrivals [lo, hi) to first-stage replicas (queued in order)
                route(lo, hi, routes.route_of[gear, plan.first_row[gear]], plan, routes, st)
                lo = hi
            t_end = arr[nxt_arrival] if nxt_arrival < b_w else t_stop
            # The next device event before t_end. Inline, not a helper: numba copies a helper into its caller, but
            # not the helpers that helper calls (a call per device per event halved the loop's speed).
            best_t = t_end
            best_d = -1
            best_p = -1  # whether the best is a device woken at best_t (0), or not (1); -1: not asked yet
            for d in range(d_count):
                if st.busy[d]:
                    td = st.busy_until[d]
                else:
                    if st.dirty[d]:
                        free_at = st.free_at[d]
                        st.ready_t[d], st.ready_r[d] = ready(d, clock if clock >= free_at else free_at, arr, plan, st,
                                                              opts.lim, cur_wait)  # fmt: skip
                        st.dirty[d] = False
                    td = st.ready_t[d]
                if td < best_t:
                    best_t = td
                    best_d = d
                    best_p = -1
                elif td == best_t and best_d >= 0 and not st.busy[d]:  # (best_d < 0: the next arrival goes first)
                    # A tie: a free device woken at td by the event that poked it (an arrival, a forward, its own
                    # batch's end, the drain) fires first, as the runtime runs its consumer right after that event
                    # and before any other timer of the instant; any other tie goes to the lower device.
                    if best_p < 0:
                        best_p = 0 if woken(best_d, td, arr, plan, st) else 1
                    if best_p == 1 and woken(d, td, arr, plan, st):
                        best_d = d
                        best_p = 0
            if best_d < 0:
                if nxt_arrival < b_w:  # admit the next arrival, after every device event before it
                    i = nxt_arrival
                    nxt_arrival += 1
                    clock = arr[i]
                    if admitted(1, admitted_n - answered_n, opts.adm_cap) == 1:
                        admitted_n += 1
                        lo = i
                        hi = i + 1
                    else:
                        out.shed[i] = True
                    continue
                break
            d = best_d
            t = best_t
            clock = t
            if not st.busy[d]:
                # start: replica ready_r[d] fires at t with the samples present (pending ones arrived by t)
                r = st.ready_r[d]
                st.rep_dirty[r] = True
                head, size = take(r, t, st.cur_cap[r], opts.lim[r], st.rq, st.nxt, arr, st.ftime)
                row = plan.replica_row[r]
                if size >= t_len:  # past the runtime table: the caller rebuilds it bigger and runs again
                    return _output(size, out, rec_f[:0], rec_i[:0])
                share = 0.0  # only a model the host's load slows reads it (two scans of the devices per batch)
                if costs.busy_f[row] != 1.0:
                    share = host_share(busy_at(t, st.busy, st.b_t0, st.busy_until, d, costs.host_g),
                                       host_peers(costs.host_g, d))  # fmt: skip
                secs = contended((token_secs(head, size, row, st.nxt, inp, costs) if costs.use_tok
                                  else costs.rt[row, size]) + costs.overhead, costs.busy_f[row], share)  # fmt: skip
                if costs.use_spread:  # the batch's factor beyond its rule: the device's next draw (profile/spread.py)
                    secs *= costs.spread[d, row, st.started[d] % costs.spread.shape[2]]
                    st.started[d] += 1
                st.busy[d] = True
                st.busy_until[d] = t + secs
                st.b_head[d], st.b_n[d], st.b_r[d], st.b_t0[d] = head, size, r, t
                wb = min(int(t // tick), n_ticks) if n_ticks else 0
                out.tick_busy[wb, d] += st.busy_until[d] - t  # the batch's span as its end minus its start
            else:
                # complete: the exit decision per sample; the unsure ones go to the next stage's routers
                r = st.b_r[d]
                size = st.b_n[d]
                st.busy[d] = False
                st.busy_until[d] = inf
                st.free_at[d] = t
                st.dirty[d] = True
                st.poke_t[d] = t
                if opts.lim[r] >= 0:  # the adaptive (AIMD) cap learns this batch's runtime; the trigger may move
                    opts.lim[r] = aimd_next(opts.lim[r], t - st.b_t0[d], opts.lim_target, opts.lim_step,
                                            opts.lim_backoff, opts.lim_ceiling)  # fmt: skip
                    st.rep_dirty[r] = True
                if scratch.shape[0] < size:
                    scratch = np.empty(2 * size, np.int64)
                row = plan.replica_row[r]
                if opts.audit_f > 0.0:
                    n_un, n_ans = exits_audited(st.b_head[d], size, t, row, inp, plan, st, out, scratch, opts.audit_f)
                else:
                    n_un = exits(st.b_head[d], size, t, row, inp, plan, st, out, scratch)
                    n_ans = size - n_un
                answered_n += n_ans
                if opts.record:
                    rec_f, rec_i = record_batch(rec_f, rec_i, n_rec, st.b_t0[d], t, d, r, row, size, n_ans)
                    n_rec += 1
                forward(n_un, scratch, t, row, routes.forward_lane[r], plan, routes, st, out.gear_of)
    return _output(0, out, rec_f[:n_rec], rec_i[:n_rec])


def _tick_begin(w, gear, clock, cur_wait, plan, routes, gears, opts, st, out):  # type: ignore[no-untyped-def]
    """The start of tick ``w``: the producer's tick (the meter, the gear) and which arrivals come; or of the drain
    (``w == gears.n_ticks``), from the end of the last tick, where every non-empty queue fires once its device is
    free. Returns the gear, the clock, the arrivals ``[lo, hi)`` to route at once (known in advance), the next
    arrival to admit (with admission, one by one on arrival) and the max wait."""
    lo = 0
    hi = 0
    nxt_arrival = 0
    n_ticks = gears.n_ticks
    bounds = gears.bounds
    if w < n_ticks:
        if w > 0:
            qps, q0, new_gear = _gear_tick(w, gear, routes.route_of[gear, plan.first_row[gear]], gears, routes, st.rq)
            out.tick_qps[w] = qps
            out.tick_q0[w] = q0
            if new_gear != gear:
                gear = new_gear
                st.cur_minq[:] = plan.min_queue[gear]
                st.cur_cap[:] = plan.caps[gear]
                st.dirty[:] = True
                st.rep_dirty[:] = True
        out.tick_gear[w] = gear
        clock = w * gears.tick
        out.gear_of[bounds[w] : bounds[w + 1]] = gear
        if opts.use_admission:  # each arrival in turn, after the device events before it, as the runtime admits
            nxt_arrival = bounds[w]
        else:
            lo = bounds[w]
            hi = bounds[w + 1]
    else:
        clock = n_ticks * gears.tick
        st.cur_minq[:] = 1
        st.cur_cap[:] = plan.caps[gear]
        cur_wait = math.inf
        st.dirty[:] = True
        st.rep_dirty[:] = True
        st.poke_t[:] = clock  # the drain wakes every device at once
    return gear, clock, lo, hi, nxt_arrival, cur_wait


def _gear_tick(w, gear, k0, gears, routes, rq):  # type: ignore[no-untyped-def]
    """Tick ``w``: the metered QPS (``gears.bounds``: requests counted by each tick), Q0 (the first stage's queues,
    router ``k0``'s replicas) and the gear the selector (or the schedule) picks."""
    qps = windowed_qps(gears.bounds, gears.tick_times, w, gears.qps_min, gears.qps_ticks)
    q0 = 0
    for j in range(routes.route_len[k0]):
        rr = routes.route_reps[routes.route_start[k0] + j]
        q0 += rq[rr, F_N] + rq[rr, P_N]
    if gears.use_schedule:
        return qps, q0, scheduled_gear(gears.schedule, w)
    # appendix C.2's factor of tick w (one per tick from re-planning; the last holds past its end)
    scales = gears.qps_scales
    scale = scales[w if w < scales.shape[0] else scales.shape[0] - 1]
    return qps, q0, select_gear(gears.highs, scale, gears.alpha, gear, qps, q0)[0]


# Compiled in this order, each seeing the kernels and the helpers before it. Numba copies each helper into its
# callers (a call per event would halve the loop's speed; ``_tick_begin``'s call, once per tick, would read its
# records' fields afresh at each, a reference taken and dropped per array); ``_ticks``, called once per run, is not
# copied: numba inlines only into a function that is not itself inlined.
_HELPERS = (*HELPERS, new_state, new_outcomes, _output, _gear_tick, _tick_begin, _ticks)
_CALLED = ("_ticks",)  # once per run: a call costs nothing there


class CompiledLoop(Protocol):
    """The compiled :func:`_loop`: the run's records in, its :class:`LoopOutput` out."""

    def __call__(
        self, inp: LoopInputs, plan: LoopPlan, routes: LoopRoutes, costs: LoopCosts, gears: LoopGears, opts: LoopOptions
    ) -> LoopOutput: ...


_COMPILED: list[CompiledLoop] = []


def build_loop() -> CompiledLoop:
    """The compiled loop (compiled, or loaded from numba's cache, on the first call in a process).

    It takes the records as plain tuples, and names them inside: numba types a named tuple at each call by encoding
    its class's and every field's name, 5 µs more a run than plain tuples for the loop's six records (a third of a
    tiny run's call), where a plain tuple costs about what as many arguments would."""
    if not _COMPILED:
        from cascadeserve.simulate.loop_compiler import LoopCompiler  # numba's pipeline, less the inlined copies

        helpers: dict[str, Any] = {}
        for fn in _HELPERS:  # each sees the kernels and the helpers compiled before it
            helpers[fn.__name__] = compile_calling_kernels(
                fn, helpers, inline=fn.__name__ not in _CALLED, pipeline_class=LoopCompiler
            )
        compiled = compile_calling_kernels(_loop, helpers, pipeline_class=LoopCompiler)

        def run(
            inp: LoopInputs, plan: LoopPlan, routes: LoopRoutes, costs: LoopCosts, gears: LoopGears, opts: LoopOptions
        ) -> LoopOutput:
            return cast(
                LoopOutput, compiled(tuple(inp), tuple(plan), tuple(routes), tuple(costs), tuple(gears), tuple(opts))
            )

        _COMPILED.append(run)
    return _COMPILED[0]
