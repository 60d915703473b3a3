"""The compiled loop's queues and batches (:mod:`cascadeserve.simulate.loop`): linked lists over request indices.

Each function is compiled by numba, as the loop is, with the policy's kernels bound to their compiled twins
(:func:`~cascadeserve.policy.kernels.compile_calling_kernels`): which replica a device fires and when (``ready``:
``fire_time`` and ``prefer``), which requests a batch takes (``take``: ``take_count`` and ``takes_forwarded``, the
rule of :func:`~cascadeserve.policy.batch_members`), who exits (``exits``: ``stage_exits``) and where the others go
(``forward``: ``swrr_pick`` by each request's gear). Nothing is decided here that the kernels do not decide. What
a batch costs by its tokens (``token_secs``) is :func:`cascadeserve.profile.tokens.batch_seconds`, compiled, and
what the host's other busy devices add is :func:`cascadeserve.profile.host.contended`.

Queues are linked lists through one ``nxt`` array indexed by request (a request sits in at most one queue or batch
at a time); ``rq`` holds per replica the head, tail and length of its queue of arrivals and of forwarded requests.
The helpers take the loop's records (:mod:`cascadeserve.simulate.loop_records`: ``inp``, ``plan``, ``routes``,
``costs``, the state ``st`` and the outcomes ``out``) or plain arrays, and write only the arrays inside them.
"""

from __future__ import annotations

import math

import numpy as np

from cascadeserve.policy.kernels import (
    audit_pick,
    capped_min_queue,
    fire_time,
    prefer,
    stage_exits,
    swrr_pick,
    take_count,
    takes_forwarded,
)
from cascadeserve.profile.host import busy_at, contended, host_peers, host_share
from cascadeserve.profile.tokens import batch_seconds

__all__ = [
    "F_HEAD", "F_N", "F_TAIL", "HELPERS", "P_HEAD", "P_N", "P_TAIL", "arrives_at", "exits", "exits_audited",
    "forward", "push",
    "ready", "record_batch", "route", "take", "token_secs", "woken",
]  # fmt: skip

# Columns of the per-replica queue table ``rq``.
P_HEAD, P_TAIL, P_N, F_HEAD, F_TAIL, F_N = 0, 1, 2, 3, 4, 5


def push(rq, nxt, head_col, rr, i):  # type: ignore[no-untyped-def]
    """Append request ``i`` to replica ``rr``'s queue of arrivals (``head_col`` P_HEAD) or forwarded (F_HEAD)."""
    if rq[rr, head_col + 2] == 0:
        rq[rr, head_col] = i
    else:
        nxt[rq[rr, head_col + 1]] = i
    nxt[i] = -1
    rq[rr, head_col + 1] = i
    rq[rr, head_col + 2] += 1


def route(lo, hi, k0, plan, routes, st):  # type: ignore[no-untyped-def]
    """Requests ``lo..hi-1``, in order, to the replicas router ``k0`` picks (smooth weighted round-robin), each at
    the end of its queue of arrivals."""
    s0 = routes.seq_start[k0]
    seq = routes.seqs[s0 : s0 + routes.seq_len[k0]]
    for i in range(lo, hi):
        j, p2 = swrr_pick(seq, st.rpos[k0, 0])  # new requests: the front end's routers (lane 0)
        st.rpos[k0, 0] = p2
        rr = routes.route_reps[routes.route_start[k0] + j]
        push(st.rq, st.nxt, P_HEAD, rr, i)
        st.rep_dirty[rr] = True
        st.dirty[plan.replica_device[rr]] = True


def ready(d, now, arr, plan, st, lim, cur_wait):  # type: ignore[no-untyped-def]
    """When free device ``d`` fires next and which replica (inf, -1: none), as the policy's ``next_batch`` picks;
    each replica's fire time is recomputed only when its queue or trigger changed."""
    inf = math.inf
    rq = st.rq
    nxt = st.nxt
    rep_t = st.rep_t
    rep_first = st.rep_first
    rep_dirty = st.rep_dirty
    best = (inf, inf, -1, -1)
    for jj in range(plan.dev_start[d], plan.dev_start[d + 1]):
        r = plan.dev_reps[jj]
        if rep_dirty[r]:  # when this queue's trigger fires, ignoring "not before now"
            rep_dirty[r] = False
            fn = rq[r, F_N]
            pn = rq[r, P_N]
            if fn == 0 and pn == 0:
                rep_t[r] = inf
            else:
                f_old = st.ftime[rq[r, F_HEAD]] if fn else inf
                if pn:
                    p_old = arr[rq[r, P_HEAD]]
                    first = p_old if p_old < f_old else f_old
                else:
                    first = f_old
                need = capped_min_queue(st.cur_minq[r], lim[r]) - fn
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
    return best[0], best[3]


def arrives_at(d, t, dev_start, dev_reps, rq, nxt, arr):  # type: ignore[no-untyped-def]
    """Whether a new request reaches a replica of device ``d`` at exactly ``t``. The runtime wakes a free device's
    consumer on every arrival, and an instant's arrivals come before its device events: a batch that such an arrival
    makes ready fires before another device's batch ending at ``t`` forwards anything to it."""
    k = np.searchsorted(arr, t)  # most instants have no arrival at all: no queue to scan
    if k >= arr.shape[0] or arr[k] != t:
        return False
    for jj in range(dev_start[d], dev_start[d + 1]):
        r = dev_reps[jj]
        node = rq[r, P_HEAD]
        for _ in range(rq[r, P_N]):
            if arr[node] >= t:
                if arr[node] == t:
                    return True
                break
            node = nxt[node]
    return False


def woken(d, t, arr, plan, st):  # type: ignore[no-untyped-def]
    """Whether free device ``d`` was woken at ``t`` by an event (a batch end, a forward, the drain) or an arrival."""
    return not st.busy[d] and (st.poke_t[d] == t or arrives_at(d, t, plan.dev_start, plan.dev_reps, st.rq, st.nxt, arr))


def take(r, t, cap, limit, rq, nxt, arr, ftime):  # type: ignore[no-untyped-def]
    """Replica ``r``'s batch firing at ``t`` with the samples present (arrivals by ``t``): unlinked from its queues
    and linked in batch order; returns its head and size."""
    fn = rq[r, F_N]
    pn = rq[r, P_N]
    most = take_count(fn + pn, cap, limit)  # the batch if every pending sample had arrived
    scan = min(pn, max(most - fn, 0) + 1)  # enough to tell whether the present ones exceed the cap
    kp = 0
    node = rq[r, P_HEAD]
    while kp < scan and arr[node] <= t:
        kp += 1
        node = nxt[node]
    present = fn + kp
    size = take_count(present, cap, limit)
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
        return head, size
    if size == present:  # every forwarded sample, then the arrived ones
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
        return head, size
    # capped: the oldest first across both queues, slot by slot (policy.batch_members' rule)
    inf = math.inf
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
    return head, size


def token_secs(head, size, row, nxt, inp, costs):  # type: ignore[no-untyped-def]
    """Seconds of a batch of model ``row`` by its tokens: its longest prompt and longest output, priced by
    ``profile.tokens.batch_seconds`` (the rule the emulated devices apply)."""
    by_index = inp.samp.shape[0] == 0  # request i takes sample i mod n_samples
    node = head
    pm = 0.0
    dm = 0.0
    for _ in range(size):
        s = node % inp.n_samples if by_index else inp.samp[node]
        pm = max(pm, costs.prompt_tokens[row, s])
        dm = max(dm, costs.output_tokens[row, s])
        node = nxt[node]
    return batch_seconds(costs.rt[row, size], costs.prompt_s[row, size], costs.output_s[row, size], pm, dm)


def exits(head, size, t, row, inp, plan, st, out, scratch):  # type: ignore[no-untyped-def]
    """The exit decision for each request of a batch of model ``row`` ending at ``t``: the sure ones are answered,
    the others listed in ``scratch`` in batch order; returns how many were not sure."""
    by_index = inp.samp.shape[0] == 0  # request i takes sample i mod n_samples
    node = head
    n_un = 0
    for _ in range(size):
        i = node
        node = st.nxt[i]
        g = out.gear_of[i]
        s = i % inp.n_samples if by_index else inp.samp[i]
        if stage_exits(plan.thr, g, row, inp.cert[row, s]):
            out.finish[i] = t
            out.answer_row[i] = row
            out.correct[i] = inp.right[row, s]
            out.stage[i] = plan.stage_table[g, row]
        else:
            scratch[n_un] = i
            n_un += 1
    return n_un


def exits_audited(head, size, t, row, inp, plan, st, out, scratch, audit_f):  # type: ignore[no-untyped-def]
    """:func:`exits` with online tuning's audit sampling (its own function: the plain path stays as fast as it was):
    an early exit that ``audit_pick`` picks (counter ``st.audit_c[0]``) is answered and also goes on, flagged in
    ``st.audited``; an audited request goes on to its gear's last stage whatever the later stages say, answering
    nobody again (``AuditSampler.split``'s rule). Returns how many go on (listed in ``scratch``) and how many were
    answered."""
    by_index = inp.samp.shape[0] == 0  # request i takes sample i mod n_samples
    next_row = plan.next_row
    audited = st.audited
    audit_c = st.audit_c
    node = head
    n_un = 0
    n_ans = 0
    for _ in range(size):
        i = node
        node = st.nxt[i]
        g = out.gear_of[i]
        s = i % inp.n_samples if by_index else inp.samp[i]
        sure = stage_exits(plan.thr, g, row, inp.cert[row, s])
        go_on = not sure
        if audited[i]:
            go_on = next_row[g, row] >= 0
        elif sure:
            out.finish[i] = t
            out.answer_row[i] = row
            out.correct[i] = inp.right[row, s]
            out.stage[i] = plan.stage_table[g, row]
            n_ans += 1
            if next_row[g, row] >= 0:  # an early exit: audited, or not
                go_on = audit_pick(audit_c[0], audit_f)
                audit_c[0] += 1
                audited[i] = go_on
        if go_on:
            scratch[n_un] = i
            n_un += 1
    return n_un, n_ans


def record_batch(rec_f, rec_i, n_rec, t0, t, d, r, row, size, answered):  # type: ignore[no-untyped-def]
    """Write batch ``n_rec`` (growing the arrays when full); returns the arrays."""
    if n_rec == rec_f.shape[0]:
        rec_f2 = np.empty((2 * n_rec, 2))
        rec_i2 = np.empty((2 * n_rec, 5), np.int64)
        rec_f2[:n_rec] = rec_f
        rec_i2[:n_rec] = rec_i
        rec_f = rec_f2
        rec_i = rec_i2
    rec_f[n_rec, 0] = t0
    rec_f[n_rec, 1] = t
    rec_i[n_rec, 0] = d
    rec_i[n_rec, 1] = r
    rec_i[n_rec, 2] = row
    rec_i[n_rec, 3] = size
    rec_i[n_rec, 4] = answered
    return rec_f, rec_i


def forward(n_un, scratch, t, row, lane, plan, routes, st, gear_of):  # type: ignore[no-untyped-def]
    """The unsure requests of a batch of ``row`` (``scratch[:n_un]``), in batch order, each to the next stage by its
    own gear's router (of the batch's ``lane``: ``PlanTables.forward_lane``)."""
    seqs = routes.seqs
    last_g = -1
    k0 = -1
    seq = seqs[:1]
    for u in range(n_un):
        i = scratch[u]
        g = gear_of[i]
        if g != last_g:  # the router of this sample's gear (most batches hold one gear)
            last_g = g
            k0 = routes.route_of[g, plan.next_row[g, row]]
            s0 = routes.seq_start[k0]
            seq = seqs[s0 : s0 + routes.seq_len[k0]]
        j, p2 = swrr_pick(seq, st.rpos[k0, lane])
        st.rpos[k0, lane] = p2
        rr = routes.route_reps[routes.route_start[k0] + j]
        push(st.rq, st.nxt, F_HEAD, rr, i)
        st.ftime[i] = t
        st.rep_dirty[rr] = True
        dev = plan.replica_device[rr]
        st.dirty[dev] = True
        st.poke_t[dev] = t  # the runtime wakes its consumer now


# Compiled in this order (and copied into their callers), each seeing the kernels and the helpers before it.
HELPERS = (
    batch_seconds, busy_at, host_peers, host_share, contended, push, route, ready, arrives_at, woken,
    take, token_secs,
    exits, exits_audited,
    record_batch, forward,
)  # fmt: skip
