"""The offline steps as functions: measure a family into a profile, calibrate it to this host, plan, simulate.

Each command of the CLI is one of these with its options parsed (``profile measure`` is :func:`measure_family`,
``profile calibrate --models`` is :func:`calibrate_here`, ``plan`` is :func:`make_plan`), and a workload's steps are
:func:`profile`, :func:`plan` and :func:`simulate`, which ``cascadeserve up`` runs: each does its work only when its
inputs changed since it last ran (the workload's state folder, :class:`~cascadeserve.workload.StateDir`), and says
what it does through ``say``::

    import cascadeserve as cs
    wl = cs.Workload.from_file("cascadeserve.yaml")
    prof = cs.profile(wl)                      # measured, then calibrated to this host (as the workload says)
    gear_plan = cs.plan(wl, prof)
    sim = cs.simulate(gear_plan, prof, trace="synthetic:poisson:qps=20,duration=10")
    print(sim.p95_ms, sim.accuracy)
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from cascadeserve.api.checks import thread_note
from cascadeserve.api.settings import batch_sizes, devices_from, slo_from
from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import SLO, Device, GearPlan, load_plan, plan_profile
from cascadeserve.profile import Profile, calibrate, load_profile, record_batch_overhead, save_profile
from cascadeserve.profile.noise import CI_TARGET, plan_warnings
from cascadeserve.workload import LoadedWorkload, StateDir

__all__ = [
    "Calibration",
    "MeasureProgress",
    "OnStep",
    "calibrate_here",
    "make_plan",
    "measure_family",
    "plan",
    "profile",
    "simulate",
    "write_calibrated",
]

Say = Callable[[str], None]
OnStep = Callable[[str, "str | None"], None]
"""Told when a workload's step (``profile``, ``calibration``, ``plan``) starts, with what it does, or is skipped as up
to date (``None``): ``cascadeserve up`` numbers its phases with it."""
MeasureProgress = Callable[[str, str, int, int], None]  # (model, step, done, total), as profile measure draws it


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- profile measure -----------------------------------------------------------------------------------------------
def measure_family(
    models: Path,
    validation: str,
    out: Path,
    *,
    batch_sizes: tuple[int, ...],
    repeats: int = 15,
    warmup: int = 2,
    threads: int | None = None,
    pause_ms: float = 0.0,
    name: str | None = None,
    resume: bool = True,
    limit: int | None = None,
    progress: MeasureProgress | None = None,
    max_repeats: int | None = None,
    ci_target: float = CI_TARGET,
    say: Say = _stderr,
) -> tuple[Profile, int]:
    """Measure the family of the models config ``models`` on ``validation`` into the profile folder ``out``
    (resumable per model; each batch size timed at least ``repeats`` times, more until its runtime is known to
    within ``ci_target``, at most ``max_repeats``), then the runtime's own per-batch overhead on this machine,
    recorded with it so plans and simulations include it by default (:mod:`cascadeserve.eval.overhead`). Says each
    of the profile's notes (unstable points, falling curves, near-zero runtimes, a busy host) as a warning. The
    profile, and how many models it measured."""
    from cascadeserve.eval.overhead import measure_batch_overhead
    from cascadeserve.models import MeasureOptions, load_models_config, load_validation, measure

    cfg = load_models_config(models)
    data = load_validation(validation, limit=limit)
    opts = MeasureOptions(
        batch_sizes=batch_sizes, repeats=repeats, warmup=warmup, threads=threads, pause_ms=pause_ms,
        max_repeats=max_repeats, ci_target=ci_target,
    )  # fmt: skip
    prof, records = measure(cfg, data, out, name=name, options=opts, progress=progress, resume=resume)
    record_batch_overhead(out, measure_batch_overhead(prof).median_ms)
    prof = load_profile(out)
    for note in prof.notes:
        say(f"warning: {note}")
    return prof, len(records)


# -- profile calibrate --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Calibration:
    """What serving measured: the factors (:class:`~cascadeserve.profile.calibration.MeasuredFactors`) and where."""

    factors: Any  # MeasuredFactors (deferred import: it loads the measuring modules)
    source: str


def calibrate_here(
    prof: Profile,
    models: Path,
    validation: str,
    *,
    devices: int = 2,
    seconds: float = 8.0,
    plan_path: Path | None = None,
    min_batches: int = 20,
    say: Say = _stderr,
) -> Calibration:
    """Serve the models of ``prof`` (every model, or the plan ``plan_path`` as planned) with the real HTTP server on
    127.0.0.1, drive it with ``validation``'s inputs for ``seconds``, and measure what its batches cost."""
    from cascadeserve.eval.hostcost import measure_host_costs
    from cascadeserve.models import load_validation
    from cascadeserve.profile.calibration import MeasuredFactors
    from cascadeserve.runtime import load_model_config

    config = load_model_config(models)
    missing = sorted(set(prof.model_names) - set(config.models))
    if missing:
        raise CascadeServeError(f"--models: {models} lacks model(s) {', '.join(missing)} of the profile")
    # the rows the profile was measured on (profile measure --limit N takes the first N): what a batch costs follows
    # its prompts' lengths, and the factors compare against the profile's batches
    data = load_validation(validation, limit=len(prof.sample_ids))
    gear_plan = None if plan_path is None else load_plan(plan_path, prof)
    n = devices if gear_plan is None else len(gear_plan.devices)
    warning = thread_note(models, n)
    if warning is not None:
        say(warning)
    if gear_plan is None:
        say(f"serving {len(prof.model_names)} models on {devices} devices for {seconds:g} s ...")
    else:
        say(f"serving {plan_path} up to {gear_plan.max_qps:g} QPS for {seconds:g} s ...")
    rows = np.asarray(data.inputs, dtype=object if isinstance(data.inputs, list) else None)
    costs = measure_host_costs(
        prof, config, rows, devices=devices, seconds=seconds, plan=gear_plan,
        min_batches=1 if gear_plan is None else min_batches,
    )  # fmt: skip
    if not costs.factors:
        if gear_plan is not None:
            raise CascadeServeError(f"--plan: no model of {plan_path} ran {min_batches} batches (--min-batches)")
        raise CascadeServeError("no batch finished while measuring: is the server able to run the models?")
    notes = [
        f"model {m!r}: fewer than --min-batches {min_batches} batches served as planned: unchanged"
        for m in prof.model_names
        if gear_plan is not None and m not in costs.factors
    ]
    got = MeasuredFactors(costs.factors, costs.busy, costs.sizes, notes, costs.spread)
    what = "" if plan_path is None else f"{plan_path.name} as planned: "
    return Calibration(got, f"this host under serving conditions ({what}{costs.describe()}, {_now()})")


def write_calibrated(
    prof: Profile,
    measured: Calibration,
    out: Path,
    *,
    hop: tuple[float, float] | None = None,
    front_door: tuple[float, float] | None = None,
    say: Say = _stderr,
) -> Profile:
    """Write ``prof`` with its runtimes scaled by what was measured into the new profile folder ``out``."""
    got = measured.factors
    # on Ray the hop as serving saw it replaces the start-up run's (one second of other conditions)
    new = calibrate(
        prof, got.factors, source=measured.source, busy=got.busy, hop=hop, front_door=front_door, sizes=got.sizes,
        spread=got.spread,
    )  # fmt: skip
    save_profile(new, out)
    for n in got.notes:
        say(n)
    return new


# -- plan ---------------------------------------------------------------------------------------------------------
def make_plan(
    prof: Profile,
    devices: tuple[Device, ...],
    slo: SLO,
    max_qps: float,
    *,
    ranges: int = 10,
    qps_dist: str = "zipf",
    seed: int = 0,
    alpha: float = 8.0,
    batch_overhead_ms: float | None = None,
    trace_rounds: int = 4,
    audit_fraction: float = 0.0,
    max_busy: float = 1.0,
    votes: int = 0,
    backend: str = "local",
    progress: Callable[[int, int], None] | None = None,
    say: Say = _stderr,
) -> Any:
    """Fit the gear planner: ``Planner`` after :meth:`~cascadeserve.planner.Planner.fit` (``plan_`` and ``report_``
    set; :class:`~cascadeserve.errors.InfeasibleError` when no plan meets ``slo``, ``report_`` saying why). First
    says, one line each, when ``prof`` was never calibrated to a serving host and when it carries measurement notes
    (:func:`~cascadeserve.profile.noise.plan_warnings`)."""
    from cascadeserve.planner import Planner, QpsDistribution
    from cascadeserve.profile import useful_votes, with_votes

    if max_qps <= 0:
        raise CascadeServeError("--max-qps must be positive")
    if backend not in ("local", "ray"):
        raise CascadeServeError(f"--backend: {backend!r} is not one of local, ray")
    kind: Literal["local", "ray"] = "ray" if backend == "ray" else "local"
    for warning in plan_warnings(prof):
        say(f"warning: {warning}")
    prof = with_votes(prof, useful_votes(prof, votes))
    planner = Planner(
        n_ranges=ranges, qps_dist=qps_dist, alpha=alpha, seed=seed, batch_overhead_ms=batch_overhead_ms,
        trace_rounds=trace_rounds, audit_fraction=audit_fraction, max_busy=max_busy, backend=kind,
    )  # fmt: skip
    check = QpsDistribution.parse(qps_dist).arrivals(max_qps, seed)
    planner.fit(
        prof, devices, slo, max_qps, progress=progress, check_arrivals=None if check is None else check.arrivals
    )
    return planner


# -- a workload's steps -------------------------------------------------------------------------------------------
def _announce(say: Say) -> OnStep:
    """The default ``on_step``: a starting step's line through ``say``; a step up to date is silent."""

    def on_step(_step: str, what: str | None) -> None:
        if what is not None:
            say(what)

    return on_step


def profile(
    workload: LoadedWorkload,
    *,
    state_dir: Path | None = None,
    say: Say = _stderr,
    on_step: OnStep | None = None,
    progress: MeasureProgress | None = None,
) -> Profile:
    """The profile ``workload``'s plans are made from: its family measured (unless the measured profile is up to
    date with the models, the validation data and the options; when only some models changed, their files or their
    config entries, only those are measured again: :meth:`~cascadeserve.workload.StateDir.stale_models`), then
    calibrated to this host by serving it (unless the workload turns calibration off, or it is up to date).
    ``state_dir``: where the profiles, plan and hashes live (default: ``.cascadeserve/`` beside the workload file).
    ``progress(model, step, done, total)`` follows the measuring; a model kept from before reports step ``skip``."""
    state = StateDir.of(workload, state_dir)
    step = on_step or _announce(say)
    spec = workload.spec
    models = state.models_config()
    if state.up_to_date("profile"):
        step("profile", None)
    else:
        stale = state.stale_models()
        if stale is None:
            step("profile", f"profiling {spec.name} into {state.measured}")
            shutil.rmtree(state.measured, ignore_errors=True)  # ours: measured again in full
        else:
            changed = f"{', '.join(stale)} changed" if stale else "no model changed"
            step("profile", f"profiling {spec.name} again into {state.measured}: {changed}, the other models are kept")
            _forget(state.measured, stale)
        p = spec.profile
        measure_family(
            models, workload.validation(), state.measured, batch_sizes=batch_sizes(p.batch_sizes), repeats=p.repeats,
            warmup=p.warmup, threads=p.threads, name=spec.name, limit=p.limit, progress=progress, say=say,
        )  # fmt: skip
        state.record("profile")
    if state.calibrating and state.up_to_date("calibration"):
        step("calibration", None)
    elif state.calibrating:
        seconds, n = spec.profile.calibrate_s, spec.devices.count
        step("calibration", f"calibrating to this host: the models served on {n} device(s) for {seconds:g} s")
        measured = load_profile(state.measured)
        shutil.rmtree(state.profile, ignore_errors=True)
        got = calibrate_here(measured, models, workload.validation(), devices=n, seconds=seconds, say=say)
        new = write_calibrated(measured, got, state.profile, say=say)
        say(f"wrote {state.profile}: {new.calibration}")
        state.record("calibration")
    return load_profile(state.profile)


def _forget(measured: Path, names: list[str]) -> None:
    """Drop what ``measured`` recorded about ``names``, so that measuring it resumes with every other model and
    measures these again (their files changed; the profiler's own fingerprint sees only their config entry)."""
    from cascadeserve.models.records import MEASURED_DIR

    for name in names:
        (measured / MEASURED_DIR / f"{name}.json").unlink(missing_ok=True)


def plan(
    workload: LoadedWorkload,
    prof: Profile | None = None,
    *,
    state_dir: Path | None = None,
    say: Say = _stderr,
    on_step: OnStep | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GearPlan:
    """The gear plan for ``workload``: made from ``prof`` (default: the workload's profile) for its SLO, devices
    and load, unless the plan in its state folder is up to date with them; saved there. ``progress(submodule,
    calls)`` follows the planner's Algorithm 1."""
    state = StateDir.of(workload, state_dir)
    step = on_step or _announce(say)
    if state.up_to_date("plan"):
        step("plan", None)
        return load_plan(state.plan)
    spec = workload.spec
    if prof is None:
        prof = load_profile(state.profile)
    from cascadeserve.workload.values import workload_values

    v = workload_values(state)
    step("plan", f"planning {spec.slo} on {spec.devices.count} device(s) into {state.plan}")
    devices = devices_from(spec.devices.count, spec.devices.memory_mb, spec.devices.kind)
    qps_dist = v.get("qps_dist") or "zipf"
    p = spec.plan
    planner = make_plan(
        prof, devices, slo_from(spec.slo.p95_ms, spec.slo.accuracy), float(v["max_qps"]), ranges=p.ranges,
        qps_dist=qps_dist, seed=p.seed, max_busy=p.max_busy, votes=p.votes, progress=progress, say=say,
    )  # fmt: skip
    for warning in planner.report_.warnings:
        say(f"warning: {warning}")
    gear_plan: GearPlan = planner.plan_
    state.root.mkdir(parents=True, exist_ok=True)
    gear_plan.save(state.plan)
    state.record("plan")
    return gear_plan


def simulate(gear_plan: GearPlan, prof: Profile, *, trace: str, max_qps: float | None = None, seed: int = 0) -> Any:
    """Replay ``trace`` (a trace spec: ``synthetic:poisson:qps=20,duration=10``, a file) on ``gear_plan`` in the
    simulator: the :class:`~cascadeserve.simulate.SimulationResult` (``p95_ms``, ``accuracy``, ``summary()``)."""
    from cascadeserve.simulate import simulate as run_simulation
    from cascadeserve.traces import build_trace

    prof = plan_profile(prof, gear_plan)
    if not gear_plan.batch_overhead_ms and prof.batch_overhead_ms:  # as simulate does: the profile's overhead
        gear_plan = gear_plan.model_copy(update={"batch_overhead_ms": prof.batch_overhead_ms})
    arrivals = build_trace(trace, max_qps=max_qps, seed=seed).arrivals
    return run_simulation(prof, gear_plan, arrivals)
