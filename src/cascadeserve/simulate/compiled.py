"""The simulator's compiled path: plan and profile as the loop's records of plain arrays, the loop, a ``SimResult``.

``simulate(..., engine="auto")`` takes this path when the run has no hook that only the reference engine applies
(:mod:`cascadeserve.simulate.reference`, the runtime on a virtual clock): it supports the plan's gears (the
selector with α·Q0 hysteresis), a ``gear_schedule``, an ``admission`` policy (its count bound, each arrival admitted
against the answers given before it), ``samples`` and ``record_batches``; an AIMD batch limit (its per-replica
caps as an array in the loop, updated by ``policy.kernels.aimd_next``); the p99-fit batch limit, a prediction
cache, device slowdowns and online tuning that moves thresholds keep the reference; audit sampling alone (the
planner's checks of a plan sized for ``--tune``, ``OnlineTuning.audits_only``) is compiled. ``engine="compiled"``
refuses a run it cannot apply with a ``ValueError`` naming the hook; ``engine="reference"`` forces the reference
(the equivalence tests run both).

The first compiled run in a process loads the loop from numba's on-disk cache (``__pycache__`` beside the package,
else ``NUMBA_CACHE_DIR`` or the user's cache directory), or compiles it once when no cache is there yet
(:func:`cascadeserve.simulate.warm.warm_up` does that ahead of time).
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np

from cascadeserve.policy import AimdBatchLimit
from cascadeserve.policy.qps import max_window_ticks
from cascadeserve.profile import Profile
from cascadeserve.profile.host import host_groups
from cascadeserve.profile.spread import spread_table
from cascadeserve.profile.tokens import TokenTables, token_tables
from cascadeserve.simulate.loop import build_loop
from cascadeserve.simulate.loop_records import (
    LoopCosts,
    LoopGears,
    LoopInputs,
    LoopOptions,
    LoopOutput,
    LoopPlan,
    LoopRoutes,
)
from cascadeserve.simulate.result import BatchRecord, SimResult, TickSeries, build_result
from cascadeserve.simulate.scenario import Scenario
from cascadeserve.simulate.ticks import tick_windows

__all__ = ["Engine", "run_compiled", "unsupported"]

Engine = Literal["auto", "compiled", "reference", "python"]  # "python": the reference's old name

_TABLE_BATCH = 4096


def unsupported(sim: Scenario) -> str | None:
    """Why ``sim`` needs the reference engine (the first hook it has that the compiled loop does not apply), or None."""
    if sim.batch_limit is not None and _aimd(sim.batch_limit) is None:
        return "an adaptive batch limit other than a plain AIMD one (batch_limit, or the plan's batching)"
    if sim.cache is not None:
        return "a prediction cache"
    if sim.slowdowns is not None:
        return "device slowdowns"
    if sim.tuning is not None and not sim.tuning.never_tunes:
        return "online threshold tuning (audits alone are compiled)"
    return None


def _aimd(limit: object | None) -> AimdBatchLimit | None:
    """``limit`` if the compiled loop can apply it: an :class:`AimdBatchLimit` whose ``limit``/``observe`` are
    AIMD's own (a subclass that overrides them, say to log each decision, must be called: it keeps Python)."""
    if not isinstance(limit, AimdBatchLimit):
        return None
    kind = type(limit)
    if kind.limit is not AimdBatchLimit.limit or kind.observe is not AimdBatchLimit.observe:
        return None
    return limit


def _routes(sim: Scenario) -> LoopRoutes:
    tb = sim.tables
    route_of = np.full(tb.threshold.shape, -1, dtype=np.int64)
    starts: list[int] = []
    lens: list[int] = []
    reps: list[int] = []
    seq_starts: list[int] = []
    seq_lens: list[int] = []
    seqs: list[np.ndarray] = []
    n_reps = n_seq = 0
    for k, ((g, m), route) in enumerate(sorted(tb.routes().items())):
        route_of[g, m] = k
        seq = route.router().sequence if route.replicas else np.zeros(1, dtype=np.int64)
        starts.append(n_reps)
        lens.append(len(route.replicas))
        reps.extend(route.replicas)
        seq_starts.append(n_seq)
        seq_lens.append(len(seq))
        seqs.append(seq)
        n_reps += len(route.replicas)
        n_seq += len(seq)

    def ints(x: list[int]) -> np.ndarray:
        return np.asarray(x, dtype=np.int64)

    flat = np.concatenate(seqs).astype(np.int64) if seqs else np.zeros(0, dtype=np.int64)
    # the router each forward uses: lane 0 for every replica, or its device on Ray (PlanTables.forward_lane)
    lanes = np.ascontiguousarray(tb.forward_lane, dtype=np.int64)
    return LoopRoutes(route_of, ints(starts), ints(lens), ints(reps), ints(seq_starts), ints(seq_lens), flat, lanes)


_RT_CACHE: dict[tuple[int, ...], tuple[tuple[object, ...], np.ndarray]] = {}


def _runtime_table(prof: Profile, size: int) -> np.ndarray:
    """Seconds per batch, ``[model row, batch size]`` for sizes ``0..size`` (``RuntimeCurve.table``), kept per set
    of curves: the planner simulates one profile thousands of times, and building the array costs milliseconds."""
    curves = tuple(m.runtime for m in prof.models)
    key = (*map(id, curves), size)
    hit = _RT_CACHE.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], curves, strict=True)):
        return hit[1]
    out = np.asarray([c.table(size) for c in curves], dtype=np.float64)
    if len(_RT_CACHE) >= 64:
        _RT_CACHE.clear()
    _RT_CACHE[key] = (curves, out)
    return out


_TOK_CACHE: dict[tuple[int, ...], tuple[tuple[object, ...], TokenTables | None]] = {}
_NO_TOKENS = np.zeros((1, 1))  # the token tables' placeholder: no model has token costs
_NO_SPREAD = np.ones((1, 1, 1))  # the spread table's placeholder: no model has any


def _token_tables(prof: Profile, size: int) -> TokenTables | None:
    """The profile's token tables (``profile.tokens``) for sizes ``0..size``, kept per set of models as the runtime
    table is; None when no model has token costs."""
    models = prof.models
    key = (*map(id, models), prof.n_samples, size)
    hit = _TOK_CACHE.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], models, strict=True)):
        return hit[1]
    out = token_tables(models, prof.n_samples, size)
    if len(_TOK_CACHE) >= 64:
        _TOK_CACHE.clear()
    _TOK_CACHE[key] = (models, out)
    return out


def _plain(a: np.ndarray, dtype: type) -> np.ndarray:
    return np.require(a, dtype=dtype, requirements=["C", "W"])


def run_compiled(
    sim: Scenario, arr: np.ndarray, sample_of: np.ndarray | None, wall0: float, qps_scale: np.ndarray | None = None
) -> SimResult:
    """Run ``sim`` on the compiled loop (``arr`` and ``sample_of`` validated by ``simulate``; ``qps_scale`` as
    there: tick ``w``'s factor, the last one holding past its end; default the plan's own)."""
    why = unsupported(sim)
    if why is not None:
        raise ValueError(f"the compiled simulator does not apply {why}; use engine='auto' or 'reference'")
    tb, prof = sim.tables, sim.profile
    samp = np.zeros(0, dtype=np.int64) if sample_of is None else sample_of  # empty: request i takes i mod n
    f8, i8 = np.float64, np.int64
    # Every array C-contiguous and writable: numba compiles once per argument type, and a read-only trace (or a
    # strided view) is another type, which would mean another compile.
    inp = LoopInputs(
        _plain(arr, f8), _plain(samp, i8), prof.n_samples, _plain(prof.certainties, f8),
        np.ascontiguousarray(prof.predictions == prof.labels[None, :]),
    )  # fmt: skip
    gears = _gears(sim, arr, qps_scale)
    routes = _routes(sim)
    aimd = _aimd(sim.batch_limit)
    r_count = len(tb.replica_row)
    # Per replica: the AIMD cap the run starts from (the limiter's state), or NO_LIMIT (-1) without one.
    caps0 = aimd.caps(r_count) if aimd is not None else np.full(r_count, -1, dtype=np.int64)
    plan = _plan(sim)
    drawn = spread_table(prof, tb.n_devices)  # each batch's factor beyond its rule, per device (profile/spread.py)
    spread = _NO_SPREAD if drawn is None else _plain(drawn, np.float64)
    loop = build_loop()
    table = _TABLE_BATCH
    while True:
        opts = _options(sim, caps0.copy())  # the loop updates the caps in place; a replay starts afresh
        out = loop(inp, plan, routes, _costs(sim, table, spread), gears, opts)
        if out.table_short == 0:
            break
        table = 2 * out.table_short  # a batch past the runtime table: rebuild it bigger and replay
    if aimd is not None:
        aimd.set_caps(opts.lim)  # the limiter ends where the reference's would
    return _result(sim, arr, gears, out, wall0)


def _plan(sim: Scenario) -> LoopPlan:
    """The plan's tables as the loop reads them: one trigger per gear and replica, one max wait for all."""
    tb = sim.tables
    trig = [tb.triggers_for(g) for g in range(tb.n_gears)]
    min_queue = np.asarray([[t.min_queue for t in ts] for ts in trig], dtype=np.int64)
    caps = np.asarray([[-1 if t.max_batch is None else t.max_batch for t in ts] for ts in trig], dtype=np.int64)
    waits = {t.max_wait_s for ts in trig for t in ts}
    if len(waits) != 1:  # PlanTables gives every trigger the plan's one max wait
        raise ValueError("the compiled simulator needs one max wait for every trigger")
    wait = waits.pop()
    dev_reps = [list(tb.device_replicas[d]) for d in range(tb.n_devices)]
    dev_start = np.cumsum([0] + [len(x) for x in dev_reps]).astype(np.int64)
    dev_flat = np.asarray([r for x in dev_reps for r in x], dtype=np.int64)
    i8 = np.int64
    return LoopPlan(
        _plain(tb.stage, i8), _plain(tb.threshold, np.float64), _plain(tb.next_row, i8), _plain(tb.first_row, i8),
        min_queue, caps, np.inf if wait is None else float(wait), _plain(tb.replica_row, i8),
        _plain(tb.replica_device, i8), dev_start, dev_flat,
    )  # fmt: skip


def _gears(sim: Scenario, arr: np.ndarray, qps_scale: np.ndarray | None) -> LoopGears:
    """The producer's ticks over ``arr`` and the gear controller: the plan's selector, or its schedule."""
    plan, gp, tick = sim.plan, sim.gear_policy, sim.tick_s
    n_ticks = tick_windows(arr, tick)
    bounds = np.searchsorted(arr, tick * np.arange(n_ticks + 1), side="left") if len(arr) else np.zeros(1)
    schedule = gp.schedule.gears.astype(np.int64) if gp.schedule is not None else np.zeros(1, dtype=np.int64)
    scales = (
        _plain(np.asarray(qps_scale), np.float64)
        if qps_scale is not None and len(qps_scale)
        else np.asarray([gp.selector.qps_scale], dtype=np.float64)
    )
    return LoopGears(
        tick, n_ticks, _plain(bounds, np.int64), tick * np.arange(n_ticks + 1, dtype=np.float64),
        int(plan.qps_min_arrivals), max_window_ticks(tick) if plan.qps_min_arrivals > 0 else 1,
        np.asarray(gp.selector.qps_highs, dtype=np.float64), scales, float(gp.selector.alpha), schedule,
        gp.schedule is not None, int(gp.initial()),
    )  # fmt: skip


def _costs(sim: Scenario, table: int, spread: np.ndarray) -> LoopCosts:
    """What a batch costs, for batch sizes ``0..table``: with token costs the loop prices each batch by its longest
    prompt and output (profile/tokens.py); without, the runtime table is the whole price and the token arrays are
    placeholders (as ``spread`` is :data:`_NO_SPREAD` when no model has any)."""
    prof, plan = sim.profile, sim.plan
    tok = _token_tables(prof, table)
    rt = _runtime_table(prof, table) if tok is None else tok.base_s
    no = _NO_TOKENS
    return LoopCosts(
        rt, plan.batch_overhead_ms / 1000.0, tok is not None, no if tok is None else tok.prompt_s,
        no if tok is None else tok.output_s, no if tok is None else tok.prompt_tokens,
        no if tok is None else tok.output_tokens, np.asarray([m.busy_factor for m in prof.models], dtype=np.float64),
        host_groups([d.upstream is not None for d in plan.devices]), spread is not _NO_SPREAD, spread,
    )  # fmt: skip


def _options(sim: Scenario, lim: np.ndarray) -> LoopOptions:
    """Admission's bound, the AIMD limit (its caps ``lim``, changed in place by the run), audits, batch records."""
    adm = sim.admission
    bound = None if adm is None else adm.bound()
    aimd = _aimd(sim.batch_limit)
    # audits only (a plan sized for --tune, in the planner's checks): the sampler's fraction and where it stands
    tuning = sim.tuning
    return LoopOptions(
        -1 if bound is None else int(bound), adm is not None, sim.record_batches, lim,
        float(aimd.target_s) if aimd else 1.0, int(aimd.step) if aimd else 1, float(aimd.backoff) if aimd else 0.5,
        int(aimd.ceiling) if aimd else 1, 0.0 if tuning is None else float(tuning.auditor.fraction),
        0 if tuning is None else int(tuning.auditor.count),
    )  # fmt: skip


def _result(sim: Scenario, arr: np.ndarray, gears: LoopGears, out: LoopOutput, wall0: float) -> SimResult:
    batches = [
        BatchRecord(float(f[0]), float(f[1]), int(i[0]), int(i[1]), int(i[2]), int(i[3]), int(i[4]))
        for f, i in zip(out.batch_times.tolist(), out.batch_ints.tolist(), strict=True)
    ]
    prof = sim.profile
    return build_result(
        arrivals=arr,
        samples=None,
        correct=out.correct,
        stage=out.stage,
        finish=out.finish,
        answer_row=out.answer_row,
        gear=out.gear,
        predictions=prof.predictions,
        labels=prof.labels,
        stage_table=sim.tables.stage,
        ticks=TickSeries(gears.tick, gears.n_ticks, out.tick_qps, out.tick_gear, out.tick_q0, out.tick_busy),
        wall_s=time.perf_counter() - wall0,
        batches=batches,
        cached=None,
        shed=out.shed if sim.admission is not None else None,
        threshold_changes=[],
        engine="compiled",
    )
