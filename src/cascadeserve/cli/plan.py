"""``cascadeserve plan``: run the gear planner; ``plan explain`` prints a plan file; ``plan fixed`` hand-makes one.

``cascadeserve plan --profile DIR --devices N --device-memory-mb M (--slo-p95-ms L | --slo-accuracy A) --max-qps Q --out
plan.json [--batch-overhead-ms B] [--max-busy F]`` runs Algorithm 1 with a live status line, then prints one row per
gear (QPS range, cascade, thresholds, batch triggers, predicted p95, accuracy and busiest device's busy fraction) and
the placement per device. ``--json`` prints a summary object instead (``feasible``, ``gears``, ``planner_s``, the
report). An unreachable SLO prints the reason and exits with code 2 (with ``--json``, after printing ``{"feasible":
false, ...}``). ``--batch-overhead-ms`` plans with a fixed cost per batch beyond the profiled runtime (``eval fidelity
--calibrate`` measures it; by default the profile's recorded ``batch_overhead_ms``); the plan file carries it, so
``simulate`` charges it too. Every plan caps each model's batch (the batch column shows ``model ≤cap``); ``plan fixed
--no-caps`` makes an uncapped one. ``--max-busy F`` plans with device headroom: no gear whose busiest device SP4
simulates more than ``F`` busy. ``--backend ray`` (also on ``plan fixed``) makes a plan for the Ray backend: it
records the backend, and every simulation of it charges the Ray process hops (the profile's ``ray_hop_ms``).
``--plot PNG`` (also on ``plan explain``) draws the plan as the demo's ``gear_plan.png``. Before planning it warns,
one line each on stderr, when the profile was never calibrated to a serving host and when it carries measurement notes
(unstable runtimes, a falling curve, near-zero runtimes, a busy host: :mod:`cascadeserve.profile.noise`).

The group runs the planner when no subcommand is given (``invoke_without_command``), so ``plan fixed`` and
``plan explain`` keep their own options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from cascadeserve.cascade import Cascade
from cascadeserve.cli.common import ProfileOverheadOpt, devices_from, parse_floats, slo_from
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.root import app, console, err_console, print_json
from cascadeserve.errors import CascadeServeError, InfeasibleError
from cascadeserve.plan import SLO, GearPlan, fixed_plan, load_plan
from cascadeserve.planner import SUBMODULES, Planner, PlannerReport, QpsDistribution, default_batch_caps
from cascadeserve.profile import load_profile, useful_votes, with_votes
from cascadeserve.profile.noise import plan_warnings

__all__ = ["plan_app", "plan_summary", "print_plan"]

plan_app = typer.Typer(
    help=(
        "Plan gears with the planner (give --profile, --devices, --device-memory-mb, one SLO, --max-qps, --out), "
        "or use a subcommand: explain a plan file, or make a fixed one-gear plan."
    ),
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(plan_app, name="plan")

_DEVICES_HELP = "Number of this host's devices (each upstream stage of the profile gets one more, of its own)."

PlotOpt = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="Also draw the plan into this PNG file: each distinct gear's QPS range, cascade, thresholds and batch "
        "triggers, and the predicted accuracy and p95 per range (the demo's gear_plan.png).",
    ),
]

BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        help="Where the plan will be served: local, or ray (every simulation of the plan then adds the profile's "
        "ray_hop_ms, which serve --emulate --backend ray --out DIR measures and records, per process hop).",
    ),
]


def _backend(name: str) -> Literal["local", "ray"]:
    if name == "local":
        return "local"
    if name == "ray":
        return "ray"
    raise CascadeServeError(f"--backend: {name!r} is not one of local, ray")


def _triggers(plan: GearPlan, gi: int) -> str:
    g = plan.gears[gi]
    first = g.models[0]
    mqs = [gr.min_queue for gr in g.replicas_of(first) if gr.share > 0]
    caps = {m: {gr.cap(plan.max_batch) for gr in g.replicas_of(m)} for m in g.models}
    capped = ", ".join(f"{m} ≤{max(c)}" for m, c in caps.items() if None not in c and c)  # type: ignore[type-var]
    if not mqs:
        head = "1"
    else:
        lo, hi = min(mqs), max(mqs)
        head = f"{first}: {lo}" if lo == hi else f"{first}: {lo}-{hi}"
    return f"{head}; batch {capped}" if capped else head


def plan_summary(plan: GearPlan, report: PlannerReport | None = None, out: Path | None = None) -> dict[str, Any]:
    """The JSON summary of a plan (and of the run that made it)."""
    gears = []
    for i, g in enumerate(plan.gears):
        gears.append(
            {
                "qps_low": g.qps_low,
                "qps_high": g.qps_high,
                "models": list(g.models),
                "thresholds": list(g.thresholds),
                "min_queue": {gr.id: gr.min_queue for gr in g.replicas},
                "max_batch": {gr.id: gr.cap(plan.max_batch) for gr in g.replicas},
                "shares": {gr.id: round(gr.share, 6) for gr in g.replicas},
                "triggers": _triggers(plan, i),
                "predicted_p95_ms": g.predicted_p95_ms,
                "predicted_accuracy": g.predicted_accuracy,
                "predicted_busy": g.predicted_busy,
            }
        )
    placement = {d.name: [r.model for r in plan.replicas if r.device == d.name] for d in plan.devices}
    out_obj: dict[str, Any] = {
        "feasible": True,
        "profile": plan.profile,
        "slo": None if plan.slo is None else {"kind": plan.slo.kind, "value": plan.slo.value},
        "qps_scale": plan.qps_scale,
        "batch_overhead_ms": plan.batch_overhead_ms,
        "backend": plan.backend,
        "max_busy": plan.max_busy,
        "gears": gears,
        # neighbouring gears that serve alike are one gear online (no switch): [first, last] gear index per run
        "distinct_gears": [list(run) for run in plan.gear_runs],
        "placement": placement,
        "notes": dict(plan.notes),
    }
    if report is not None:
        out_obj["planner_s"] = report.planner_s
        out_obj["plan_accuracy"] = report.plan_accuracy
        out_obj["report"] = report.to_dict()
    if out is not None:
        out_obj["out"] = str(out)
    return out_obj


def print_plan(plan: GearPlan, title: str | None = None) -> None:
    """One row per gear, then the placement per device."""
    table = Table(title=title or f"gear plan for {plan.profile} ({plan.slo or 'no SLO'})")
    for col, just in (
        ("QPS range", "right"),
        ("cascade", "left"),
        ("thresholds", "left"),
        ("batch trigger", "left"),
        ("p95 ms", "right"),
        ("accuracy", "right"),
        ("busy", "right"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for i, g in enumerate(plan.gears):
        table.add_row(
            f"{g.qps_low:,.0f}-{g.qps_high:,.0f}",
            " > ".join(g.models),
            ", ".join(f"{t:g}" for t in g.thresholds) or "-",
            _triggers(plan, i),
            "-" if g.predicted_p95_ms is None else f"{g.predicted_p95_ms:,.2f}",
            "-" if g.predicted_accuracy is None else f"{g.predicted_accuracy:.4f}",
            "-" if g.predicted_busy is None else f"{g.predicted_busy:.0%}",
        )
    console.print(table)
    place = Table(title="placement")
    place.add_column("device")
    place.add_column("memory MB", justify="right")
    place.add_column("replicas")
    for d in plan.devices:
        models = [r.model for r in plan.replicas if r.device == d.name]
        place.add_row(d.name, f"{d.memory_mb:,.0f}", ", ".join(models) or "-")
    console.print(place)
    extra = [f"qps_scale {plan.qps_scale:g}", f"alpha {plan.alpha:g}"]
    if plan.batch_overhead_ms:
        extra.append(f"batch overhead {plan.batch_overhead_ms:g} ms")
    if plan.backend == "ray":
        hop = f"{plan.hop_ms:g} ms" if plan.hop_ms else "the profile's ray_hop_ms"
        hop += f" (p95 {plan.hop_p95_ms:g} ms)" if plan.hop_ms and plan.hop_p95_ms else ""
        extra.append(f"for the Ray backend: {hop} per process hop")
    if plan.max_busy < 1:
        extra.append(f"devices at most {plan.max_busy:.0%} busy")
    if plan.audit_fraction:
        extra.append(f"sized for auditing {plan.audit_fraction:.1%} of early exits")
    extra += [f"{k}: {v}" for k, v in plan.notes.items() if k not in ("planner", "warnings")]
    console.print("; ".join(extra), highlight=False)
    runs = plan.gear_runs
    if len(runs) < len(plan.gears):  # identical neighbours serve as one gear: moving between them is no switch
        console.print(
            f"{len(runs)} distinct gear{'s' if len(runs) != 1 else ''} over {len(plan.gears)} QPS ranges: "
            + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs),
            highlight=False,
        )
    for warning in plan.notes.get("warnings", "").split(" | "):  # the planner's, e.g. models memory left out
        if warning:
            console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)


@plan_app.callback()
def plan(
    ctx: typer.Context,
    profile: Annotated[Path | None, typer.Option(help="Profile directory.")] = None,
    devices: Annotated[int | None, typer.Option(help=_DEVICES_HELP)] = None,
    device_memory_mb: Annotated[float | None, typer.Option(help="Memory per device in MB.")] = None,
    slo_p95_ms: Annotated[
        float | None, typer.Option(help="Latency SLO: p95 ≤ this many ms; maximise accuracy.")
    ] = None,
    slo_accuracy: Annotated[float | None, typer.Option(help="Accuracy SLO: at least this; minimise latency.")] = None,
    max_qps: Annotated[float | None, typer.Option(help="The highest QPS to plan for.")] = None,
    ranges: Annotated[int, typer.Option(help="Number of equal QPS ranges (gears).", min=1)] = 10,
    qps_dist: Annotated[
        str,
        typer.Option(
            help="QPS distribution: zipf (exponent 1.1), zipf:<exponent>, trace:<trace spec>, or weights:<w1,w2,...> "
            "(one per range, lowest QPS first; what serve --replan measured)."
        ),
    ] = "zipf",
    seed: Annotated[int, typer.Option(help="Random seed (cascade sampling, simulated arrivals).")] = 0,
    alpha: Annotated[float, typer.Option(help="Hysteresis factor α written into the plan.")] = 8.0,
    batch_overhead_ms: ProfileOverheadOpt = None,
    trace_rounds: Annotated[
        int,
        typer.Option(
            help="With --qps-dist trace:…, replay the plan on that trace and plan again against a retargeted "
            "internal SLO (tighter on a miss, looser on slack), at most this many times, keeping the best plan that "
            "meets the SLO on the replay (0: replay and report only).",
            min=0,
        ),
    ] = 4,
    audit_fraction: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Share of early exits that online threshold tuning will audit (serve --tune): the plan is sized for "
            "the later stages they also run, and records the share (serve --tune's default).",
        ),
    ] = 0.0,
    max_busy: Annotated[
        float,
        typer.Option(
            min=0.01,
            max=1.0,
            help="Device headroom: accept a gear only if, simulated at its range's top QPS, no device is busier than "
            "this fraction of the time (1: none). A plan whose devices are nearly always busy meets the SLO in the "
            "simulator but queues on a runtime whose per-batch cost grows with load. Re-plans keep it.",
        ),
    ] = 1.0,
    votes: Annotated[
        int,
        typer.Option(
            min=0,
            help="Vote stages the planner may use: up to this many certainty-weighted votes of the family's models "
            "that are more accurate than its best model (a vote runs its members one after the other on one "
            "device; served on the local backend with the margin certainty). 0: single models only.",
        ),
    ] = 0,
    backend: BackendOpt = "local",
    out: Annotated[Path | None, typer.Option(help="Where to write the plan JSON.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary instead of tables.")] = False,
    plot: PlotOpt = None,
    workload: WorkloadOpt = None,
) -> None:
    """Run the gear planner (when no subcommand is given)."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [
        name
        for name, v in (
            ("--profile", profile),
            ("--devices", devices),
            ("--device-memory-mb", device_memory_mb),
            ("--max-qps", max_qps),
            ("--out", out),
        )
        if v is None
    ]
    if missing and profile is None and devices is None and max_qps is None:
        console.print(ctx.get_help())
        raise typer.Exit(0)
    if missing:
        raise CascadeServeError(f"cascadeserve plan needs {', '.join(missing)}")
    assert profile is not None and devices is not None and device_memory_mb is not None
    assert max_qps is not None and out is not None
    slo = slo_from(slo_p95_ms, slo_accuracy)
    if max_qps <= 0:
        raise CascadeServeError("--max-qps must be positive")
    prof = load_profile(profile)
    for warning in plan_warnings(prof):  # before planning: they hold whatever the planner finds
        err_console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    offered = useful_votes(prof, votes)
    prof = with_votes(prof, offered)
    hw = devices_from(devices, device_memory_mb)
    planner = Planner(
        n_ranges=ranges,
        qps_dist=qps_dist,
        alpha=alpha,
        seed=seed,
        batch_overhead_ms=batch_overhead_ms,
        trace_rounds=trace_rounds,
        audit_fraction=audit_fraction,
        max_busy=max_busy,
        backend=_backend(backend),
    )
    check = QpsDistribution.parse(qps_dist).arrivals(max_qps, seed)
    status_console = err_console if as_json else console
    try:
        head = f"planning {prof.name}: {slo} up to {max_qps:,.0f} QPS on {devices} devices"
        if offered:
            head += f", with vote stage{'s' if len(offered) > 1 else ''} {', '.join(v.name for v in offered)}"
        if check is not None:  # the replays take seconds per million requests: say they are coming
            head += f", each plan replayed on {len(check):,} requests"
        with status_console.status(head) as status:

            def progress(submodule: int, calls: int) -> None:
                status.update(f"{head} · Algorithm 1 call {calls}: {SUBMODULES[submodule]}")

            planner.fit(
                prof, hw, slo, max_qps, progress=progress, check_arrivals=None if check is None else check.arrivals
            )
    except InfeasibleError:
        for warning in planner.report_.warnings if planner.report_ else []:
            err_console.print(f"warning: {warning}", highlight=False, markup=False, soft_wrap=True)
        if as_json:
            rep = planner.report_
            print_json(
                {
                    "feasible": False,
                    "message": rep.message if rep else "",
                    "planner_s": rep.planner_s if rep else None,
                    "report": rep.to_dict() if rep else None,
                }
            )
        raise
    assert planner.plan_ is not None and planner.report_ is not None
    planner.plan_.save(out)
    _draw(planner.plan_, plot)
    rep = planner.report_
    for warning in rep.warnings:  # one line each on stderr, with --json too (stdout stays one JSON object)
        err_console.print(f"warning: {warning}", highlight=False, markup=False, soft_wrap=True)
    if as_json:
        print_json({**plan_summary(planner.plan_, rep, out), **({"plot": str(plot)} if plot is not None else {})})
        return
    print_plan(planner.plan_)
    _print_run(rep, slo, out, plot)


def _print_run(rep: PlannerReport, slo: SLO, out: Path, plot: Path | None) -> None:
    """What the planner's run did, after the plan's tables: the plan file, the effort, the trace check, the figure."""
    calls = ", ".join(f"{k} {v}" for k, v in rep.submodule_calls.items())
    console.print(
        f"wrote {out} in {rep.planner_s:.2f} s: {rep.iterations} submodule calls ({calls}), "
        f"{rep.simulations} simulations, frontier of {rep.frontier_size} cascades ({rep.frontier_method}); "
        f"time-weighted accuracy {rep.plan_accuracy:.4f}" + ("" if rep.converged else f" [yellow]{rep.message}[/]"),
        highlight=False,
        soft_wrap=True,  # the path stays whole (copyable, and findable in the output) however long it is
    )
    if rep.trace_check is not None:
        style = "green" if rep.trace_check.met else "yellow"
        console.print(f"[{style}]{rep.trace_check.describe(slo)}[/]", highlight=False)
    if plot is not None:
        console.print(f"wrote {plot}", highlight=False, soft_wrap=True)


def _draw(plan: GearPlan, path: Path | None) -> None:
    if path is not None:
        from cascadeserve.eval.run_figures import plot_plan  # matplotlib only when a figure is asked for

        plot_plan(plan, path)


@plan_app.command("explain")
def explain(
    plan: Annotated[Path, typer.Option(help="Gear plan JSON.")],
    profile: Annotated[Path | None, typer.Option(help="Also check the plan against this profile.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary instead of tables.")] = False,
    plot: PlotOpt = None,
    workload: WorkloadOpt = None,
) -> None:
    """Print a plan file's gears and placement (the same tables as ``cascadeserve plan``)."""
    gear_plan = load_plan(plan, load_profile(profile) if profile is not None else None)
    _draw(gear_plan, plot)
    if as_json:
        print_json({**plan_summary(gear_plan), **({"plot": str(plot)} if plot is not None else {})})
        return
    print_plan(gear_plan, title=f"{plan}: gear plan for {gear_plan.profile} ({gear_plan.slo or 'no SLO'})")
    if plot is not None:
        console.print(f"wrote {plot}", highlight=False, soft_wrap=True)


@plan_app.command("fixed")
def fixed(
    profile: Annotated[Path, typer.Option(help="Profile directory.")],
    cascade: Annotated[str, typer.Option(help="Comma-separated models, first stage first, e.g. a,b,c.")],
    out: Annotated[Path, typer.Option(help="Where to write the plan JSON.")],
    thresholds: Annotated[str, typer.Option(help="Comma-separated thresholds, one fewer than models.")] = "",
    devices: Annotated[int, typer.Option(help=_DEVICES_HELP)] = 1,
    device_memory_mb: Annotated[float, typer.Option(help="Memory per device in MB.")] = 16000.0,
    min_queue: Annotated[int, typer.Option(help="Minimum queue length that triggers a batch.", min=1)] = 1,
    max_wait_ms: Annotated[
        float | None,
        typer.Option(
            help="Fire a batch once its oldest sample waited this many ms (default: DEFAULT_MAX_WAIT_MS, 100 ms).",
            min=0.001,
        ),
    ] = None,
    max_batch: Annotated[int | None, typer.Option(help="Largest batch (default: the whole queue).", min=1)] = None,
    caps: Annotated[
        bool,
        typer.Option(
            "--caps/--no-caps",
            help="Cap each model's batch by the planner's rule (the cheapest batch per sample up to the profile's "
            "batch limit); --no-caps takes the whole queue, up to --max-batch.",
        ),
    ] = True,
    backend: BackendOpt = "local",
    workload: WorkloadOpt = None,
) -> None:
    """A one-gear plan: every model on every device where it fits, even split, one trigger for all replicas."""
    prof = load_profile(profile)
    models = tuple(m.strip() for m in cascade.split(",") if m.strip())
    try:
        casc = Cascade(models, parse_floats(thresholds, "--thresholds"))
    except ValueError as e:
        raise CascadeServeError(f"--cascade/--thresholds: {e}") from None
    plan = fixed_plan(
        prof,
        casc,
        devices_from(devices, device_memory_mb),
        min_queue=min_queue,
        max_wait_ms=max_wait_ms,
        max_batch=max_batch,
        batch_caps=default_batch_caps(prof, None, overhead_ms=prof.batch_overhead_ms) if caps else None,
        backend=_backend(backend),
    )
    plan.save(out)
    # soft_wrap: the path stays whole however long it is (a console of 80 columns broke a long temporary path)
    console.print(
        f"wrote {out}: {casc} on {len(plan.replicas)} replica(s) over {len(plan.devices)} device(s)", soft_wrap=True
    )
