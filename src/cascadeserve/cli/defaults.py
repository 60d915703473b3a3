"""``--workload FILE`` on every command that takes a workload's values: the file's values become the command's
defaults, and flags given on the command line win.

The option is eager: click handles it before the other options and, through the context's ``default_map``, each
option the command line leaves out takes the workload's value (``Context.lookup_default``), which click converts
and checks as if it had been typed. One table, :func:`workload_values`, maps a workload to option names; since every
concept has one spelling across commands (:mod:`cascadeserve.cli.spelling`), each command takes the subset it has.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from cascadeserve.workload import StateDir, load_workload
from cascadeserve.workload.values import workload_values

__all__ = ["WorkloadOpt", "from_workload", "workload_values"]

# commands that write the workload's own state with --workload (the rest write only where --out says)
_OUT = {"profile measure": "measured_profile", "profile calibrate": "profile", "plan": "plan"}
# options a command must not take from the workload (bench: --profile is for emulated servers, --validation for
# real ones, and the workload's server serves real models; profile calibrate measures here unless --url is given, and
# serves every model unless --plan is given: the workload's plan is made from what calibration writes)
_SKIP = {"bench": {"profile"}, "eval planner-time": {"repeats", "ranges"}, "profile calibrate": {"url", "plan"}}


def _command_path(ctx: typer.Context) -> str:
    names = []
    c: Any = ctx
    while c is not None and c.parent is not None:
        names.append(c.info_name)
        c = c.parent
    return " ".join(reversed(names))


def _apply(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """The eager callback of ``--workload``: the workload's values as the command's defaults."""
    if value is None or ctx.resilient_parsing:
        return value
    workload = load_workload(value)
    workload.add_pythonpath()
    state = StateDir.of(workload)
    values = workload_values(state)
    name = _command_path(ctx)
    values.pop("out", None)
    if name in _OUT:
        values["out"] = values[_OUT[name]]
    if name == "profile calibrate":  # it scales the measured profile into the one plans use
        values["profile"] = values["measured_profile"]
        if state.calibrating:
            values["duration_s"] = state.workload.spec.profile.calibrate_s
    names = {p.name for p in ctx.command.params} - _SKIP.get(name, set()) - {"workload"}
    multiple = {p.name for p in ctx.command.params if getattr(p, "multiple", False)}
    found: dict[str, Any] = {k: ([v] if k in multiple else v) for k, v in values.items() if k in names}
    if "trace" in names and "max_qps" in found:
        found["max_qps"] = _peak_for_the_workloads_trace(ctx, found["max_qps"])
    ctx.default_map = {**(ctx.default_map or {}), **found}
    return value


def _peak_for_the_workloads_trace(ctx: typer.Context, peak: float) -> Callable[[], float | None]:
    """A command that replays a trace scales it to the workload's ``max_qps`` only when the trace is the
    workload's too: a trace given on the command line keeps its own rate. (Click asks for the default after it has
    read ``--trace``, which every such command declares first.)"""

    def default() -> float | None:
        return peak if from_workload(ctx, "trace") else None

    return default


def from_workload(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` took its value from ``--workload`` rather than the command line."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "DEFAULT_MAP"


WorkloadOpt = Annotated[
    Path | None,
    typer.Option(
        "--workload",
        is_eager=True,
        callback=_apply,
        help="Workload file (cascadeserve.yaml) whose values are this command's defaults; flags given win.",
        show_default=False,
    ),
]
