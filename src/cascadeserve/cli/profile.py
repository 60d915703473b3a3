"""``cascadeserve profile``: inspect a profile directory (per-model facts, the cascade frontier)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from cascadeserve.cascade import enumerate_frontier
from cascadeserve.cli.app import app, console, print_json
from cascadeserve.profile import load_profile

profile_app = typer.Typer(help="Inspect model-family profiles.", no_args_is_help=True)
app.add_typer(profile_app, name="profile")

ProfileDir = Annotated[Path, typer.Argument(help="Profile directory (profile.yaml, labels.csv, predictions/).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@profile_app.command("show")
def show(directory: ProfileDir, as_json: AsJson = False) -> None:
    """Per model: accuracy, runtime at batch 1 and 64, memory."""
    prof = load_profile(directory)
    rows = prof.summary()
    if as_json:
        print_json({"name": prof.name, "device": prof.device, "samples": prof.n_samples, "models": rows})
        return
    table = Table(title=f"{prof.name}: {prof.n_samples} validation samples ({prof.device or 'device n/a'})")
    for col in ("model", "accuracy", "ms @ b=1", "ms @ b=64", "memory MB"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(
            str(r["model"]),
            f"{r['accuracy']:.4f}",
            f"{r['runtime_ms_b1']:.3f}",
            f"{r['runtime_ms_b64']:.3f}",
            f"{r['memory_mb']:.1f}",
        )
    console.print(table)


@profile_app.command("frontier")
def frontier(
    directory: ProfileDir,
    as_json: AsJson = False,
    levels: Annotated[int, typer.Option(help="Threshold levels in [0, 1] per stage.", min=2, max=101)] = 11,
    batch_size: Annotated[float, typer.Option(help="Batch size at which work is measured.", min=1)] = 1.0,
    max_models: Annotated[int | None, typer.Option(help="Longest cascade to consider.", min=1)] = None,
) -> None:
    """The Pareto frontier of cascades: accuracy against expected device-ms per sample."""
    prof = load_profile(directory)
    pts = enumerate_frontier(
        prof, levels=np.round(np.linspace(0, 1, levels), 6), batch_size=batch_size, max_models=max_models
    )
    if as_json:
        print_json(
            {
                "name": prof.name,
                "batch_size": batch_size,
                "frontier": [
                    {"models": list(c.models), "thresholds": list(c.thresholds), "accuracy": a, "work_ms": w}
                    for c, a, w in pts
                ],
            }
        )
        return
    table = Table(title=f"{prof.name}: cascade frontier ({len(pts)} points, work at batch {batch_size:g})")
    for col in ("cascade", "accuracy", "work ms/sample"):
        table.add_column(col, justify="left" if col == "cascade" else "right")
    for c, a, w in pts:
        table.add_row(str(c), f"{a:.4f}", f"{w:.4f}")
    console.print(table)
