"""``cascadeserve eval fidelity``: the simulator against the real runtime (emulated devices, real HTTP)."""

from __future__ import annotations

import tempfile
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
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.eval import eval_app
from cascadeserve.cli.root import console, print_json
from cascadeserve.eval.fidelity import CALIBRATION_REQUESTS, calibrate, fidelity, mean_qps
from cascadeserve.profile import load_profile

__all__ = ["fidelity_cmd"]


@eval_app.command("fidelity")
def fidelity_cmd(
    profile: Annotated[Path, typer.Option(help="Profile directory.")],
    plan: Annotated[list[Path], typer.Option("--plan", help="Plan JSON file (repeat the option for several).")],
    trace: TraceOpt,
    trace_format: TraceFormatOpt = None,
    max_qps: MaxQpsOpt = None,
    window: WindowOpt = None,
    drop_zero: DropZeroOpt = None,
    arrival: ArrivalOpt = "poisson",
    seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    calibrate_overheads: Annotated[
        bool,
        typer.Option(
            "--calibrate/--no-calibrate",
            help="First measure the per-batch and per-request costs on a separate run (cheapest model, the trace's "
            "mean rate), and also report errors against a simulator that includes them (the calibrated_* columns).",
        ),
    ] = True,
    calibration_requests: Annotated[
        int, typer.Option(min=1, help="The calibration run lasts at least 10 s and this many requests.")
    ] = CALIBRATION_REQUESTS,
    workload: WorkloadOpt = None,
) -> None:
    """Run each plan in the simulator and on `serve --emulate` over HTTP; report p95 and accuracy errors."""
    tr = trace_options(trace, trace_format, max_qps, window, bool(drop_zero), arrival, seed).build()
    overheads = None
    if calibrate_overheads:
        with tempfile.TemporaryDirectory() as tmp:
            overheads = calibrate(
                profile, load_profile(profile), Path(tmp), mean_qps(tr.arrivals), min_requests=calibration_requests
            )
    rows = fidelity(profile, plan, tr.arrivals, overheads=overheads)
    if as_json:
        print_json(
            {
                "trace": tr.source,
                "overheads_ms": overheads.to_dict() if overheads else None,
                "plans": [r.to_dict() for r in rows],
            }
        )
        return
    table = Table(title=f"fidelity on {tr.source} ({len(tr):,} requests)")
    cols = ("plan", "sim p95 ms", "run p95 ms", "p95 err", "server p95 err", "calibrated err", "calibrated server err")
    for col in (*cols, "sim acc", "run acc", "acc err pt"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r.plan,
            f"{r.sim_p95_ms:.2f}",
            f"{r.run_p95_ms:.2f}",
            f"{r.p95_error:+.1%}",
            f"{r.server_p95_error:+.1%}",
            "-" if r.calibrated_p95_error is None else f"{r.calibrated_p95_error:+.1%}",
            "-" if r.calibrated_server_p95_error is None else f"{r.calibrated_server_p95_error:+.1%}",
            f"{r.sim_accuracy:.4f}",
            f"{r.run_accuracy:.4f}",
            f"{r.accuracy_error_points:+.2f}",
        )
    console.print(table)
    if overheads is not None:
        console.print(
            f"calibrated overheads: {overheads.batch_ms:.2f} ms per batch, {overheads.request_ms:.2f} ms per request"
        )
