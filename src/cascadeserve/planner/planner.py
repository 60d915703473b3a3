"""The gear planner: Algorithm 1 over SP1 (cascade search), SP2 (workload adaptation), SP3 (hardware mapping)
and SP4 (batching), behind a scikit-learn style ``Planner(...).fit(...)`` (paper §4).

One fit is a :class:`~cascadeserve.planner.problem.Problem` (everything fixed: profile, devices, SLO, QPS ranges
and their weights, the runtime arithmetic) and a :class:`~cascadeserve.planner.solution.Solution` (what the cycle
changes). The four submodules take turns improving the solution (:func:`run_loop`), each a function
``(problem, solution, error) -> (solution, step)`` in its own module:

* **SP1** (:mod:`~cascadeserve.planner.sp1`) builds the accuracy/work frontier once; an error reaching it is final
  and :func:`~cascadeserve.planner.explain.explain` says why in the user's terms.
* **SP2** (:mod:`~cascadeserve.planner.sp2`) assigns a frontier cascade to every QPS range (latency SLO: the most
  accurate that fits, downgraded on errors; accuracy SLO: the cheapest assignment meeting the target within caps).
* **SP3** (:mod:`~cascadeserve.planner.sp3`) places replicas (Eq. 4) and balances each range with an LP (Eq. 5),
  adding replicas of the models SP4 blames.
* **SP4** (:mod:`~cascadeserve.planner.sp4`) sets the first stage's minimum queue length per range, checked by
  simulation, and blames the bottleneck model where no length holds.

:mod:`~cascadeserve.planner.build` turns the converged solution into the :class:`~cascadeserve.plan.GearPlan`.

A per-batch overhead (``Planner(batch_overhead_ms=…)``, a deployment's fixed cost per batch beyond the profiled
runtime) is part of every batch's duration: the amortised runtimes of SP2's capacity test and of SP3's LP and
placement, the largest batch the SLO allows, SP4's utilisation estimate, and SP4's simulations (the checked plan
carries it, as does the emitted plan). SP1's frontier still ranks cascades by profiled work alone.

Simulation results are cached by (cascade, shares, minimum queue lengths, QPS), and so are LP solutions
(:class:`~cascadeserve.planner.problem.Memo`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from cascadeserve.errors import InfeasibleError
from cascadeserve.plan import SLO, Device, Gear, GearPlan, with_upstream_devices
from cascadeserve.planner.batching import check_load, check_seed, sim_duration
from cascadeserve.planner.build import build_plan
from cascadeserve.planner.explain import explain, memory_warnings
from cascadeserve.planner.loop import LoopInfeasible, LoopResult, Step, run_loop
from cascadeserve.planner.problem import Options, Problem, make_problem
from cascadeserve.planner.search import search_cascades
from cascadeserve.planner.solution import Issue, Solution, empty_solution, weighted_acc
from cascadeserve.planner.sp1 import sp1
from cascadeserve.planner.sp2 import sp2
from cascadeserve.planner.sp3 import sp3
from cascadeserve.planner.sp4 import sp4
from cascadeserve.planner.static import Judge, best_static, static_gears
from cascadeserve.planner.tracecheck import SloSearch, TraceCheck, rank, shortfall
from cascadeserve.planner.workload import QpsDistribution, qps_scale_for
from cascadeserve.policy.qps import check_qps
from cascadeserve.profile import Profile, costs_note
from cascadeserve.simulate.memo import late_on_prefix, replay

QPS_MIN_ARRIVALS = 20
"""The QPS meter window of the plans the planner makes (GearPlan.qps_min_arrivals): the last tick, stretched back
until it holds 20 arrivals, which reads a steady load to about 22 %; one 100 ms tick holds that many from 200 QPS
up, where the paper's one-tick meter is kept as it is."""

__all__ = ["SUBMODULES", "Planner", "PlannerReport", "qps_scale_for"]

SUBMODULES = ("search_cascades", "assign_cascades", "place_models", "tune_batch_sizes")

# A submodule: improve the solution (error None) or resolve the next submodule's error, always returning the
# solution it leaves behind with its answer.
Submodule = Callable[[Problem, Solution, Issue | None], tuple[Solution, Step[Issue]]]


@dataclass
class PlannerReport:
    """What the planner did: Algorithm 1's iterations and calls, time per submodule, frontier and simulations."""

    feasible: bool = False
    iterations: int = 0
    cycles: int = 0
    submodule_calls: dict[str, int] = field(default_factory=dict)
    submodule_s: dict[str, float] = field(default_factory=dict)
    frontier_size: int = 0
    frontier_method: str = ""
    frontier_evaluated: int = 0
    converged: bool = False
    hit_iteration_cap: bool = False
    max_iterations: int = 0
    planner_s: float = 0.0
    simulations: int = 0
    simulated_requests: int = 0
    lp_solves: int = 0
    plan_accuracy: float = 0.0
    qps_dist: str = ""
    message: str = ""
    trace_check: TraceCheck | None = None  # set when ``fit`` was given check arrivals
    # profile models that memory kept out of the plan, one sentence each (also in the plan's notes, ``warnings``)
    warnings: list[str] = field(default_factory=list)
    # set when the planner kept a static cascade over Algorithm 1's plan (:mod:`cascadeserve.planner.static`): why
    static_cascade: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Cycle:
    """The current solution between submodule calls: :func:`run_loop` passes only errors, so this holds the
    solution each submodule returns and hands it to the next."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.solution = empty_solution(problem.n_ranges)

    def module(self, submodule: Submodule) -> Callable[[Issue | None], Step[Issue]]:
        def call(error: Issue | None) -> Step[Issue]:
            self.solution, step = submodule(self.problem, self.solution, error)
            return step

        return call

    def qps_scale(self) -> float:
        """Appendix C.2's scaling of measured QPS for the final plan (accuracy SLO with an empirical
        distribution; 1.0 otherwise)."""
        problem, sol = self.problem, self.solution
        if problem.slo.kind != "accuracy":
            return 1.0
        samples = problem.dist.samples(problem.ranges[-1][1])
        if samples is None:
            return 1.0
        accs = [sol.cand(r).accuracy for r in range(problem.n_ranges)]
        return qps_scale_for([hi for _, hi in problem.ranges], accs, samples, problem.slo.value)


def _announce(
    i: int, module: Callable[[Issue | None], Step[Issue]], progress: Callable[[int, int], None]
) -> Callable[[Issue | None], Step[Issue]]:
    calls = [0]

    def call(error: Issue | None) -> Step[Issue]:
        calls[0] += 1
        progress(i, calls[0])
        return module(error)

    return call


class Planner:
    """The gear planner. ``Planner(...).fit(profile, hardware, slo, max_qps)`` sets ``plan_`` and ``report_``.

    * ``n_ranges``: equal QPS ranges over ``[0, max_qps]``, one gear each.
    * ``qps_dist``: ``"zipf"`` (exponent 1.1), ``"zipf:<exponent>"``, ``"trace:<trace spec>"`` or a
      :class:`QpsDistribution`; it weights the ranges for the plan's time-weighted accuracy.
    * ``alpha``: the runtime's hysteresis factor, copied into the plan.
    * ``seed``: seeds random cascade sampling and the simulated arrivals.
    * ``levels``: threshold levels per stage; ``max_batch``: the largest batch cap any model may get (1 = no
      batching); ``batch_caps``: fixed per-model batch caps in place of the default rule (the cheapest batch per
      sample within half the latency SLO, :func:`~cascadeserve.planner.problem.default_batch_caps`); the caps go
      into the plan, and the capacity model prices the batch they allow; ``sim_requests``: the most requests one
      SP4 stability check replays; ``max_iterations``: Algorithm 1's hard cap on submodule calls;
      ``search_method``: auto, exact or random.
    * ``batch_overhead_ms`` (≥ 0; default ``None``: the profile's recorded ``batch_overhead_ms``, 0 when it has
      none): a deployment's fixed cost per batch beyond the profiled runtime. Every batch the planner reasons about
      costs ``runtime(b) + overhead`` (SP3's LP and placement, the batch caps, SP4's checks), and the plan carries
      it, so ``simulate`` charges it.
    * ``trace_rounds`` (default 4) and ``trace_loosen`` (default True): with ``fit(check_arrivals=…)``, how many
      times the planner may plan again against a retargeted internal SLO (tighter when the plan's replay of those
      arrivals misses the SLO; looser when it meets it with slack, unless ``trace_loosen`` is False), keeping the
      best plan that meets the SLO on the replay (:mod:`cascadeserve.planner.tracecheck`).
    * ``audit_fraction`` (default 0): the share of early exits that online threshold tuning audits (``serve
      --tune``); every later stage's demand includes them (:meth:`~cascadeserve.planner.problem.Problem.reach`), and
      the plan records the fraction, which ``serve --tune`` then audits by default.
    * ``max_busy`` (in (0, 1], default 1: none): device headroom. SP4 accepts a gear only when no device in its
      check is busier than this fraction (else another replica or a cheaper cascade, as for a p95 miss): a runtime
      whose per-batch cost grows with load queues before a deterministic simulator does. Re-plans keep it.
    * ``static_floor`` (default True): after Algorithm 1, keep a static cascade instead where it does better
      (:mod:`cascadeserve.planner.static`); False gives Algorithm 1's plan alone (its ablations and tests).
    * ``backend`` (``"local"`` or ``"ray"``): where the plan will be served. The plan records it; on Ray every
      simulation of it, SP4's checks included, adds the profile's ``ray_hop_ms`` per process hop to each request's
      latency (:mod:`cascadeserve.simulate.hops`), so the SLO holds with Ray's actor calls in it.
    """

    def __init__(
        self,
        n_ranges: int = 10,
        qps_dist: str | QpsDistribution = "zipf",
        alpha: float = 8.0,
        seed: int = 0,
        *,
        levels: int = 20,
        max_batch: int = 256,
        batch_caps: Mapping[str, int] | None = None,
        sim_requests: int = 20_000,
        max_iterations: int = 5000,
        search_method: str = "auto",
        check_duration_s: float | None = None,
        batch_overhead_ms: float | None = None,
        trace_rounds: int = 4,
        trace_loosen: bool = True,
        audit_fraction: float = 0.0,
        max_busy: float = 1.0,
        static_floor: bool = True,
        backend: Literal["local", "ray"] = "local",
        qps_min_arrivals: int = QPS_MIN_ARRIVALS,
    ) -> None:
        if not 0.0 < max_busy <= 1.0:
            raise ValueError(f"max_busy must lie in (0, 1], got {max_busy!r}")
        if not 0.0 <= audit_fraction <= 1.0:
            raise ValueError(f"audit_fraction must lie in [0, 1], got {audit_fraction!r}")
        if trace_rounds < 0:
            raise ValueError(f"trace_rounds must be ≥ 0, got {trace_rounds!r}")
        if qps_min_arrivals < 0:
            raise ValueError(f"qps_min_arrivals must be ≥ 0, got {qps_min_arrivals!r}")
        if batch_overhead_ms is not None and not (batch_overhead_ms >= 0 and math.isfinite(batch_overhead_ms)):
            raise ValueError(f"batch_overhead_ms must be a finite number ≥ 0, got {batch_overhead_ms!r}")
        if batch_caps is not None and any(int(v) < 1 for v in batch_caps.values()):
            raise ValueError(f"batch caps must be positive integers, got {dict(batch_caps)!r}")
        self.n_ranges = n_ranges
        self.qps_dist = qps_dist
        self.alpha = alpha
        self.seed = seed
        self.levels = levels
        self.max_batch = max_batch
        self.batch_caps = None if batch_caps is None else {str(k): int(v) for k, v in batch_caps.items()}
        self.sim_requests = sim_requests
        self.max_iterations = max_iterations
        self.search_method = search_method
        # SP4 simulates each range for a duration chosen from its QPS and the SLO; a fixed one is for experiments
        # that score plans on one known trace (the quality harness).
        self.check_duration_s = check_duration_s
        self.batch_overhead_ms = None if batch_overhead_ms is None else float(batch_overhead_ms)
        self.trace_rounds = trace_rounds
        self.trace_loosen = trace_loosen
        self.audit_fraction = float(audit_fraction)
        self.max_busy = float(max_busy)
        self.static_floor = static_floor
        self.qps_min_arrivals = int(qps_min_arrivals)
        if backend not in ("local", "ray"):
            raise ValueError(f"backend must be local or ray, got {backend!r}")
        self.backend: Literal["local", "ray"] = backend
        self.plan_: GearPlan | None = None
        self.report_: PlannerReport | None = None

    def fit(
        self,
        profile: Profile,
        hardware: Sequence[Device],
        slo: SLO,
        max_qps: float,
        *,
        progress: Callable[[int, int], None] | None = None,
        check_arrivals: np.ndarray | None = None,
    ) -> Planner:
        """Plan gears for ``profile`` on ``hardware`` under ``slo`` up to ``max_qps``.

        ``progress(submodule, calls)`` is called before every submodule call (for a live display). Raises
        :class:`~cascadeserve.errors.InfeasibleError` (with ``report_`` set) when the SLO cannot be met.

        ``check_arrivals`` (sorted arrival times in seconds, e.g. the trace the QPS distribution came from): replay
        the plan on them and plan again against a retargeted internal SLO (tighter while the replay misses ``slo``,
        looser while it meets it with slack), at most ``trace_rounds`` times; the best plan that meets ``slo`` on
        the replay is kept (:mod:`cascadeserve.planner.tracecheck`). ``report_.trace_check`` says how the kept plan
        replayed; when none meets ``slo`` the closest is kept, not raised. The plan states the user's ``slo``; its
        notes name the internal one.
        """
        hardware = with_upstream_devices(profile, hardware)  # each upstream stage waits on a device of its own
        if check_arrivals is None:
            try:
                self._fit_once(profile, hardware, slo, max_qps, progress)
            except InfeasibleError:
                if not self._static_floor(profile, hardware, slo, max_qps, None, None):
                    raise
                return self
            assert self.plan_ is not None and self.report_ is not None
            if slo.kind == "p95_ms":
                # Without arrivals a static cascade competes on accuracy only: the plan's p95s are per range, at
                # each range's top, and compare with no single p95 of a static plan (an accuracy SLO keeps the plan)
                p95s = [g.predicted_p95_ms for g in self.plan_.gears if g.predicted_p95_ms is not None]
                own = TraceCheck(True, max(p95s, default=0.0), self.report_.plan_accuracy, 0, 0, slo.value)
                self._static_floor(profile, hardware, slo, max_qps, None, own)
            return self
        t0 = time.perf_counter()
        arrivals = np.asarray(check_arrivals, dtype=np.float64)
        internal, search = slo, SloSearch(slo)
        best: tuple[tuple[float, ...], GearPlan, PlannerReport, TraceCheck] | None = None
        for rounds in range(self.trace_rounds + 1):
            try:
                self._fit_once(profile, hardware, internal, max_qps, progress)
            except InfeasibleError:
                if best is None:
                    # the user's own SLO is infeasible for Algorithm 1: a static cascade may still meet it on the
                    # replay; otherwise the planner's message says why
                    if self._static_floor(profile, hardware, slo, max_qps, arrivals, None):
                        assert self.report_ is not None
                        self.report_.planner_s = time.perf_counter() - t0
                        return self
                    raise
                break  # a retargeted SLO is infeasible: keep the best plan so far
            assert self.plan_ is not None and self.report_ is not None
            p95, acc = replay(profile, self.plan_, arrivals)  # remembered while a cost grid runs
            check = TraceCheck(shortfall(slo, p95, acc) <= 0, p95, acc, len(arrivals), rounds, internal.value)
            key = rank(slo, check)
            if best is None or key < best[0]:
                best = (key, self.plan_, self.report_, check)
            if rounds == self.trace_rounds or (check.met and not self.trace_loosen):
                break
            nxt = search.next(internal, p95, acc)
            if nxt is None:
                break
            internal = nxt
        assert best is not None
        _, plan, report, check = best
        notes = dict(plan.notes)
        if check.planned_for != slo.value:
            notes["planned_for"] = str(SLO(kind=slo.kind, value=check.planned_for))
        notes["trace_check"] = check.describe(slo)
        self.plan_ = plan.model_copy(update={"slo": slo, "notes": notes})
        report.trace_check = check
        self.report_ = report
        self._static_floor(profile, hardware, slo, max_qps, arrivals, check)
        self.report_.planner_s = time.perf_counter() - t0
        return self

    def _static_floor(
        self,
        profile: Profile,
        hardware: Sequence[Device],
        slo: SLO,
        max_qps: float,
        arrivals: np.ndarray | None,
        beat: TraceCheck | None,
    ) -> bool:
        """Keep the best static cascade instead of Algorithm 1's plan where it does better, judged as that plan was
        (``beat``; ``None`` when Algorithm 1 found none): on the replay of ``arrivals``, or without them by SP4's
        load check at ``max_qps`` (:mod:`cascadeserve.planner.static`). Returns whether it did; then ``plan_`` is
        the static plan, and ``report_`` and the plan's notes say so."""
        if not hardware or not self.static_floor:
            return False
        opts = self._options(profile)
        frontier = search_cascades(profile, levels=self.levels, seed=self.seed, method=self.search_method)
        latency = slo.value if slo.kind == "p95_ms" else None

        def judge_at(qps: float) -> Judge:
            def judge(plan: GearPlan, acc: float) -> TraceCheck:
                plan = plan.model_copy(update={"backend": self.backend})  # a Ray plan pays its hops here too
                if arrivals is not None:
                    if latency is not None and late_on_prefix(profile, plan, arrivals, latency):
                        # the full replay would miss the latency SLO: a miss is all a judgment needs to know
                        return TraceCheck(False, math.inf, acc, len(arrivals), 0, slo.value)
                    p95, got = replay(profile, plan, arrivals)
                    return TraceCheck(shortfall(slo, p95, got) <= 0, p95, got, len(arrivals), 0, slo.value)
                n = profile.n_samples
                dur = self.check_duration_s or sim_duration(qps, latency, self.sim_requests, n_samples=n)
                chk = check_load(profile, plan, qps, dur, seed=check_seed(self.seed, 0), slo_ms=latency)
                met = chk.keep_up and chk.busy_max <= self.max_busy and shortfall(slo, chk.p95_ms, acc) <= 0
                return TraceCheck(met, chk.p95_ms, acc, chk.requests, 0, slo.value)

            return judge

        judge = judge_at(max_qps)

        span = float(arrivals[-1] - arrivals[0]) if arrivals is not None and len(arrivals) > 1 else 0.0
        found = best_static(
            profile,
            frontier,
            hardware,
            slo,
            judge,
            overhead_ms=opts.batch_overhead_ms,
            max_qps=max_qps,
            load_qps=len(arrivals) / span if arrivals is not None and span > 0 else max_qps,
            n_requests=0 if arrivals is None else len(arrivals),
            beat=beat,
            span_s=span,
        )
        if found is None:
            return False
        cascade, plan, check = found
        why = "Algorithm 1 found no plan" if beat is None else "it does better than Algorithm 1's plan"
        how = "on the check arrivals" if arrivals is not None else f"at {max_qps:g} QPS"
        said = f"static cascade {cascade}: {why} (p95 {check.p95_ms:.1f} ms, accuracy {check.accuracy:.4f} {how})"
        gears: tuple[Gear, ...] = (
            plan.gears[0].model_copy(
                update={"predicted_p95_ms": round(check.p95_ms, 3), "predicted_accuracy": round(check.accuracy, 6)}
            ),
        )
        if beat is None and arrivals is None and latency is not None and self.n_ranges > 1:
            # no gear plan: each range still takes the best static cascade, judged above its top as SP4 judges
            ranged = static_gears(
                profile, frontier, hardware, slo,
                lambda q: judge_at(check_qps(q, opts.tick_s, min_arrivals=self.qps_min_arrivals)), found,
                overhead_ms=opts.batch_overhead_ms, max_qps=max_qps, n_ranges=self.n_ranges,
            )  # fmt: skip
            if ranged is not None:
                plan, ranges = ranged
                gears, said = plan.gears, f"{said}; {ranges}"
        self.plan_ = plan.model_copy(
            update={
                "gears": gears,
                "qps_min_arrivals": self.qps_min_arrivals,  # the meter its ranges were judged with
                "slo": slo,
                "alpha": self.alpha,
                "audit_fraction": self.audit_fraction,
                "max_busy": self.max_busy,
                "backend": self.backend,
                "notes": {
                    "planner": "cascadeserve.planner (static cascade)",
                    "static_cascade": said,
                    "costs": costs_note(profile),
                },
            }
        )
        report = self.report_ or PlannerReport()
        report.feasible = True
        report.plan_accuracy = check.accuracy
        report.static_cascade = said
        report.message = said
        if arrivals is not None:
            report.trace_check = check
        self.report_ = report
        return True

    def _fit_once(
        self,
        profile: Profile,
        hardware: Sequence[Device],
        slo: SLO,
        max_qps: float,
        progress: Callable[[int, int], None] | None,
    ) -> Planner:
        t0 = time.perf_counter()
        if not hardware:
            raise InfeasibleError("no devices: give at least one")
        problem = make_problem(profile, hardware, slo, max_qps, self._options(profile), self.n_ranges, self.qps_dist)
        cycle = _Cycle(problem)
        submodules: tuple[Submodule, ...] = (sp1, sp2, sp3, sp4)
        modules = [cycle.module(sm) for sm in submodules]
        if progress is not None:
            modules = [_announce(i, m, progress) for i, m in enumerate(modules)]
        report = PlannerReport(qps_dist=problem.dist.describe(), max_iterations=self.max_iterations)
        self.report_ = report
        try:
            res = run_loop(modules, max_iterations=self.max_iterations)
        except LoopInfeasible as e:
            self._fill(report, cycle, e.result, t0)
            report.message = explain(problem, cycle.solution, e.error)
            report.warnings = memory_warnings(problem, cycle.solution, {m for m, _ in cycle.solution.placement})
            self.plan_ = None
            raise InfeasibleError(report.message) from None
        self._fill(report, cycle, res, t0)
        sol = cycle.solution
        if res.hit_cap and not sol.assign:
            report.message = f"Algorithm 1 hit its cap of {self.max_iterations} submodule calls before any plan"
            raise InfeasibleError(report.message)
        plan = build_plan(problem, sol, cycle.qps_scale())
        report.warnings = memory_warnings(problem, sol, set(plan.models()))
        if report.warnings:  # the plan file says it too, so ``plan explain`` shows it
            plan = plan.model_copy(update={"notes": {**plan.notes, "warnings": " | ".join(report.warnings)}})
        self.plan_ = plan
        report.feasible = True
        report.plan_accuracy = weighted_acc(problem, sol.fr, sol.assign)
        if res.hit_cap:
            report.message = f"Algorithm 1 hit its cap of {self.max_iterations} submodule calls; plan may be suboptimal"
        report.planner_s = time.perf_counter() - t0
        return self

    def _options(self, profile: Profile) -> Options:
        """The parameters one fit reads, frozen for its duration."""
        overhead = profile.batch_overhead_ms if self.batch_overhead_ms is None else self.batch_overhead_ms
        return Options(
            levels=self.levels,
            seed=self.seed,
            search_method=self.search_method,
            max_batch=self.max_batch,
            sim_requests=self.sim_requests,
            check_duration_s=self.check_duration_s,
            alpha=self.alpha,
            batch_overhead_ms=float(overhead),
            batch_caps=tuple(sorted((self.batch_caps or {}).items())),
            audit_fraction=self.audit_fraction,
            max_busy=self.max_busy,
            backend=self.backend,
            qps_min_arrivals=self.qps_min_arrivals,
        )

    @staticmethod
    def _fill(report: PlannerReport, cycle: _Cycle, res: LoopResult, t0: float) -> None:
        memo, frontier = cycle.problem.memo, cycle.solution.frontier
        report.iterations = res.iterations
        report.cycles = res.cycles
        report.submodule_calls = dict(zip(SUBMODULES, res.calls, strict=True))
        report.submodule_s = {k: round(v, 6) for k, v in zip(SUBMODULES, res.seconds, strict=True)}
        report.converged = res.converged
        report.hit_iteration_cap = res.hit_cap
        report.simulations = len(memo.sims)  # one entry per simulation run (see Memo)
        report.simulated_requests = memo.sim_requests
        report.lp_solves = len(memo.lp_raw)  # one entry per LP HiGHS solved (placement needs none)
        if frontier is not None:
            report.frontier_size = len(frontier)
            report.frontier_method = frontier.method
            report.frontier_evaluated = frontier.evaluated
        report.planner_s = time.perf_counter() - t0
