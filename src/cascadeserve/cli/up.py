"""``cascadeserve up``, ``cascadeserve init`` and ``cascadeserve workload``: a workload file from start to serving.

``up [FILE]`` reads a workload (:mod:`cascadeserve.workload`) and runs, as the individual commands with
``--workload`` would, ``profile measure`` when the profile is missing or stale, ``profile calibrate`` (the models
served on this host for ``profile.calibrate_s`` seconds, unless 0) when the measured profile changed, ``plan`` when
the plan is stale, then ``serve``; the profiles, plan and hashes live in ``.cascadeserve/`` beside the file
(``--state-dir``). Once the server listens it prints the endpoint and a ``curl`` line that sends the first validation
input; on a terminal, a status line below says the load, the gear, the served p95 over the SLO window against the SLO,
and the requests shed, refreshed each second. ``init [DIR]`` writes a commented example workload; ``workload schema``
prints the JSON schema and ``workload check`` validates a file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from cascadeserve.api import steps
from cascadeserve.api.config import ServeConfig
from cascadeserve.api.serving import Serving
from cascadeserve.api.serving import serve as serve_config
from cascadeserve.api.settings import batch_sizes
from cascadeserve.cli.plan import print_plan
from cascadeserve.cli.profile import measure_progress
from cascadeserve.cli.root import app, console, err_console, print_json
from cascadeserve.planner import SUBMODULES
from cascadeserve.runtime.events import ServingStatus
from cascadeserve.workload import DEFAULT_FILE, LoadedWorkload, StateDir, load_workload, workload_json_schema
from cascadeserve.workload.paths import check_workload_paths

__all__ = ["LiveStatus", "init", "serve_with_status", "status_line", "up", "workload_app"]

workload_app = typer.Typer(help="The workload file: its JSON schema, or check a file.", no_args_is_help=True)
app.add_typer(workload_app, name="workload")

FileArg = Annotated[Path, typer.Argument(help=f"Workload file, or the folder holding {DEFAULT_FILE}.")]


@app.command("up")
def up(
    file: FileArg = Path(DEFAULT_FILE),
    state_dir: Annotated[
        Path | None, typer.Option(help="Where the profile, plan and hashes go (default: .cascadeserve/ beside FILE).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to bind (default: the workload's serve.host).")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port (default: the workload's serve.port; 0: any).")] = None,
    serve: Annotated[
        bool, typer.Option("--serve/--no-serve", help="Serve after profiling and planning (--no-serve: stop there).")
    ] = True,
) -> None:
    """Profile (if missing or stale), calibrate to this host and plan (if stale), and serve a workload; Ctrl-C stops
    the server."""
    workload = load_workload(file)
    check_workload_paths(workload)  # a missing file or a GPU this host lacks: said now, not after a profile
    workload.add_pythonpath()
    state = StateDir.of(workload, state_dir)
    total = 4 if state.calibrating else 3  # the phases: profile, calibrate (unless off), plan, serve
    order = ("profile", "calibration", "plan") if state.calibrating else ("profile", "plan")
    skipped: list[str] = []

    def on_step(step: str, what: str | None) -> None:
        if what is None:
            skipped.append(f"{step} up to date")
        else:
            _phase(order.index(step) + 1, total, what)

    with measure_progress(batch_sizes(workload.spec.profile.batch_sizes)) as progress:
        prof = steps.profile(workload, state_dir=state.root, say=_say, on_step=on_step, progress=progress)
    with console.status("planning") as status:

        def planning(submodule: int, calls: int) -> None:
            status.update(f"planning · Algorithm 1 call {calls}: {SUBMODULES[submodule]}")

        gear_plan = steps.plan(workload, prof, state_dir=state.root, say=_say, on_step=on_step, progress=planning)
    if "plan up to date" not in skipped:
        print_plan(gear_plan)
    if skipped:
        console.print(", ".join(skipped), highlight=False)
    if not serve:
        return
    _phase(total, total, "serving (Ctrl-C stops)")
    overrides = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    config = ServeConfig.for_workload(workload, workload_state_dir=state.root, **overrides)
    serve_with_status(config, lambda url: _print_endpoint(workload, state, url))


def serve_with_status(config: ServeConfig, on_listening: Callable[[str], None]) -> None:
    """Serve ``config``; on a terminal, with a status line refreshed each second below what the server says (not when
    stdout or stderr is a file or a pipe: logs stay clean). The line is drawn on stderr's console, where the server's
    lines go, so that each of them prints above it."""
    status = LiveStatus(err_console) if console.is_terminal and err_console.is_terminal else None
    try:
        serve_config(config, say=_say, on_listening=on_listening, on_serving=None if status is None else status.start)
    finally:
        if status is not None:
            status.stop()


def status_line(st: ServingStatus | None) -> Text:
    """One line: the load, the gear, the served p95 over the window against the SLO, and the requests shed."""
    if st is None:
        return Text("starting", style="dim")
    line = Text()
    line.append("serving: ", style="bold")
    line.append(f"{st.qps:.1f} QPS · gear {st.gear} of {st.gears} · ")
    p95 = "p95 -" if st.p95_ms is None else f"p95 {st.p95_ms:.1f} ms"
    slo = "" if st.slo_ms is None else f" (SLO {st.slo_ms:g} ms)"
    line.append(f"{p95} over {st.window_s:g} s{slo}", style="bold red" if st.slo_missed else "")
    line.append(" · ")
    line.append(f"shed {st.shed}" + (" (shedding)" if st.shedding else ""), style="bold red" if st.shedding else "")
    return line


class LiveStatus:
    """:func:`status_line` of a running server, refreshed each second at the bottom of ``out`` (a terminal)."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self.live: Live | None = None

    def start(self, serving: Serving) -> None:
        events = serving.app.events
        if events is None or self.live is not None:
            return
        self.live = Live(
            get_renderable=lambda: status_line(events.status()),
            console=self.out,
            refresh_per_second=1,
            transient=True,
        )
        self.live.start()

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _phase(n: int, total: int, what: str) -> None:
    console.print(f"[bold]\\[{n}/{total}][/] {what}", highlight=False, soft_wrap=True)


def _say(line: str) -> None:
    err_console.print(line, highlight=False, markup=False, soft_wrap=True)


def _print_endpoint(workload: LoadedWorkload, state: StateDir, url: str) -> None:
    """The endpoint and a ``curl`` line that sends the first validation input."""
    name = workload.spec.name
    endpoint = f"{url}/v2/models/{name}/infer"
    console.print(f"endpoint: {endpoint}", highlight=False, soft_wrap=True)
    body = json.dumps(first_request(workload, state))
    auth = workload.spec.serve.auth_token_env
    header = f' -H "authorization: Bearer ${auth}"' if auth else ""
    console.print(
        f"try: curl -s {endpoint} -H 'content-type: application/json'{header} -d {shlex.quote(body)}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


def first_request(workload: LoadedWorkload, state: StateDir | None = None) -> dict[str, Any]:
    """A V2 inference request with the workload's first validation input (what ``up``'s curl line sends)."""
    from cascadeserve.models import load_models_config, load_validation

    cfg = load_models_config((state or StateDir.of(workload)).models_config())
    row = load_validation(workload.validation(), limit=1).inputs[0]
    tensors = []
    for spec in cfg.input_list:  # a model of several input tensors: the row maps each name to its value
        value = row[spec.name] if isinstance(row, Mapping) else row
        if spec.datatype == "BYTES":
            data: list[Any] = [value if isinstance(value, str) else str(value)]
            shape = [1]
        else:
            data = np.asarray(value).reshape(-1).tolist()
            shape = [1, *spec.shape[1:]] if len(spec.shape) > 1 else [1]
        tensors.append({"name": spec.name, "shape": shape, "datatype": spec.datatype, "data": data})
    return {"inputs": tensors}


@app.command("init")
def init(
    directory: Annotated[Path, typer.Argument(help=f"Folder to write {DEFAULT_FILE} into.")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help=f"Overwrite an existing {DEFAULT_FILE}.")] = False,
) -> None:
    """Write a commented example workload (the digits family, trained on first use) and print the next steps."""
    path = LoadedWorkload.example(directory, force=force).path
    target = "" if directory == Path(".") else f" {directory}"
    console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    console.print(
        "next:\n"
        f"  cascadeserve up{target}        # profile, plan and serve it (then try the curl line it prints)\n"
        f"  edit {path}  # your models, validation data, devices, SLO and load (docs/workloads.md)",
        highlight=False,
        soft_wrap=True,
    )


@workload_app.command("schema")
def schema() -> None:
    """Print the workload file's JSON schema."""
    print_json(workload_json_schema())


@workload_app.command("check")
def check(
    file: FileArg = Path(DEFAULT_FILE),
    state_dir: Annotated[Path | None, typer.Option(help="The state folder to report on.")] = None,
) -> None:
    """Validate a workload file and say whether its profile, calibration and plan are up to date."""
    workload = load_workload(file)
    check_workload_paths(workload)
    workload.add_pythonpath()
    state = StateDir.of(workload, state_dir)
    says = f"{workload.path}: ok ({workload.spec.name}: {workload.spec.slo})"
    err_console.print(says, highlight=False, soft_wrap=True)
    for step in ("profile", "calibration", "plan") if state.calibrating else ("profile", "plan"):
        console.print(f"{step}: {'up to date' if state.up_to_date(step) else 'to be made'}", highlight=False)
