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

The entry point, :func:`build_loop`, compiles on first use (or loads numba's on-disk cache) and returns the compiled
function; :mod:`cascadeserve.simulate.compiled` prepares its arrays and turns its output into a ``SimResult``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    F_HEAD,
    F_N,
    F_TAIL,
    HELPERS,
    P_HEAD,
    P_N,
    P_TAIL,
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

__all__ = ["LoopOutput", "build_loop"]



def _loop(  # type: ignore[no-untyped-def]  # one flat function: numba gets plain arrays, no objects
    arr, samp, n_samples, cert, right, stage_table, thr, next_row, first_row, min_queue, caps, max_wait,
    rt, overhead, tick, n_ticks, bounds, tick_times, qps_min, qps_ticks, dev_start, dev_reps, replica_row,
    replica_device,
    route_of, route_start, route_len, route_reps, seq_start, seq_len, seqs, forward_lane,
    highs, qps_scales, alpha, schedule, use_schedule, gear0, adm_cap, use_admission, record,
    lim, lim_target, lim_step, lim_backoff, lim_ceiling, audit_f, audit_c0, tok, use_tok, busy_f, host_g, spread,
    use_spread,
):
    inf = math.inf
    n = arr.shape[0]
    r_count = replica_row.shape[0]
    d_count = dev_start.shape[0] - 1
    t_len = rt.shape[1]
    finish = np.full(n, inf)
    answer_row = np.full(n, -1, np.int64)
    correct = np.zeros(n, np.bool_)
    stage = np.empty(n, np.int64)
    by_index = samp.shape[0] == 0  # request i takes sample i mod n_samples
    gear_of = np.zeros(n, np.int64)
    shed = np.zeros(n if use_admission else 0, np.bool_)
    tick_qps = np.zeros(n_ticks)
    tick_gear = np.zeros(n_ticks, np.int64)
    tick_q0 = np.zeros(n_ticks, np.int64)
    tick_busy = np.zeros((n_ticks + 1, d_count))

    nxt = np.full(n, -1, np.int64)
    ftime = np.empty(n)  # when a forwarded sample entered its queue
    rq = np.zeros((r_count, 6), np.int64)
    for col in (P_HEAD, P_TAIL, F_HEAD, F_TAIL):
        rq[:, col] = -1
    rep_t = np.full(r_count, inf)
    rep_first = np.full(r_count, inf)
    rep_dirty = np.ones(r_count, np.bool_)
    cur_minq = min_queue[gear0].copy()
    cur_cap = caps[gear0].copy()
    busy = np.zeros(d_count, np.bool_)
    busy_until = np.full(d_count, inf)
    free_at = np.zeros(d_count)
    ready_t = np.full(d_count, inf)
    ready_r = np.full(d_count, -1, np.int64)
    dirty = np.ones(d_count, np.bool_)
    b_head = np.full(d_count, -1, np.int64)
    b_n = np.zeros(d_count, np.int64)
    b_r = np.zeros(d_count, np.int64)
    b_t0 = np.zeros(d_count)
    # each router's position in its period, per lane (forwards on Ray: each device's server routes its own)
    rpos = np.zeros((route_start.shape[0], (forward_lane.max() + 1) if r_count else 1), np.int64)

    audited = np.zeros(n if audit_f > 0.0 else 0, np.bool_)  # audit sampling: early exits that go on
    audit_c = np.full(1, audit_c0, np.int64)  # the sampler's count of early exits
    short, rec_f, rec_i = _ticks(
        adm_cap, alpha, answer_row, arr, b_head, b_n, b_r, b_t0, bounds, busy, busy_until, by_index, caps,
        cert, correct, cur_cap, cur_minq, d_count, dev_reps, dev_start, dirty, finish, first_row, free_at,
        ftime, gear0, gear_of, highs, lim, lim_backoff, lim_ceiling, lim_step, lim_target, max_wait, min_queue,
        n_samples, n_ticks, next_row, nxt, overhead, qps_min, qps_scales, qps_ticks, ready_r, ready_t,
        record, rep_dirty, rep_first, rep_t, replica_device, replica_row, right, route_len, route_of,
        route_reps, route_start, rpos, rq, rt, samp, schedule, seq_len, seq_start, seqs, forward_lane, shed, stage,
        stage_table, t_len, thr, tick, tick_busy, tick_gear, tick_q0, tick_qps, tick_times, use_admission,
        use_schedule, audit_f, audited, audit_c, tok, use_tok, busy_f, host_g, spread, use_spread,
        np.zeros(d_count, np.int64),
    )  # fmt: skip
    if short:  # a batch past the runtime table: the caller rebuilds it bigger and runs again
        return (short, finish, answer_row, correct, stage, gear_of, shed, tick_qps, tick_gear, tick_q0, tick_busy,
                rec_f, rec_i)
    last_row = stage_table.shape[1] - 1
    for i in range(n):
        if answer_row[i] < 0:  # as SimResult has always reported an unanswered request: the last row's stage
            stage[i] = stage_table[gear_of[i], last_row]
    return (0, finish, answer_row, correct, stage, gear_of, shed, tick_qps, tick_gear, tick_q0, tick_busy,
            rec_f, rec_i)


def _ticks(  # type: ignore[no-untyped-def]
    adm_cap, alpha, answer_row, arr, b_head, b_n, b_r, b_t0, bounds, busy, busy_until, by_index, caps, cert,
    correct, cur_cap, cur_minq, d_count, dev_reps, dev_start, dirty, finish, first_row, free_at, ftime, gear0,
    gear_of, highs, lim, lim_backoff, lim_ceiling, lim_step, lim_target, max_wait, min_queue, n_samples, n_ticks,
    next_row, nxt, overhead, qps_min, qps_scales, qps_ticks, ready_r, ready_t, record, rep_dirty, rep_first,
    rep_t, replica_device, replica_row, right, route_len, route_of, route_reps, route_start, rpos, rq, rt, samp,
    schedule, seq_len, seq_start, seqs, forward_lane, shed, stage, stage_table, t_len, thr, tick, tick_busy, tick_gear,
    tick_q0, tick_qps, tick_times, use_admission, use_schedule, audit_f, audited, audit_c, tok, use_tok, busy_f,
    host_g, spread, use_spread, started,
):
    """The event loop proper, tick by tick (the producer's tick, then the tick's arrivals and device events, then
    the drain), over the state :func:`_loop` allocated; returns 0 (or the batch size that ran past the runtime
    table) and the recorded batches."""
    inf = math.inf
    cur_wait = max_wait
    rec_f = np.empty((1024 if record else 0, 2))
    rec_i = np.empty((1024 if record else 0, 5), np.int64)
    n_rec = 0
    scratch = np.empty(4096, np.int64)
    poke_t = np.full(d_count, -inf)  # when each device was last woken by an event (forward, batch end, drain)
    gear = gear0
    clock = 0.0
    admitted_n = 0
    answered_n = 0

    # The QPS meter counts every arrival, ``bounds``, shed or admitted: the gear follows the offered load (metering
    # only the admitted would read an overload that admission sheds as a lighter load and keep the costlier gear).
    for w in range(n_ticks + 1):
        gear, clock, lo, hi, nxt_arrival, cur_wait = _tick_begin(
            w, n_ticks, tick, gear, clock, cur_wait, bounds, tick_times, qps_min, qps_ticks, route_of, first_row,
            route_len, route_reps, route_start, rq, use_schedule, schedule, qps_scales, highs, alpha, tick_qps,
            tick_q0, tick_gear, cur_minq, min_queue, cur_cap, caps, dirty, rep_dirty, gear_of, use_admission, poke_t,
        )  # fmt: skip

        t_stop = (w + 1) * tick if w < n_ticks else inf
        b_w = bounds[w + 1] if w < n_ticks else 0
        if not use_admission:
            nxt_arrival = b_w
        while True:  # device events up to the next arrival to admit (with admission), else to the next tick
            if hi > lo:  # route arrivals [lo, hi) to first-stage replicas (queued in order)
                route(lo, hi, route_of[gear, first_row[gear]], seqs, seq_start, seq_len, rpos, route_reps,
                       route_start, rq, nxt, P_HEAD, rep_dirty, dirty, replica_device)  # fmt: skip
                lo = hi
            t_end = arr[nxt_arrival] if nxt_arrival < b_w else t_stop
            # The next device event before t_end. Inline, not a helper: numba copies a helper into its caller, but
            # not the helpers that helper calls (a call per device per event halved the loop's speed).
            best_t = t_end
            best_d = -1
            best_p = -1  # whether the best is a device woken at best_t (0), or not (1); -1: not asked yet
            for d in range(d_count):
                if busy[d]:
                    td = busy_until[d]
                else:
                    if dirty[d]:
                        ready_t[d], ready_r[d] = ready(d, clock if clock >= free_at[d] else free_at[d], dev_start,
                                                        dev_reps, rep_dirty, rep_t, rep_first, rq, ftime, arr, nxt,
                                                        cur_minq, lim, cur_wait)  # fmt: skip
                        dirty[d] = False
                    td = ready_t[d]
                if td < best_t:
                    best_t = td
                    best_d = d
                    best_p = -1
                elif td == best_t and best_d >= 0 and not busy[d]:  # (best_d < 0: the next arrival goes first)
                    # A tie: a free device woken at td by the event that poked it (an arrival, a forward, its own
                    # batch's end, the drain) fires first, as the runtime runs its consumer right after that event
                    # and before any other timer of the instant; any other tie goes to the lower device.
                    if best_p < 0:
                        best_p = 0 if woken(best_d, td, busy, poke_t, dev_start, dev_reps, rq, nxt, arr) else 1
                    if best_p == 1 and woken(d, td, busy, poke_t, dev_start, dev_reps, rq, nxt, arr):
                        best_d = d
                        best_p = 0
            if best_d < 0:
                if nxt_arrival < b_w:  # admit the next arrival, after every device event before it
                    i = nxt_arrival
                    nxt_arrival += 1
                    clock = arr[i]
                    if admitted(1, admitted_n - answered_n, adm_cap) == 1:
                        admitted_n += 1
                        lo = i
                        hi = i + 1
                    else:
                        shed[i] = True
                    continue
                break
            d = best_d
            t = best_t
            clock = t
            if not busy[d]:
                # start: replica ready_r[d] fires at t with the samples present (pending ones arrived by t)
                r = ready_r[d]
                rep_dirty[r] = True
                head, size = take(r, t, cur_cap[r], lim[r], rq, nxt, arr, ftime)
                row = replica_row[r]
                if size >= t_len:  # past the runtime table: the caller rebuilds it bigger and runs again
                    return size, rec_f[:0], rec_i[:0]
                share = 0.0  # only a model the host's load slows reads it (two scans of the devices per batch)
                if busy_f[row] != 1.0:
                    share = host_share(busy_at(t, busy, b_t0, busy_until, d, host_g), host_peers(host_g, d))
                secs = contended((token_secs(head, size, row, nxt, by_index, n_samples, samp, rt, tok[0], tok[1],
                                  tok[2], tok[3]) if use_tok else rt[row, size]) + overhead, busy_f[row],
                                 share)  # fmt: skip
                if use_spread:  # the batch's factor beyond its rule: the device's next draw (profile/spread.py)
                    secs *= spread[d, row, started[d] % spread.shape[2]]
                    started[d] += 1
                busy[d] = True
                busy_until[d] = t + secs
                b_head[d], b_n[d], b_r[d], b_t0[d] = head, size, r, t
                wb = (min(int(t // tick), n_ticks) if n_ticks else 0)
                tick_busy[wb, d] += busy_until[d] - t  # the batch's span as its end minus its start, as the runtime
            else:
                # complete: the exit decision per sample; the unsure ones go to the next stage's routers
                r = b_r[d]
                busy[d] = False
                busy_until[d] = inf
                free_at[d] = t
                dirty[d] = True
                poke_t[d] = t
                if lim[r] >= 0:  # the adaptive (AIMD) cap learns this batch's runtime; the trigger may move
                    lim[r] = aimd_next(lim[r], t - b_t0[d], lim_target, lim_step, lim_backoff, lim_ceiling)
                    rep_dirty[r] = True
                if scratch.shape[0] < b_n[d]:
                    scratch = np.empty(2 * b_n[d], np.int64)
                row = replica_row[r]
                if audit_f > 0.0:
                    n_un, n_ans = exits_audited(b_head[d], b_n[d], t, row, nxt, gear_of, by_index, n_samples, samp,
                                                thr, cert, right, stage_table, finish, answer_row, correct, stage,
                                                scratch, audit_f, audited, audit_c, next_row)  # fmt: skip
                else:
                    n_un = exits(b_head[d], b_n[d], t, row, nxt, gear_of, by_index, n_samples, samp, thr, cert, right,
                                 stage_table, finish, answer_row, correct, stage, scratch)  # fmt: skip
                    n_ans = b_n[d] - n_un
                answered_n += n_ans
                if record:
                    rec_f, rec_i = record_batch(rec_f, rec_i, n_rec, b_t0[d], t, d, r, row, b_n[d], n_ans)
                    n_rec += 1
                forward(n_un, scratch, t, row, gear_of, route_of, next_row, seqs, seq_start, seq_len, rpos, route_reps,
                        route_start, rq, nxt, ftime, rep_dirty, dirty, replica_device, forward_lane[r],
                        poke_t)  # fmt: skip
    return 0, rec_f[:n_rec], rec_i[:n_rec]

def _tick_begin(  # type: ignore[no-untyped-def]
    w, n_ticks, tick, gear, clock, cur_wait, bounds, tick_times, qps_min, qps_ticks, route_of, first_row, route_len,
    route_reps, route_start, rq, use_schedule, schedule, qps_scales, highs, alpha, tick_qps, tick_q0, tick_gear,
    cur_minq, min_queue, cur_cap, caps, dirty, rep_dirty, gear_of, use_admission, poke_t,
):
    """The start of tick ``w``: the producer's tick (the meter, the gear) and which arrivals come; or of the drain
    (``w == n_ticks``), from the end of the last tick, where every non-empty queue fires once its device is free.
    Returns the gear, the clock, the arrivals ``[lo, hi)`` to route at once (known in advance), the next arrival to
    admit (with admission, one by one on arrival) and the max wait."""
    lo = 0
    hi = 0
    nxt_arrival = 0
    if w < n_ticks:
        if w > 0:
            qps, q0, new_gear = _gear_tick(
                w, bounds, tick_times, qps_min, qps_ticks,
                route_of[gear, first_row[gear]], route_len, route_reps, route_start, rq, use_schedule, schedule,
                qps_scales, highs, alpha, gear,
            )  # fmt: skip
            tick_qps[w] = qps
            tick_q0[w] = q0
            if new_gear != gear:
                gear = new_gear
                cur_minq[:] = min_queue[gear]
                cur_cap[:] = caps[gear]
                dirty[:] = True
                rep_dirty[:] = True
        tick_gear[w] = gear
        clock = w * tick
        gear_of[bounds[w] : bounds[w + 1]] = gear
        if use_admission:  # each arrival in turn, after the device events before it, as the runtime admits
            nxt_arrival = bounds[w]
        else:
            lo = bounds[w]
            hi = bounds[w + 1]
    else:
        clock = n_ticks * tick
        cur_minq[:] = 1
        cur_cap[:] = caps[gear]
        cur_wait = math.inf
        dirty[:] = True
        rep_dirty[:] = True
        poke_t[:] = clock  # the drain wakes every device at once
    return gear, clock, lo, hi, nxt_arrival, cur_wait


def _gear_tick(  # type: ignore[no-untyped-def]
    w, cum, tick_times, qps_min, qps_ticks, k0, route_len, route_reps, route_start, rq, use_schedule, schedule,
    qps_scales, highs, alpha, gear,
):
    """Tick ``w``: the metered QPS (``cum``: requests counted by each tick), Q0 (the first stage's queues, router
    ``k0``'s replicas) and the gear the selector (or the schedule) picks."""
    qps = windowed_qps(cum, tick_times, w, qps_min, qps_ticks)
    q0 = 0
    for j in range(route_len[k0]):
        rr = route_reps[route_start[k0] + j]
        q0 += rq[rr, F_N] + rq[rr, P_N]
    if use_schedule:
        return qps, q0, scheduled_gear(schedule, w)
    # appendix C.2's factor of tick w (one per tick from re-planning; the last holds past its end)
    scale = qps_scales[w if w < qps_scales.shape[0] else qps_scales.shape[0] - 1]
    return qps, q0, select_gear(highs, scale, alpha, gear, qps, q0)[0]


# Compiled in this order, each seeing the kernels and the helpers before it. Numba copies each helper into its
# callers (a call per event would halve the loop's speed); ``_ticks``, called once per run, is not copied: numba
# inlines only into a function that is not itself inlined.
_HELPERS = (*HELPERS, _gear_tick, _tick_begin, _ticks)
_CALLED = ("_tick_begin", "_ticks")  # once per tick or run: a call costs nothing there


@dataclass(frozen=True, slots=True)
class LoopOutput:
    """What one run of the compiled loop returns (its tuple, named: numba returns plain tuples)."""

    table_short: int  # 0, or the batch size that ran past the runtime table (rebuild it bigger and run again)
    finish: np.ndarray  # per request: when it was answered (inf: never)
    answer_row: np.ndarray  # the model row that answered it (-1: none)
    correct: np.ndarray
    stage: np.ndarray
    gear: np.ndarray  # the gear it was admitted under
    shed: np.ndarray  # shed by admission (empty without an admission policy)
    tick_qps: np.ndarray
    tick_gear: np.ndarray
    tick_q0: np.ndarray
    tick_busy: np.ndarray  # [tick, device] busy seconds
    batch_times: np.ndarray  # [batch, (start, end)] when recorded
    batch_ints: np.ndarray  # [batch, (device, replica, row, size, answered)] when recorded


_COMPILED: list[Any] = []


def build_loop() -> Callable[..., LoopOutput]:
    """The compiled loop (compiled, or loaded from numba's cache, on the first call in a process), returning a
    :class:`LoopOutput`."""
    if not _COMPILED:
        from cascadeserve.simulate.loop_compiler import LoopCompiler  # numba's pipeline, less the inlined copies

        helpers: dict[str, Any] = {}
        for fn in _HELPERS:  # each sees the kernels and the helpers compiled before it
            helpers[fn.__name__] = compile_calling_kernels(
                fn, helpers, inline=fn.__name__ not in _CALLED, pipeline_class=LoopCompiler
            )
        _COMPILED.append(compile_calling_kernels(_loop, helpers, pipeline_class=LoopCompiler))
    compiled = _COMPILED[0]

    def run(*args: Any) -> LoopOutput:
        return LoopOutput(*compiled(*args))

    return run
