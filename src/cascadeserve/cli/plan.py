"""``cascadeserve plan``: make gear plans (``fixed`` is the hand-made one-gear plan for tests and baselines)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cascadeserve.cascade import Cascade
from cascadeserve.cli.app import app, console
from cascadeserve.cli.common import devices_from, parse_floats
from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import fixed_plan
from cascadeserve.profile import load_profile

plan_app = typer.Typer(help="Make and explain gear plans.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


@plan_app.command("fixed")
def fixed(
    profile: Annotated[Path, typer.Option(help="Profile directory.")],
    cascade: Annotated[str, typer.Option(help="Comma-separated models, first stage first, e.g. a,b,c.")],
    out: Annotated[Path, typer.Option(help="Where to write the plan JSON.")],
    thresholds: Annotated[str, typer.Option(help="Comma-separated thresholds, one fewer than models.")] = "",
    devices: Annotated[int, typer.Option(help="Number of devices.")] = 1,
    device_memory_mb: Annotated[float, typer.Option(help="Memory per device in MB.")] = 16000.0,
    min_queue: Annotated[int, typer.Option(help="Minimum queue length that triggers a batch.", min=1)] = 1,
    max_wait_ms: Annotated[float | None, typer.Option(help="Fire a batch once its oldest sample waited this.")] = None,
    max_batch: Annotated[int | None, typer.Option(help="Largest batch (default: the whole queue).", min=1)] = None,
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
    )
    plan.save(out)
    console.print(f"wrote {out}: {casc} on {len(plan.replicas)} replica(s) over {len(plan.devices)} device(s)")
