"""``cascadeserve simulate``: replay a trace against a gear plan in the event simulator.

Every batch is charged the plan's ``batch_overhead_ms``; a plan that carries none is charged the profile's recorded
one (``profile measure`` and ``serve --emulate`` record the runtime's measured per-batch cost), so that without any
flag the simulation predicts what ``serve`` of the plan does. ``--batch-overhead-ms`` overrides both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cascadeserve.cli.common import (
    ArrivalOpt,
    DropZeroOpt,
    MaxQpsOpt,
    SeedOpt,
    TraceFormatOpt,
    TraceOpt,
    WindowOpt,
    trace_options,
)
from cascadeserve.cli.root import app, console, print_json
from cascadeserve.plan import load_plan
from cascadeserve.profile import load_profile
from cascadeserve.simulate import simulate as run_simulation

__all__ = ["simulate"]


@app.command("simulate")
def simulate(
    profile: Annotated[Path, typer.Option(help="Profile directory.")],
    plan: Annotated[Path, typer.Option(help="Gear plan JSON.")],
    trace: TraceOpt,
    trace_format: TraceFormatOpt = None,
    max_qps: MaxQpsOpt = None,
    window: WindowOpt = None,
    drop_zero: DropZeroOpt = False,
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
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Simulate the plan on the trace and print latency percentiles, accuracy and gear switches."""
    prof = load_profile(profile)
    gear_plan = load_plan(plan, prof)
    if batch_overhead_ms is not None:
        gear_plan = gear_plan.model_copy(update={"batch_overhead_ms": batch_overhead_ms})
    elif not gear_plan.batch_overhead_ms and prof.batch_overhead_ms:
        # the plan predates the profile's measured overhead (e.g. recorded by ``serve --emulate``): charge it
        gear_plan = gear_plan.model_copy(update={"batch_overhead_ms": prof.batch_overhead_ms})
    tr = trace_options(trace, trace_format, max_qps, window, drop_zero, arrival, seed).build()
    res = run_simulation(prof, gear_plan, tr.arrivals)
    summary = {"trace": tr.source, "batch_overhead_ms": gear_plan.batch_overhead_ms, **res.summary()}
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
    console.print(table)
