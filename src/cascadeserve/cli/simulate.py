"""``cascadeserve simulate``: replay a trace against a gear plan in the event simulator.

Every batch is charged the plan's ``batch_overhead_ms``; a plan that carries none is charged the profile's recorded
one (``profile measure`` and ``serve --emulate --out DIR`` record the runtime's measured per-batch cost), so that
without any flag the simulation predicts what ``serve`` of the plan does. ``--batch-overhead-ms`` overrides both. A
plan made for Ray (``plan --backend ray``) also pays its process hops: the plan's ``hop_ms``, else the profile's
``ray_hop_ms`` (which ``serve --emulate --backend ray --out DIR`` records; :mod:`cascadeserve.simulate.hops`).

``--replan`` and ``--qps-scaling`` simulate ``serve``'s load-drift options (:mod:`cascadeserve.simulate.replan`):
the same scaling and drift decisions per tick, a re-plan taking ``--replan-delay-s`` of simulated time. With
``--tune`` as well, each plan in force runs its own online threshold tuning (a swapped-in plan starts from its planned
thresholds), as ``serve --tune --replan`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from cascadeserve.api.settings import drift_settings_from
from cascadeserve.cli.common import (
    ArrivalOpt,
    AuditFractionOpt,
    DropZeroOpt,
    MaxQpsOpt,
    QpsScalingOpt,
    ReplanCooldownOpt,
    ReplanMinOpt,
    ReplanOpt,
    ReplanThresholdOpt,
    ReplanWindowOpt,
    SeedOpt,
    TraceFormatOpt,
    TraceOpt,
    TuneBudgetOpt,
    TuneReferenceOpt,
    TuneTargetOpt,
    WindowOpt,
    trace_options,
)
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.root import app, console, print_json
from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import GearPlan, load_plan, plan_profile
from cascadeserve.planner.replan import replan
from cascadeserve.policy import PlanTables
from cascadeserve.policy.tuning import OnlineTuning
from cascadeserve.profile import Profile, load_profile
from cascadeserve.simulate import simulate as run_simulation
from cascadeserve.simulate.hops import hop_costs
from cascadeserve.simulate.replan import simulate_replanning
from cascadeserve.traces import Trace

__all__ = ["read_sample_order", "simulate"]


@app.command("simulate")
def simulate(
    profile: Annotated[Path, typer.Option(help="Profile directory.")],
    plan: Annotated[Path, typer.Option(help="Gear plan JSON.")],
    trace: TraceOpt,
    trace_format: TraceFormatOpt = None,
    max_qps: MaxQpsOpt = None,
    window: WindowOpt = None,
    drop_zero: DropZeroOpt = None,
    arrival: ArrivalOpt = "poisson",
    seed: SeedOpt = 0,
    batch_overhead_ms: Annotated[
        float | None,
        typer.Option(
            "--batch-overhead-ms",
            min=0.0,
            help="Per-batch cost to charge (default: the plan's; when the plan carries none, the profile's recorded "
            "batch_overhead_ms).",
        ),
    ] = None,
    sample_order: Annotated[
        Path | None,
        typer.Option(
            help="File of validation sample ids, one per line: the order in which arriving requests take samples, "
            "cycling (default: the profile's order). Replays a drift stream."
        ),
    ] = None,
    tune: Annotated[
        bool, typer.Option("--tune", help="Online threshold tuning (audit sampling + Apparate hill climbing).")
    ] = False,
    tune_target: TuneTargetOpt = None,
    tune_budget: TuneBudgetOpt = 0.01,
    audit_fraction: AuditFractionOpt = None,
    tune_reference: TuneReferenceOpt = "audit",
    replan: ReplanOpt = "off",
    replan_threshold: ReplanThresholdOpt = 0.25,
    replan_window_s: ReplanWindowOpt = 3600.0,
    replan_min_s: ReplanMinOpt = 300.0,
    replan_cooldown_s: ReplanCooldownOpt = 600.0,
    replan_delay_s: Annotated[
        float, typer.Option(min=0.0, help="With --replan: simulated seconds a re-plan takes (serve's child process).")
    ] = 5.0,
    qps_scaling: QpsScalingOpt = "off",
    trace_tokens: Annotated[
        bool,
        typer.Option(
            "--trace-tokens",
            help="Price each request of an LLM stage by the trace's own prompt and output tokens (a timestamps CSV "
            "with ContextTokens and GeneratedTokens columns, as the Azure LLM inference trace has) instead of "
            "its validation sample's; it is still answered as its sample is.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    workload: WorkloadOpt = None,
) -> None:
    """Simulate the plan on the trace and print latency percentiles, accuracy and gear switches."""
    prof = load_profile(profile)
    gear_plan = load_plan(plan, prof)
    prof = plan_profile(prof, gear_plan)
    if batch_overhead_ms is not None:
        gear_plan = gear_plan.model_copy(update={"batch_overhead_ms": batch_overhead_ms})
    elif not gear_plan.batch_overhead_ms and prof.batch_overhead_ms:
        # the plan predates the profile's measured overhead (e.g. recorded by ``serve --emulate``): charge it
        gear_plan = gear_plan.model_copy(update={"batch_overhead_ms": prof.batch_overhead_ms})
    if tune_reference not in ("audit", "label"):
        raise CascadeServeError(f"--tune-reference {tune_reference!r}: use audit or label")
    if audit_fraction is None:
        audit_fraction = gear_plan.audit_fraction or 0.02
    if not audit_fraction > 0:
        raise CascadeServeError("--audit-fraction must be above 0")
    tr = trace_options(trace, trace_format, max_qps, window, bool(drop_zero), arrival, seed).build()
    samples = None
    if sample_order is not None:
        order = read_sample_order(sample_order, prof)
        samples = order[np.arange(len(tr.arrivals)) % len(order)]
    if trace_tokens:
        prof, samples = _with_trace_tokens(prof, tr, samples)

    def tuning_for(p: GearPlan) -> OnlineTuning:
        """A fresh tuner for the plan ``p`` (one per plan in force, as ``serve --tune --replan`` builds them)."""
        tables = PlanTables(p, {m: prof.index(m) for m in prof.model_names})
        return OnlineTuning.for_plan(
            tables, prof, target=tune_target, budget=tune_budget, audit_fraction=audit_fraction,
            reference=tune_reference,
        )  # fmt: skip

    drift = drift_settings_from(
        replan,
        qps_scaling,
        gear_plan,
        threshold=replan_threshold,
        window_s=replan_window_s,
        min_s=replan_min_s,
        cooldown_s=replan_cooldown_s,
    )
    replanned: dict[str, object] | None = None
    if drift is not None:
        run = simulate_replanning(
            prof, gear_plan, tr.arrivals, settings=drift, samples=samples, delay_s=replan_delay_s,
            replanner=lambda weights, current: _replan_or_none(prof, current, weights),
            tuning_for=tuning_for if tune else None,
        )  # fmt: skip
        res = run.result
        replanned = {
            "swap_times_s": run.swap_times,
            "replans": [
                {"started_s": e.started, "finished_s": e.finished, "ks_distance": e.drift.distance,
                 "measured": list(e.drift.measured), "verdict": None if e.verdict is None else e.verdict.action,
                 "reason": "the planner failed" if e.verdict is None else e.verdict.reason}
                for e in run.events
            ],
            "qps_scale_last": float(run.tick_scale[-1]) if len(run.tick_scale) else 1.0,
        }  # fmt: skip
    else:
        tuning = tuning_for(gear_plan) if tune else None
        res = run_simulation(prof, gear_plan, tr.arrivals, samples=samples, tuning=tuning)
    hop_ms, hop_p95_ms = hop_costs(prof, gear_plan)  # what the run charged
    summary = {
        "trace": tr.source,
        "batch_overhead_ms": gear_plan.batch_overhead_ms,
        "backend": gear_plan.backend,
        "hop_ms": hop_ms,
        "hop_p95_ms": hop_p95_ms,
        "tokens": "the trace's" if trace_tokens else "each request's validation sample's",
        **res.summary(),
        # which engine ran, and why the reference did when it did (the same trajectory either way)
        "engine": res.engine if not res.engine_note else f"{res.engine} ({res.engine_note})",
    }
    if replanned is not None:
        summary["replan"] = replanned
    if tune:
        summary["threshold_changes"] = [
            {"at_s": d.at, "gear": d.gear, "old": list(d.old), "new": list(d.new), "reason": d.reason,
             "window_accuracy": d.window_accuracy, "accuracy": d.accuracy, "work_ms": d.work_ms}
            for d in res.threshold_changes
        ]  # fmt: skip
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"simulated {len(tr):,} requests over {tr.duration_s:g} s")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in (
        "requests",
        "completed",
        "unanswered",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "accuracy",
        "throughput_qps",
        "gear_switches",
        "wall_s",
    ):
        v = summary[key]
        table.add_row(key, f"{v:,.3f}" if isinstance(v, float) else f"{v:,}")
    table.add_row("engine", summary["engine"])
    if tune:
        table.add_row("threshold_changes", f"{len(res.threshold_changes):,}")
    if replanned is not None:
        table.add_row("plan swaps at (s)", ", ".join(f"{t:g}" for t in run.swap_times) or "none")
    console.print(table)


def _replan_or_none(profile: Profile, plan: GearPlan, weights: np.ndarray) -> GearPlan | None:
    """The re-planned plan, or ``None`` when the planner fails (as a server logs a failed re-plan and goes on)."""
    try:
        return replan(profile, plan, weights)
    except CascadeServeError:
        return None


def read_sample_order(path: Path, profile: Profile) -> np.ndarray:
    """The profile columns named by a file of sample ids, one per line (blank lines and ``#`` comments skipped)."""
    col = {int(s): i for i, s in enumerate(profile.sample_ids)}
    out: list[int] = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CascadeServeError(f"--sample-order {path}: cannot read it ({e})") from e
    for n, line in enumerate(text.splitlines(), 1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        try:
            out.append(col[int(item)])
        except (ValueError, KeyError):
            raise CascadeServeError(f"{path}:{n}: {item!r} is not a sample id of profile {profile.name!r}") from None
    if not out:
        raise CascadeServeError(f"--sample-order {path}: no sample ids")
    return np.asarray(out, dtype=np.int64)


def _with_trace_tokens(prof: Profile, tr: Trace, samples: np.ndarray | None) -> tuple[Profile, np.ndarray]:
    """``--trace-tokens``: one profile sample per request, priced by the trace's tokens (answered as the request's
    validation sample), and the requests' order over it."""
    if tr.tokens is None:
        raise CascadeServeError(
            f"--trace-tokens: the trace {tr.source} has no token counts (a timestamps CSV with ContextTokens and "
            "GeneratedTokens columns, or prompt_tokens and output_tokens)"
        )
    if not any(m.tokens is not None for m in prof.models):
        raise CascadeServeError(
            f"--trace-tokens: profile {prof.name!r} has no token costs (llm/costs.json and llm/tokens/, which "
            "profile measure writes for LLM stages)"
        )
    n = len(tr.arrivals)
    picks = samples if samples is not None else np.arange(n) % prof.n_samples
    return prof.with_request_tokens(picks, tr.tokens), np.arange(n)
