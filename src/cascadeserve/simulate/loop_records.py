"""The compiled loop's records: what :mod:`cascadeserve.simulate.loop` takes, keeps and returns, by name.

Each record is a named tuple of arrays and scalars, one per concept: the requests (:class:`LoopInputs`), the plan's
tables (:class:`LoopPlan`), its routers (:class:`LoopRoutes`), what a batch costs (:class:`LoopCosts`), the gear
controller (:class:`LoopGears`), the run's options (:class:`LoopOptions`), the queues and devices as the run goes
(:class:`LoopState`), the per-request and per-tick outcomes (:class:`LoopOutcomes`) and what the run returns
(:class:`LoopOutput`). numba passes named tuples between compiled functions and returns them to Python as these
classes; the arrays inside are shared, and so writable, while a scalar is fixed for the run (a scalar that changes
lives in a one-element array, as ``audit_c``, or in the loop's locals).

:mod:`cascadeserve.simulate.compiled` builds the first six from the scenario (they cross into numba as plain tuples
and are named again inside: :func:`cascadeserve.simulate.loop.build_loop` says why) and reads the output by name;
:func:`new_state` and :func:`new_outcomes`, compiled as the loop's helpers, allocate the other two inside the loop
(this file is part of the loop's cache key, as its helpers' files are: a record changed here compiles afresh).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = [
    "LoopCosts", "LoopGears", "LoopInputs", "LoopOptions", "LoopOutcomes", "LoopOutput", "LoopPlan", "LoopRoutes",
    "LoopState", "new_outcomes", "new_state",
]  # fmt: skip


class LoopInputs(NamedTuple):
    """The requests and what the models say of each validation sample."""

    arr: np.ndarray  # arrival seconds, sorted
    samp: np.ndarray  # the sample each request is (empty: request i takes sample i mod n_samples)
    n_samples: int
    cert: np.ndarray  # [model row, sample] certainty
    right: np.ndarray  # [model row, sample] whether the model's prediction is right


class LoopPlan(NamedTuple):
    """The plan's tables (``PlanTables`` as arrays): each gear's cascade and triggers, the replicas, the devices."""

    stage_table: np.ndarray  # [gear, model row] the stage that row is in the gear's cascade
    thr: np.ndarray  # [gear, model row] exit thresholds
    next_row: np.ndarray  # [gear, model row] the next stage's row (-1: the last stage)
    first_row: np.ndarray  # per gear: its first stage's row
    min_queue: np.ndarray  # [gear, replica] trigger minimum queue length
    caps: np.ndarray  # [gear, replica] the trigger's max batch (-1: none)
    max_wait: float  # seconds (inf: none)
    replica_row: np.ndarray  # per replica: its model row
    replica_device: np.ndarray  # per replica: its device
    dev_start: np.ndarray  # device d's replicas are dev_reps[dev_start[d]:dev_start[d + 1]]
    dev_reps: np.ndarray


class LoopRoutes(NamedTuple):
    """The routers: one per (gear, model row) with replicas, each a period of its smooth weighted round-robin."""

    route_of: np.ndarray  # [gear, model row] the router (-1: none)
    route_start: np.ndarray  # router k's replicas are route_reps[route_start[k]:route_start[k] + route_len[k]]
    route_len: np.ndarray
    route_reps: np.ndarray
    seq_start: np.ndarray  # router k's period is seqs[seq_start[k]:seq_start[k] + seq_len[k]]
    seq_len: np.ndarray
    seqs: np.ndarray
    forward_lane: np.ndarray  # per replica: the lane (router position) its forwards use (PlanTables.forward_lane)


class LoopCosts(NamedTuple):
    """What a batch costs: the runtime table and overhead, its tokens, the host's other busy devices, the spread."""

    rt: np.ndarray  # [model row, batch size] seconds (with tokens: the base seconds, profile/tokens.py)
    overhead: float  # seconds per batch
    use_tok: bool  # price each batch by its longest prompt and output (the four arrays below; else placeholders)
    prompt_s: np.ndarray
    output_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    busy_f: np.ndarray  # per model row: how much the host's load slows it (1.0: not at all; profile/host.py)
    host_g: np.ndarray  # per device: its host group
    use_spread: bool  # each batch's factor beyond its rule, per device (profile/spread.py; else a placeholder)
    spread: np.ndarray  # [device, model row, draw]


class LoopGears(NamedTuple):
    """The producer's ticks and the gear controller: the QPS meter, the selector (or a schedule)."""

    tick: float  # seconds per tick
    n_ticks: int
    bounds: np.ndarray  # requests arrived before each tick's start (n_ticks + 1)
    tick_times: np.ndarray  # each tick's start (n_ticks + 1)
    qps_min: int  # the meter's minimum arrivals per window
    qps_ticks: int  # and its longest window in ticks
    highs: np.ndarray  # the selector's QPS bounds per gear
    qps_scales: np.ndarray  # per tick: appendix C.2's factor (the last holds past its end)
    alpha: float  # the α·Q0 hysteresis
    schedule: np.ndarray  # per tick: the scheduled gear (when use_schedule)
    use_schedule: bool
    gear0: int  # the gear the run starts in


class LoopOptions(NamedTuple):
    """The run's options: admission, the AIMD batch limit, audit sampling, batch records."""

    adm_cap: int  # admission's bound on requests in flight (-1: none)
    use_admission: bool
    record: bool  # record every batch
    lim: np.ndarray  # per replica: the AIMD cap (-1: none), updated in place as the run goes
    lim_target: float
    lim_step: int
    lim_backoff: float
    lim_ceiling: int
    audit_f: float  # the fraction of early exits audited (0.0: none)
    audit_c0: int  # the audit sampler's count when the run starts


class LoopState(NamedTuple):
    """The queues and devices as the run goes (allocated by :func:`new_state`, changed in place)."""

    nxt: np.ndarray  # per request: the next one in its queue or batch (-1: none)
    ftime: np.ndarray  # per request: when it entered a queue of forwarded samples
    rq: np.ndarray  # [replica, (P_HEAD, P_TAIL, P_N, F_HEAD, F_TAIL, F_N)] its two queues (loop_queues.py)
    rep_t: np.ndarray  # per replica: when its trigger fires, ignoring "not before now" (valid unless rep_dirty)
    rep_first: np.ndarray  # and when its oldest queued sample entered
    rep_dirty: np.ndarray
    cur_minq: np.ndarray  # per replica: the trigger in force (the gear's, or 1 in the drain)
    cur_cap: np.ndarray
    busy: np.ndarray  # per device: running a batch
    busy_until: np.ndarray  # when it ends (inf: free)
    free_at: np.ndarray  # when the device's last batch ended
    ready_t: np.ndarray  # a free device's next batch: when (inf: none) and which replica (valid unless dirty)
    ready_r: np.ndarray
    dirty: np.ndarray
    b_head: np.ndarray  # per device: the batch it runs (head, size, replica, start)
    b_n: np.ndarray
    b_r: np.ndarray
    b_t0: np.ndarray
    rpos: np.ndarray  # [router, lane] each router's position in its period
    poke_t: np.ndarray  # per device: when an event last woke it (a forward, a batch end, the drain)
    started: np.ndarray  # per device: batches started (its next spread draw)
    audited: np.ndarray  # per request: an early exit that goes on, audited (empty without audits)
    audit_c: np.ndarray  # [the audit sampler's count of early exits]


class LoopOutcomes(NamedTuple):
    """Per request and per tick, as the run writes them (allocated by :func:`new_outcomes`)."""

    finish: np.ndarray  # per request: when it was answered (inf: never)
    answer_row: np.ndarray  # the model row that answered it (-1: none)
    correct: np.ndarray
    stage: np.ndarray
    gear_of: np.ndarray  # the gear it was admitted under
    shed: np.ndarray  # shed by admission (empty without admission)
    tick_qps: np.ndarray
    tick_gear: np.ndarray
    tick_q0: np.ndarray
    tick_busy: np.ndarray  # [tick, device] busy seconds (n_ticks + 1 rows: the drain's last)


class LoopOutput(NamedTuple):
    """What one run of the compiled loop returns."""

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


def new_state(n, plan, routes, opts, gear0):  # type: ignore[no-untyped-def]
    """The state of a run of ``n`` requests before its first event: empty queues, free devices, triggers of
    ``gear0``, every router at the start of its period."""
    inf = math.inf
    r_count = plan.replica_row.shape[0]
    d_count = plan.dev_start.shape[0] - 1
    rq = np.zeros((r_count, 6), np.int64)
    for col in (0, 1, 3, 4):  # the heads and tails (loop_queues.P_HEAD, P_TAIL, F_HEAD, F_TAIL): none
        rq[:, col] = -1
    # each router's position in its period, per lane (forwards on Ray: each device's server routes its own)
    lanes = (routes.forward_lane.max() + 1) if r_count else 1
    return LoopState(
        np.full(n, -1, np.int64), np.empty(n), rq, np.full(r_count, inf), np.full(r_count, inf),
        np.ones(r_count, np.bool_), plan.min_queue[gear0].copy(), plan.caps[gear0].copy(), np.zeros(d_count, np.bool_),
        np.full(d_count, inf), np.zeros(d_count), np.full(d_count, inf), np.full(d_count, -1, np.int64),
        np.ones(d_count, np.bool_), np.full(d_count, -1, np.int64), np.zeros(d_count, np.int64),
        np.zeros(d_count, np.int64), np.zeros(d_count), np.zeros((routes.route_start.shape[0], lanes), np.int64),
        np.full(d_count, -inf), np.zeros(d_count, np.int64), np.zeros(n if opts.audit_f > 0.0 else 0, np.bool_),
        np.full(1, opts.audit_c0, np.int64),
    )  # fmt: skip


def new_outcomes(n, n_ticks, d_count, use_admission):  # type: ignore[no-untyped-def]
    """Outcomes before the run: nobody answered, every tick empty."""
    return LoopOutcomes(
        np.full(n, math.inf), np.full(n, -1, np.int64), np.zeros(n, np.bool_), np.empty(n, np.int64),
        np.zeros(n, np.int64), np.zeros(n if use_admission else 0, np.bool_), np.zeros(n_ticks),
        np.zeros(n_ticks, np.int64), np.zeros(n_ticks, np.int64), np.zeros((n_ticks + 1, d_count)),
    )  # fmt: skip
