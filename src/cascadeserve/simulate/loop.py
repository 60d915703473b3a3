"""The compiled event loop: the simulator of :mod:`cascadeserve.simulate.engine`, in numba, for runs without hooks.

It replays exactly the trajectory of the Python reference loop (``Simulator.run`` with ``engine="python"``): the
same order at one instant (the producer's tick, then the arrivals, then device events, the lowest device first on
a tie), the same cached "ready" decisions per device, the same batch contents and order (the policy's
:func:`~cascadeserve.policy.batch_members`: a capped batch takes the oldest first across forwarded and new samples,
forwarded first on a tie, slot by slot with the kernel ``takes_forwarded``; the whole queue lists forwarded samples
first), the same forwarding (unsure samples in batch order, each by its own gear's router, as the runtime does)
and the same router positions. The decisions are the functions of :mod:`cascadeserve.policy.kernels`, called by
name and compiled as their twins (``fire_time``, ``prefer``, ``take_count``, ``takes_forwarded``, ``stage_exits``,
``swrr_pick``, ``select_gear``, ``scheduled_gear``, ``windowed_qps``, ``admitted``); this module only keeps queues and
clocks.

Queues are linked lists through one ``nxt`` array indexed by request (a request sits in at most one queue or
batch at a time): per replica a queue of first-stage arrivals (some of them still in the future, known in
advance as in the Python loop) and a queue of forwarded samples with the time each entered it, per device the
batch it runs. Pushing and taking cost O(1) per sample, and no Python object is made per batch.

The entry point, :func:`build_loop`, compiles on first use (or loads numba's on-disk cache) and returns the
compiled function; :mod:`cascadeserve.simulate.compiled` prepares its arrays and turns its output into a
``SimResult``.
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
    capped_min_queue,
    compile_calling_kernels,
    fire_time,
    prefer,
    scheduled_gear,
    select_gear,
    stage_exits,
    swrr_pick,
    take_count,
    takes_forwarded,
    windowed_qps,
)

__all__ = ["LoopOutput", "build_loop"]

# Columns of the per-replica queue table ``rq``.
P_HEAD, P_TAIL, P_N, F_HEAD, F_TAIL, F_N = 0, 1, 2, 3, 4, 5


def _loop(  # type: ignore[no-untyped-def]  # one flat function: numba gets plain arrays, no objects
    arr, samp, n_samples, cert, right, stage_table, thr, next_row, first_row, min_queue, caps, max_wait,
    rt, overhead, tick, n_ticks, bounds, tick_times, qps_min, qps_ticks, dev_start, dev_reps, replica_row,
    replica_device,
    route_of, route_start, route_len, route_reps, seq_start, seq_len, seqs,
    highs, qps_scales, alpha, schedule, use_schedule, gear0, adm_cap, use_admission, record,
    lim, lim_target, lim_step, lim_backoff, lim_ceiling,
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
    rec_f = np.empty((1024 if record else 0, 2))
    rec_i = np.empty((1024 if record else 0, 5), np.int64)
    n_rec = 0

    nxt = np.full(n, -1, np.int64)
    ftime = np.empty(n)  # when a forwarded sample entered its queue
    rq = np.zeros((r_count, 6), np.int64)
    rq[:, P_HEAD] = -1
    rq[:, P_TAIL] = -1
    rq[:, F_HEAD] = -1
    rq[:, F_TAIL] = -1
    rep_t = np.full(r_count, inf)
    rep_first = np.full(r_count, inf)
    rep_dirty = np.ones(r_count, np.bool_)
    cur_minq = min_queue[gear0].copy()
    cur_cap = caps[gear0].copy()
    cur_wait = max_wait
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
    rpos = np.zeros(route_start.shape[0], np.int64)  # each router's position in its period
    scratch = np.empty(4096, np.int64)

    gear = gear0
    clock = 0.0
    admitted_n = 0
    answered_n = 0

    # The QPS meter counts the requests admitted (a shed one never reached the producer): without admission every
    # arrival, ``bounds``; with it, ``counted[w]``, the requests admitted before tick w, filled as the run goes.
    counted = np.zeros(n_ticks + 1 if use_admission else 0, np.int64)
    for w in range(n_ticks + 1):
        lo = 0  # arrivals [lo, hi) are routed at once (known in advance); with admission, one by one on arrival
        hi = 0
        nxt_arrival = 0
        if w < n_ticks:
            t_w = w * tick
            if use_admission:
                counted[w] = admitted_n
            if w > 0:
                qps = (
                    windowed_qps(counted, tick_times, w, qps_min, qps_ticks)
                    if use_admission
                    else windowed_qps(bounds, tick_times, w, qps_min, qps_ticks)
                )
                k0 = route_of[gear, first_row[gear]]
                q0 = 0
                for j in range(route_len[k0]):
                    rr = route_reps[route_start[k0] + j]
                    q0 += rq[rr, F_N] + rq[rr, P_N]
                if use_schedule:
                    new_gear = scheduled_gear(schedule, w)
                else:
                    # appendix C.2's factor of tick w (one per tick from re-planning; the last holds past its end)
                    scale = qps_scales[w if w < qps_scales.shape[0] else qps_scales.shape[0] - 1]
                    new_gear = select_gear(highs, scale, alpha, gear, qps, q0)[0]
                tick_qps[w] = qps
                tick_q0[w] = q0
                if new_gear != gear:
                    gear = new_gear
                    cur_minq[:] = min_queue[gear]
                    cur_cap[:] = caps[gear]
                    dirty[:] = True
                    rep_dirty[:] = True
            tick_gear[w] = gear
            clock = t_w
            gear_of[bounds[w] : bounds[w + 1]] = gear
            if use_admission:  # each arrival in turn, after the device events before it, as the runtime admits
                nxt_arrival = bounds[w]
            else:
                lo = bounds[w]
                hi = bounds[w + 1]
        else:  # drain: from the end of the last tick every non-empty queue fires once its device is free
            clock = n_ticks * tick
            cur_minq[:] = 1
            cur_cap[:] = caps[gear]
            cur_wait = inf
            dirty[:] = True
            rep_dirty[:] = True

        t_stop = (w + 1) * tick if w < n_ticks else inf
        b_w = bounds[w + 1] if w < n_ticks else 0
        if not use_admission:
            nxt_arrival = b_w
        while True:  # device events up to the next arrival to admit (with admission), else to the next tick
            if hi > lo:  # route arrivals [lo, hi) to first-stage replicas (queued in order)
                k0 = route_of[gear, first_row[gear]]
                s0 = seq_start[k0]
                seq = seqs[s0 : s0 + seq_len[k0]]
                for i in range(lo, hi):
                    j, p2 = swrr_pick(seq, rpos[k0])
                    rpos[k0] = p2
                    rr = route_reps[route_start[k0] + j]
                    if rq[rr, P_N] == 0:
                        rq[rr, P_HEAD] = i
                    else:
                        nxt[rq[rr, P_TAIL]] = i
                    nxt[i] = -1
                    rq[rr, P_TAIL] = i
                    rq[rr, P_N] += 1
                    rep_dirty[rr] = True
                    dirty[replica_device[rr]] = True
                lo = hi
            t_end = arr[nxt_arrival] if nxt_arrival < b_w else t_stop
            best_t = t_end
            best_d = -1
            for d in range(d_count):
                if busy[d]:
                    td = busy_until[d]
                else:
                    if dirty[d]:
                        now = clock if clock >= free_at[d] else free_at[d]
                        best = (inf, inf, -1, -1)
                        for jj in range(dev_start[d], dev_start[d + 1]):
                            r = dev_reps[jj]
                            if rep_dirty[r]:  # when this queue's trigger fires, ignoring "not before now"
                                rep_dirty[r] = False
                                fn = rq[r, F_N]
                                pn = rq[r, P_N]
                                if fn == 0 and pn == 0:
                                    rep_t[r] = inf
                                else:
                                    f_old = ftime[rq[r, F_HEAD]] if fn else inf
                                    if pn:
                                        p_old = arr[rq[r, P_HEAD]]
                                        first = p_old if p_old < f_old else f_old
                                    else:
                                        first = f_old
                                    need = capped_min_queue(cur_minq[r], lim[r]) - fn
                                    if need <= 0:
                                        mth = -inf
                                    elif need <= pn:
                                        node = rq[r, P_HEAD]
                                        for _ in range(need - 1):
                                            node = nxt[node]
                                        mth = arr[node]
                                    else:
                                        mth = inf
                                    rep_t[r] = fire_time(-inf, first, mth, cur_wait)
                                    rep_first[r] = first
                            tr = rep_t[r]
                            if tr < inf:
                                best = prefer(best, (now if tr < now else tr, rep_first[r], 0, r))
                        ready_t[d] = best[0]
                        ready_r[d] = best[3]
                        dirty[d] = False
                    td = ready_t[d]
                if td < best_t:
                    best_t = td
                    best_d = d
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
                fn = rq[r, F_N]
                pn = rq[r, P_N]
                cap = cur_cap[r]
                most = take_count(fn + pn, cap, lim[r])  # the batch if every pending sample had arrived
                scan = min(pn, max(most - fn, 0) + 1)  # enough to tell whether the present ones exceed the cap
                kp = 0
                node = rq[r, P_HEAD]
                while kp < scan and arr[node] <= t:
                    kp += 1
                    node = nxt[node]
                present = fn + kp
                size = take_count(present, cap, lim[r])
                if fn == 0 or (kp == 0 and size < present):  # the front of one queue
                    col = P_HEAD if fn == 0 else F_HEAD
                    head = rq[r, col]
                    last = head
                    for _ in range(size - 1):
                        last = nxt[last]
                    rq[r, col] = nxt[last]
                    rq[r, col + 2] -= size
                    if rq[r, col + 2] == 0:
                        rq[r, col] = -1
                        rq[r, col + 1] = -1
                elif size == present:  # every forwarded sample, then the arrived ones
                    head = rq[r, F_HEAD]
                    last = rq[r, F_TAIL]
                    if kp:
                        nxt[last] = rq[r, P_HEAD]
                        for _ in range(kp):
                            last = nxt[last]
                        rq[r, P_HEAD] = nxt[last]
                        rq[r, P_N] -= kp
                        if rq[r, P_N] == 0:
                            rq[r, P_HEAD] = -1
                            rq[r, P_TAIL] = -1
                    rq[r, F_HEAD] = -1
                    rq[r, F_TAIL] = -1
                    rq[r, F_N] = 0
                else:  # capped: the oldest first across both queues, slot by slot (policy.batch_members' rule)
                    fh = rq[r, F_HEAD]
                    ph = rq[r, P_HEAD]
                    head = -1
                    last = -1
                    tf = 0
                    tp = 0
                    for _ in range(size):
                        has_f = fh >= 0
                        has_a = ph >= 0 and arr[ph] <= t
                        tf_old = ftime[fh] if has_f else inf
                        take_f = takes_forwarded(has_f, has_a, tf_old, arr[ph] if has_a else inf)
                        node = fh if take_f else ph
                        if take_f:
                            fh = nxt[fh]
                            tf += 1
                        else:
                            ph = nxt[ph]
                            tp += 1
                        if head < 0:
                            head = node
                        else:
                            nxt[last] = node
                        last = node
                    rq[r, F_HEAD] = fh
                    rq[r, F_N] -= tf
                    if rq[r, F_N] == 0:
                        rq[r, F_HEAD] = -1
                        rq[r, F_TAIL] = -1
                    rq[r, P_HEAD] = ph
                    rq[r, P_N] -= tp
                    if rq[r, P_N] == 0:
                        rq[r, P_HEAD] = -1
                        rq[r, P_TAIL] = -1
                row = replica_row[r]
                if size >= t_len:  # past the runtime table: the caller rebuilds it bigger and runs again
                    return (size, finish, answer_row, correct, stage, gear_of, shed, tick_qps, tick_gear,
                            tick_q0, tick_busy, rec_f[:0], rec_i[:0])
                secs = rt[row, size] + overhead
                busy[d] = True
                busy_until[d] = t + secs
                b_head[d] = head
                b_n[d] = size
                b_r[d] = r
                b_t0[d] = t
                wb = (min(int(t // tick), n_ticks) if n_ticks else 0)
                tick_busy[wb, d] += busy_until[d] - t  # the batch's span as its end minus its start, as the runtime
            else:
                # complete: the exit decision per sample; the unsure ones go to the next stage's routers
                r = b_r[d]
                size = b_n[d]
                busy[d] = False
                busy_until[d] = inf
                free_at[d] = t
                dirty[d] = True
                if lim[r] >= 0:  # the adaptive (AIMD) cap learns this batch's runtime; the trigger may move
                    lim[r] = aimd_next(lim[r], t - b_t0[d], lim_target, lim_step, lim_backoff, lim_ceiling)
                    rep_dirty[r] = True
                row = replica_row[r]
                if scratch.shape[0] < size:
                    scratch = np.empty(2 * size, np.int64)
                node = b_head[d]
                n_un = 0
                for _ in range(size):
                    i = node
                    node = nxt[i]
                    g = gear_of[i]
                    s = i % n_samples if by_index else samp[i]
                    if stage_exits(thr, g, row, cert[row, s]):
                        finish[i] = t
                        answer_row[i] = row
                        correct[i] = right[row, s]
                        stage[i] = stage_table[g, row]
                    else:
                        scratch[n_un] = i
                        n_un += 1
                answered_n += size - n_un
                if record:
                    if n_rec == rec_f.shape[0]:
                        rec_f2 = np.empty((2 * n_rec, 2))
                        rec_i2 = np.empty((2 * n_rec, 5), np.int64)
                        rec_f2[:n_rec] = rec_f
                        rec_i2[:n_rec] = rec_i
                        rec_f = rec_f2
                        rec_i = rec_i2
                    rec_f[n_rec, 0] = b_t0[d]
                    rec_f[n_rec, 1] = t
                    rec_i[n_rec, 0] = d
                    rec_i[n_rec, 1] = r
                    rec_i[n_rec, 2] = row
                    rec_i[n_rec, 3] = size
                    rec_i[n_rec, 4] = size - n_un
                    n_rec += 1
                last_g = -1
                k0 = -1
                seq = seqs[:1]
                for u in range(n_un):  # forwarded in batch order, each by its own gear's router
                    i = scratch[u]
                    g = gear_of[i]
                    if g != last_g:  # the router of this sample's gear (most batches hold one gear)
                        last_g = g
                        k0 = route_of[g, next_row[g, row]]
                        s0 = seq_start[k0]
                        seq = seqs[s0 : s0 + seq_len[k0]]
                    j, p2 = swrr_pick(seq, rpos[k0])
                    rpos[k0] = p2
                    rr = route_reps[route_start[k0] + j]
                    if rq[rr, F_N] == 0:
                        rq[rr, F_HEAD] = i
                    else:
                        nxt[rq[rr, F_TAIL]] = i
                    nxt[i] = -1
                    ftime[i] = t
                    rq[rr, F_TAIL] = i
                    rq[rr, F_N] += 1
                    rep_dirty[rr] = True
                    dirty[replica_device[rr]] = True
    last_row = stage_table.shape[1] - 1
    for i in range(n):
        if answer_row[i] < 0:  # as SimResult has always reported an unanswered request: the last row's stage
            stage[i] = stage_table[gear_of[i], last_row]
    return (0, finish, answer_row, correct, stage, gear_of, shed, tick_qps, tick_gear, tick_q0, tick_busy,
            rec_f[:n_rec], rec_i[:n_rec])


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
        _COMPILED.append(compile_calling_kernels(_loop))
    compiled = _COMPILED[0]

    def run(*args: Any) -> LoopOutput:
        return LoopOutput(*compiled(*args))

    return run
