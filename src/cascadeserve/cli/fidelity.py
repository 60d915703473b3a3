"""``cascadeserve eval fidelity``: the simulator against the real runtime (emulated devices, real HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cascadeserve.cli.app import console, print_json
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
from cascadeserve.cli.eval import eval_app
from cascadeserve.http.fidelity import fidelity


@eval_app.command("fidelity")
def fidelity_cmd(
    profile: Annotated[Path, typer.Option(help="Profile directory.")],
    plans: Annotated[list[Path], typer.Option("--plans", help="Plan JSON files (repeat the option).")],
    trace: TraceOpt,
    trace_format: TraceFormatOpt = None,
    max_qps: MaxQpsOpt = None,
    window: WindowOpt = None,
    drop_zero: DropZeroOpt = False,
    arrival: ArrivalOpt = "poisson",
    seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run each plan in the simulator and on `serve --emulate` over HTTP; report p95 and accuracy errors."""
    tr = trace_options(trace, trace_format, max_qps, window, drop_zero, arrival, seed).build()
    rows = fidelity(profile, plans, tr.arrivals)
    if as_json:
        print_json({"trace": tr.source, "plans": [r.to_dict() for r in rows]})
        return
    table = Table(title=f"fidelity on {tr.source} ({len(tr):,} requests)")
    for col in ("plan", "sim p95 ms", "run p95 ms", "p95 err", "server p95 err", "sim acc", "run acc", "acc err pt"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r.plan,
            f"{r.sim_p95_ms:.2f}",
            f"{r.run_p95_ms:.2f}",
            f"{r.p95_error:+.1%}",
            f"{r.server_p95_error:+.1%}",
            f"{r.sim_accuracy:.4f}",
            f"{r.run_accuracy:.4f}",
            f"{r.accuracy_error_points:+.2f}",
        )
    console.print(table)
