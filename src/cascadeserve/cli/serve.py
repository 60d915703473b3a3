"""``cascadeserve serve``: serve a gear plan over the Open Inference Protocol V2 (loopback by default).

Clipper's serving layer: ``--cache-size N`` answers repeated inputs from an LRU prediction cache, ``--batching
aimd|quantile`` sizes each replica's batches adaptively against the latency target (``plan``: the planner's
queue lengths). ``--alternative NAME=PLAN`` serves more plans beside ``--plan`` and ``--selection exp3|exp4``
chooses among them from feedback (``POST /v2/models/{m}/feedback``); Clipper's REST API (``/{app}/predict``,
``/{app}/update``) takes its SLO and default output from ``--slo-p95-ms`` and ``--default-output``; adaptive
batching without a planned target sizes batches against that SLO too.

``--grpc-port PORT`` also serves Triton's gRPC API (``tritonclient.grpc``) on ``--host``, beside HTTP, over the same
runtime (TLS with the same ``--ssl-certfile``/``--ssl-keyfile``).

``--backend local`` (the default) runs every device in this process; ``--backend ray`` runs one inference-server
actor per device on a Ray cluster (``--address``), with the same HTTP API (see :mod:`cascadeserve.backends.ray`).

With ``--emulate``, when neither the profile nor the plan records the runtime's per-batch overhead, ``serve``
measures it at start-up (:mod:`cascadeserve.eval.overhead`, about a second) and prints it; it writes into no
profile unless asked: ``--out DIR`` gets a copy of the profile with it recorded, so that ``plan`` and ``simulate``
of that copy include it (``--no-measure-overhead`` skips this). On ``--backend ray`` the same start-up run goes
through a Ray server actor and also measures the Ray process hop (``ray_hop_ms``: an actor call and its answer's
way back).

Overload is bounded by time: a request that would wait more than ``--max-wait-slos`` SLOs behind the backlog
(which drains at the plan's capacity, its highest gear's QPS, or ``--capacity-qps``) is shed at once with 503 and a
Retry-After computed from the backlog, and so is one that arrives while the event loop runs over half an SLO late
with a quarter of that backlog in flight; every request has a deadline (``--timeout-ms``, default ten SLOs). The plan
hot-swap endpoint is off unless ``--admin-token`` is given; ``--auth-token`` guards inference.

``--tune`` turns on online threshold tuning (:mod:`cascadeserve.runtime.tuning`): ``--audit-fraction`` of the
early exits (default: the plan's ``audit_fraction``, else 2 %) also run the later stages off the critical path, and
every producer tick the tuner may re-tune the gear's thresholds to hold ``--tune-target`` (default: each gear's
score on the profile less ``--tune-budget``) against ``--tune-reference`` (the last stage's prediction, or labels
from the feedback endpoint). Changes show in ``/metrics`` and ``GET /v2/cascade/plan``.

Load drift: ``--replan auto|notify|off`` re-plans in a child process when the measured QPS distribution leaves the
plan's (:mod:`cascadeserve.runtime.replanner`); ``--qps-scaling`` is appendix C.2's online QPS scaling. On emulated
devices a plan without device headroom (``plan --max-busy``) gets a one-line hint, since its re-plans inherit that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated

import typer

from cascadeserve.cli.common import (
    AuditFractionOpt,
    QpsScalingOpt,
    ReplanCooldownOpt,
    ReplanMinOpt,
    ReplanOpt,
    ReplanThresholdOpt,
    ReplanWindowOpt,
    TuneBudgetOpt,
    TuneReferenceOpt,
    TuneTargetOpt,
)
from cascadeserve.cli.defaults import WorkloadOpt
from cascadeserve.cli.root import app, err_console
from cascadeserve.cli.serve_checks import (
    check_options,
    class_names,
    cost_settings,
    loopback,
    measure_costs,
    slowdowns,
    thread_note,
)
from cascadeserve.cli.serve_options import (
    clipper_options,
    headroom_note,
    layer_options,
    replan_options,
    tuning_options,
    with_batch_target,
)
from cascadeserve.errors import CascadeServeError
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.app import FrontEnd
from cascadeserve.http.connections import ConnectionLimits
from cascadeserve.http.model_control import ModelControl
from cascadeserve.http.persist import ServerState, plan_base
from cascadeserve.http.server import DEFAULT_KEEP_ALIVE_S, with_repository
from cascadeserve.plan import load_plan, plan_profile
from cascadeserve.policy import DEFAULT_SLO_MS
from cascadeserve.profile import load_profile
from cascadeserve.runtime import Backend, LocalBackend, RuntimeOptions, load_model_config
from cascadeserve.workload.repository import ModelRepository, repository_builder

__all__ = ["ON_LISTENING", "serve"]

# Called with the server's URL once it listens (``cascadeserve up`` prints its curl line there).
ON_LISTENING: ContextVar[Callable[[str], None] | None] = ContextVar("on_listening", default=None)


@app.command("serve")
def serve(
    plan: Annotated[Path, typer.Option(help="Gear plan JSON.")],
    profile: Annotated[Path, typer.Option(help="Profile directory (runtimes; the records when emulating).")],
    models: Annotated[
        Path | None,
        typer.Option(
            help="Models config YAML (module:factory per model); not needed with --emulate, which reads only its "
            "labels (class names) when given."
        ),
    ] = None,
    emulate: Annotated[
        bool, typer.Option("--emulate", help="Emulated devices: profiled runtimes, recorded answers.")
    ] = False,
    name: Annotated[str | None, typer.Option(help="V2 model name (default: the profile's name).")] = None,
    host: Annotated[str, typer.Option(help="Address to bind; loopback unless you mean otherwise.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port; the banner prints the one bound).")] = 8000,
    grpc_port: Annotated[
        int | None,
        typer.Option(
            help="Also serve Triton's gRPC API (tritonclient.grpc) on this TCP port of --host (0: any free port; "
            "the banner prints it). Off unless given."
        ),
    ] = None,
    max_in_flight: Annotated[
        int, typer.Option(help="Hard bound on requests in flight, on top of the bound by time; past it 503.")
    ] = 4096,
    max_wait_slos: Annotated[
        float,
        typer.Option(
            help="Shed (503 + Retry-After) a request that would wait longer than this many SLOs behind the backlog "
            "(0: no bound by time, --max-in-flight only)."
        ),
    ] = 2.0,
    capacity_qps: Annotated[
        float | None,
        typer.Option(help="The rate at which the backlog drains (default: the plan's highest gear's QPS)."),
    ] = None,
    slo_p95_ms: Annotated[
        float | None,
        typer.Option(
            help=f"Latency SLO (ms) for admission, deadlines, adaptive batching without a planned target and the "
            f"Clipper API's /{{app}}/predict (default: the plan's p95 SLO, else {DEFAULT_SLO_MS:g})."
        ),
    ] = None,
    timeout_ms: Annotated[
        float | None,
        typer.Option(help="Deadline of a request that sets no parameters.timeout_ms (default: ten SLOs)."),
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body accepted (413 past it).")] = 8 << 20,
    grace_s: Annotated[float, typer.Option(help="On SIGINT/SIGTERM, how long in-flight requests may finish.")] = 5.0,
    keep_alive_s: Annotated[
        float, typer.Option(help="Idle HTTP connections stay open this long (above your load balancer's timeout).")
    ] = DEFAULT_KEEP_ALIVE_S,
    header_timeout_s: Annotated[float, typer.Option(min=0.1, max=3600, help="Seconds a head may take (408).")] = 10.0,
    body_timeout_s: Annotated[float, typer.Option(min=0.1, max=3600, help="Seconds a body may pause (408).")] = 30.0,
    max_connections: Annotated[int, typer.Option(min=1, help="Open connections at most (503 past it).")] = 1000,
    admin_token: Annotated[
        str | None,
        typer.Option(
            envvar="CASCADESERVE_ADMIN_TOKEN",
            help="Bearer token that enables PUT /v2/cascade/plan (off without it).",
        ),
    ] = None,
    auth_token: Annotated[
        str | None,
        typer.Option(envvar="CASCADESERVE_AUTH_TOKEN", help="Bearer token required for inference and metadata."),
    ] = None,
    ssl_certfile: Annotated[Path | None, typer.Option(help="TLS certificate (PEM); serve HTTPS.")] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option(help="TLS private key (PEM).")] = None,
    backend: Annotated[
        str, typer.Option(help="Where devices run: 'local' (this process) or 'ray' (a server actor per device).")
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster for --backend ray: 'auto', 'ray://host:port' or host:port (default: a new local one)."
        ),
    ] = None,
    measure_overhead: Annotated[
        bool,
        typer.Option(
            "--measure-overhead/--no-measure-overhead",
            help="With --emulate, when neither the profile nor the plan records the runtime's per-batch overhead: "
            "measure it at start-up (about a second) and print it (the profile is never rewritten).",
        ),
    ] = True,
    cache_size: Annotated[
        int, typer.Option(help="Prediction cache entries (LRU by input bytes; hits skip every queue); 0: off.")
    ] = 0,
    batching: Annotated[
        str | None,
        typer.Option(help="Batching policy: plan (planner's queues), aimd or quantile (Clipper); default: the plan's."),
    ] = None,
    alternative: Annotated[
        list[str] | None,
        typer.Option(help="NAME=PLAN.json: another plan served beside --plan for model selection (repeatable)."),
    ] = None,
    selection: Annotated[
        str, typer.Option(help="With alternatives: exp3 (one per request) or exp4 (weighted ensemble).")
    ] = "exp3",
    selection_store: Annotated[
        Path, typer.Option(help="SQLite file of the selection weights (kept across restarts).")
    ] = Path("cascadeserve-selection.sqlite"),
    default_output: Annotated[
        int | None, typer.Option(help="Clipper API default output when no stage answered by the SLO.")
    ] = None,
    tune: Annotated[
        bool,
        typer.Option(
            "--tune",
            help="Online threshold tuning: audit a share of early exits (they also run the later stages, off the "
            "critical path) and re-tune the gear's thresholds by Apparate's hill climbing to hold the target.",
        ),
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
    replan_timeout_s: Annotated[
        float, typer.Option(help="Stop a re-plan (a child process) that runs longer than this.")
    ] = 300.0,
    qps_scaling: QpsScalingOpt = "off",
    cost_tolerance: Annotated[
        float,
        typer.Option(
            help="Cost drift: a model whose batches run more than this much off the plan's costs (0.25: beyond "
            "x1.25 or under x0.8), sustained, is logged and counted; with --replan auto the plan is re-made with "
            "the measured costs and swapped in."
        ),
    ] = 0.25,
    cost_window_s: Annotated[
        float, typer.Option(help="Cost drift: the window of batches the factor is the median of (seconds).")
    ] = 10.0,
    slowdown: Annotated[
        list[str] | None,
        typer.Option(
            help="Fault injection: [device=NAME,][model=NAME,]at=S,factor=F slows batches from S seconds after "
            "start-up by F (on real models the device thread waits (F-1) times the batch; repeatable)."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="With --emulate: write a copy of the profile here with the measured per-batch overhead (and Ray "
            "hop) recorded, for plan and simulate (the --profile folder itself is never rewritten unless named here)."
        ),
    ] = None,
    model_repository: Annotated[
        Path | None,
        typer.Option(
            help="Folder of cascades (one folder each) that POST /v2/repository/models/NAME/load serves by name, with "
            "--admin-token; nothing outside it is read. Off without it. Its models configs run code."
        ),
    ] = None,
    model_control_mode: Annotated[
        str,
        typer.Option(
            help="explicit (the load API decides), none (all folders at start, API off) or poll (and rescan)."
        ),
    ] = "explicit",
    load_model: Annotated[
        list[str] | None, typer.Option(help="Load this repository folder at start (repeatable; '*': all).")
    ] = None,
    repository_poll_s: Annotated[float, typer.Option(help="With poll: seconds between repository scans.")] = 15.0,
    state_dir: Annotated[
        Path,
        typer.Option(
            envvar="CASCADESERVE_STATE_DIR",
            help="Where hot-swapped, re-planned and tuned plans and loaded cascades are kept across restarts.",
        ),
    ] = Path("cascadeserve-state"),
    restore: Annotated[
        bool,
        typer.Option("--restore/--no-restore", help="Restore what --state-dir recorded (--no-restore: start fresh)."),
    ] = True,
    workload: WorkloadOpt = None,
) -> None:
    """Serve the plan until SIGINT/SIGTERM; then answer what is in flight (for --grace-s) and fail the rest. With
    --model-repository and --admin-token, POST /v2/repository/models/NAME/load serves more cascades beside it
    (docs/serving.md)."""
    check_options(
        max_in_flight, max_wait_slos, capacity_qps, slo_p95_ms, timeout_ms, max_body_bytes, grace_s, keep_alive_s
    )
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise CascadeServeError("--ssl-certfile and --ssl-keyfile go together")
    for opt, f in (("--ssl-certfile", ssl_certfile), ("--ssl-keyfile", ssl_keyfile)):
        if f is not None and not f.is_file():
            raise CascadeServeError(f"{opt}: {f} is not a file")
    front_ends = _grpc_front_end(host, grpc_port, ssl_certfile, ssl_keyfile)
    prof = load_profile(profile)
    gear_plan = load_plan(plan, prof)
    prof = plan_profile(prof, gear_plan)
    engine = _backend(backend, address, None if emulate else models)
    planned = gear_plan  # as loaded: what the start-up measurement checks for recorded costs
    repository = _repository(model_repository, backend)
    control = model_control(repository, model_control_mode, load_model or [], repository_poll_s, emulate)
    state = ServerState(state_dir, restore=restore, log=lambda line: err_console.print(line, highlight=False))
    served_name, base = name or prof.name, plan_base(plan)
    gear_plan = state.restored(served_name, base, gear_plan, prof.model_names)[0]  # what served before a restart

    # every option is checked before anything runs: a bad one fails at once, not after the measurement below
    gear_plan = with_batch_target(gear_plan, batching, slo_p95_ms)
    clipper = clipper_options(cache_size, batching, gear_plan)
    tuning = tuning_options(tune, tune_target, tune_budget, audit_fraction, tune_reference, gear_plan, prof)
    layer = layer_options(alternative or [], selection, selection_store, slo_p95_ms, default_output, prof)
    if not emulate and models is None:
        raise CascadeServeError("give --models config.yaml, or --emulate to answer from the profile's records")
    labels = class_names(models, prof)  # with --emulate too: the models file then only names the classes
    replanning = replan_options(
        replan,
        qps_scaling,
        gear_plan,
        profile,
        threshold=replan_threshold,
        window_s=replan_window_s,
        min_s=replan_min_s,
        cooldown_s=replan_cooldown_s,
        timeout_s=replan_timeout_s,
    )
    costs = cost_settings(cost_tolerance, cost_window_s)
    slowed = slowdowns(slowdown or [])
    if emulate and measure_overhead:
        measure_costs(prof, planned, engine, profile, out)
    config = None if emulate else load_model_config(models)  # type: ignore[arg-type]
    slo = slo_p95_ms
    if slo is None:
        slo = gear_plan.slo.value if gear_plan.slo is not None and gear_plan.slo.kind == "p95_ms" else DEFAULT_SLO_MS
    options = RuntimeOptions(
        max_in_flight=max_in_flight,
        max_wait_slos=max_wait_slos or None,
        capacity_qps=capacity_qps,
        slo_ms=slo,
        default_timeout_s=(timeout_ms if timeout_ms is not None else 10 * slo) / 1000.0,
        tuning=tuning,
        slowdowns=slowed,
        **clipper,
    )
    served = ServerOptions(
        max_body_bytes=max_body_bytes, stop_grace_s=grace_s, admin_token=admin_token, auth_token=auth_token
    )
    watcher = state.watch(served_name, base)  # records each swap and threshold change
    built = build_app(
        prof, gear_plan, models=config, emulate=emulate, name=name, runtime_options=options, server_options=served,
        backend=engine, clipper=layer, replan=replanning, costs=costs, front_ends=front_ends, labels=labels,
        observer=watcher,
    )  # fmt: skip
    watcher.runtime = built.runtime
    # more cascades beside it: POST /v2/repository/models/<name>/load (admin token), each a repository folder
    loader = None
    if repository is not None:
        loader = repository_builder(
            repository, runtime_options=options, server_options=served, backend=engine, costs=costs, state=state
        )
    listing = None if repository is None else repository.names
    built = with_repository(built, served, loader, state=state, available=listing, control=control)
    limits = ConnectionLimits(header_timeout_s, body_timeout_s, max_connections)  # slow and idle clients
    server = Server(
        built, host, port, grace_s=grace_s, keep_alive_s=keep_alive_s, limits=limits,
        ssl_certfile=None if ssl_certfile is None else str(ssl_certfile),
        ssl_keyfile=None if ssl_keyfile is None else str(ssl_keyfile),
    )  # fmt: skip
    if not loopback(host) and auth_token is None:
        err_console.print(
            f"warning: binding {host}, which is not a loopback address, without --auth-token: anyone who reaches "
            "the port can run inference",
            highlight=False,
        )
    notes = [headroom_note(gear_plan, emulate=emulate, replan=replan)]  # after every option is checked
    if models is not None and not emulate and backend == "local":
        notes.append(thread_note(models, sum(d.upstream is None for d in gear_plan.devices)))  # ours only
    for note in notes:
        if note is not None:
            err_console.print(note, highlight=False)
    mode = ("emulated devices" if emulate else "devices") + f" on the {engine.name} backend"

    def banner() -> None:
        limit = built.runtime.admission_policy.limit
        grpc = "" if server.grpc_port is None else f" and gRPC on {_address(host, server.grpc_port)}"
        err_console.print(
            f"serving model {built.model.name!r} ({len(gear_plan.gears)} gears, {len(gear_plan.devices)} {mode}) "
            f"on {server.url}{grpc}; admission holds at most {limit} requests, control plane "
            f"{'on' if admin_token else 'off'}",
            highlight=False,
            soft_wrap=True,  # one line, whatever the terminal's width: scripts read the port from it
        )
        hook = ON_LISTENING.get()
        if hook is not None:
            hook(server.url)

    server.server.on_listening = banner
    # uvicorn re-raises the signal it handled once it has shut down: SIGINT as KeyboardInterrupt, and SIGTERM as
    # SystemExit where Ray's driver installed its handler (--backend ray). Either way the drain is done.
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        server.run()
    if not state.flush():
        err_console.print(f"warning: {state_dir} is still being written; its last records may be lost")
    if not server.server.started:
        # uvicorn logs a bind error and exits through SystemExit before it ever listens: that is a failure.
        where = f"{host}:{port}" + ("" if grpc_port is None else f" (gRPC: {_address(host, grpc_port)})")
        raise CascadeServeError(f"could not listen on {where} (is the port in use?)")
    err_console.print("stopped")


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # an IPv6 literal goes in brackets


def _grpc_front_end(host: str, port: int | None, certfile: Path | None, keyfile: Path | None) -> list[FrontEnd]:
    """``--grpc-port``: the gRPC front end beside HTTP (none without the option), with HTTP's TLS files."""
    if port is None:
        return []
    if not 0 <= port <= 65535:
        raise CascadeServeError(f"--grpc-port: {port} is not a TCP port (0-65535; 0: any free port)")
    from cascadeserve.grpc import GrpcFrontEnd  # grpcio loads only when asked for

    tls = None if certfile is None or keyfile is None else (keyfile.read_bytes(), certfile.read_bytes())
    return [GrpcFrontEnd(host, port, tls=tls)]


def model_control(
    repository: ModelRepository | None, mode: str, load: list[str], poll_s: float, emulate: bool
) -> ModelControl | None:
    """``--model-control-mode``, ``--load-model`` and ``--repository-poll-s`` (only with ``--model-repository``);
    with ``--emulate`` the folders it loads are emulated too."""
    if repository is None:
        if mode != "explicit" or load:
            raise CascadeServeError("--model-control-mode and --load-model need --model-repository")
        return None
    try:
        params = {"emulate": True} if emulate else {}
        return ModelControl(mode, repository.names, repository.signature, load, poll_s, params)  # type: ignore[arg-type]
    except ValueError as e:
        raise CascadeServeError(str(e)) from None


def _repository(folder: Path | None, backend: str) -> ModelRepository | None:
    """``--model-repository``: the folder the load API serves cascades from (``None``: the load API is off)."""
    if folder is None:
        return None
    if backend == "ray":  # a loaded cascade would need a fleet of its own beside the first's: not built yet
        raise CascadeServeError("--model-repository: not with --backend ray (its cascades are fixed at start-up)")
    return ModelRepository(folder)


def _backend(name: str, address: str | None, models: Path | None) -> Backend:
    if name == "local":
        if address is not None:
            raise CascadeServeError("--address is for --backend ray only")
        return LocalBackend()
    if name != "ray":
        raise CascadeServeError(f"--backend: {name!r} is not one of local, ray")
    try:
        from cascadeserve.backends.ray import RayBackend, RayOptions, model_sources
    except ImportError as e:
        raise CascadeServeError(f"--backend ray needs Ray: pip install 'cascadeserve[ray]' ({e})") from None
    # Servers import their own models from a module:factory config, so each loads only what is placed on it.
    return RayBackend(RayOptions(address=address), model_sources=None if models is None else model_sources(models))
