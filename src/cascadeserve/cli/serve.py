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

from pathlib import Path
from typing import Annotated

import typer

from cascadeserve.api.config import DEFAULTS, ServeConfig
from cascadeserve.api.serving import serve as serve_config
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
from cascadeserve.policy import DEFAULT_SLO_MS

__all__ = ["serve"]


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
    ] = DEFAULTS["models"],
    emulate: Annotated[
        bool, typer.Option("--emulate", help="Emulated devices: profiled runtimes, recorded answers.")
    ] = DEFAULTS["emulate"],
    name: Annotated[str | None, typer.Option(help="V2 model name (default: the profile's name).")] = DEFAULTS["name"],
    host: Annotated[str, typer.Option(help="Address to bind; loopback unless you mean otherwise.")] = DEFAULTS["host"],
    port: Annotated[int, typer.Option(help="TCP port (0: any free port; the banner prints the one bound).")] = DEFAULTS[
        "port"
    ],
    grpc_port: Annotated[
        int | None,
        typer.Option(
            help="Also serve Triton's gRPC API (tritonclient.grpc) on this TCP port of --host (0: any free port; "
            "the banner prints it). Off unless given."
        ),
    ] = DEFAULTS["grpc_port"],
    max_in_flight: Annotated[
        int, typer.Option(help="Hard bound on requests in flight, on top of the bound by time; past it 503.")
    ] = DEFAULTS["max_in_flight"],
    max_wait_slos: Annotated[
        float,
        typer.Option(
            help="Shed (503 + Retry-After) a request that would wait longer than this many SLOs behind the backlog "
            "(0: no bound by time, --max-in-flight only)."
        ),
    ] = DEFAULTS["max_wait_slos"],
    capacity_qps: Annotated[
        float | None,
        typer.Option(help="The rate at which the backlog drains (default: the plan's highest gear's QPS)."),
    ] = DEFAULTS["capacity_qps"],
    slo_p95_ms: Annotated[
        float | None,
        typer.Option(
            help=f"Latency SLO (ms) for admission, deadlines, adaptive batching without a planned target and the "
            f"Clipper API's /{{app}}/predict (default: the plan's p95 SLO, else {DEFAULT_SLO_MS:g})."
        ),
    ] = DEFAULTS["slo_p95_ms"],
    timeout_ms: Annotated[
        float | None,
        typer.Option(help="Deadline of a request that sets no parameters.timeout_ms (default: ten SLOs)."),
    ] = DEFAULTS["timeout_ms"],
    max_body_bytes: Annotated[int, typer.Option(help="Largest request body accepted (413 past it).")] = DEFAULTS[
        "max_body_bytes"
    ],
    grace_s: Annotated[
        float, typer.Option(help="On SIGINT/SIGTERM, how long in-flight requests may finish.")
    ] = DEFAULTS["grace_s"],
    keep_alive_s: Annotated[
        float, typer.Option(help="Idle HTTP connections stay open this long (above your load balancer's timeout).")
    ] = DEFAULTS["keep_alive_s"],
    header_timeout_s: Annotated[
        float, typer.Option(min=0.1, max=3600, help="Seconds a head may take (408).")
    ] = DEFAULTS["header_timeout_s"],
    body_timeout_s: Annotated[
        float, typer.Option(min=0.1, max=3600, help="Seconds a body may pause (408).")
    ] = DEFAULTS["body_timeout_s"],
    max_connections: Annotated[int, typer.Option(min=1, help="Open connections at most (503 past it).")] = DEFAULTS[
        "max_connections"
    ],
    admin_token: Annotated[
        str | None,
        typer.Option(
            envvar="CASCADESERVE_ADMIN_TOKEN",
            help="Bearer token that enables PUT /v2/cascade/plan (off without it).",
        ),
    ] = DEFAULTS["admin_token"],
    auth_token: Annotated[
        str | None,
        typer.Option(envvar="CASCADESERVE_AUTH_TOKEN", help="Bearer token required for inference and metadata."),
    ] = DEFAULTS["auth_token"],
    allow_client_shm: Annotated[
        bool,
        typer.Option(
            help="Any client may register system shared memory (as Triton's --allow-client-shm=true); without it, "
            "registering needs the admin token."
        ),
    ] = DEFAULTS["allow_client_shm"],
    ssl_certfile: Annotated[Path | None, typer.Option(help="TLS certificate (PEM); serve HTTPS.")] = DEFAULTS[
        "ssl_certfile"
    ],
    ssl_keyfile: Annotated[Path | None, typer.Option(help="TLS private key (PEM).")] = DEFAULTS["ssl_keyfile"],
    backend: Annotated[
        str, typer.Option(help="Where devices run: 'local' (this process) or 'ray' (a server actor per device).")
    ] = DEFAULTS["backend"],
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster for --backend ray: 'auto', 'ray://host:port' or host:port (default: a new local one)."
        ),
    ] = DEFAULTS["address"],
    measure_overhead: Annotated[
        bool,
        typer.Option(
            "--measure-overhead/--no-measure-overhead",
            help="With --emulate, when neither the profile nor the plan records the runtime's per-batch overhead: "
            "measure it at start-up (about a second) and print it (the profile is never rewritten).",
        ),
    ] = DEFAULTS["measure_overhead"],
    cache_size: Annotated[
        int, typer.Option(help="Prediction cache entries (LRU by input bytes; hits skip every queue); 0: off.")
    ] = DEFAULTS["cache_size"],
    batching: Annotated[
        str | None,
        typer.Option(help="Batching policy: plan (planner's queues), aimd or quantile (Clipper); default: the plan's."),
    ] = DEFAULTS["batching"],
    alternative: Annotated[
        list[str] | None,
        typer.Option(help="NAME=PLAN.json: another plan served beside --plan for model selection (repeatable)."),
    ] = DEFAULTS["alternative"],
    selection: Annotated[
        str, typer.Option(help="With alternatives: exp3 (one per request) or exp4 (weighted ensemble).")
    ] = DEFAULTS["selection"],
    selection_store: Annotated[
        Path, typer.Option(help="SQLite file of the selection weights (kept across restarts).")
    ] = DEFAULTS["selection_store"],
    default_output: Annotated[
        int | None, typer.Option(help="Clipper API default output when no stage answered by the SLO.")
    ] = DEFAULTS["default_output"],
    tune: Annotated[
        bool,
        typer.Option(
            "--tune",
            help="Online threshold tuning: audit a share of early exits (they also run the later stages, off the "
            "critical path) and re-tune the gear's thresholds by Apparate's hill climbing to hold the target.",
        ),
    ] = DEFAULTS["tune"],
    tune_target: TuneTargetOpt = DEFAULTS["tune_target"],
    tune_budget: TuneBudgetOpt = DEFAULTS["tune_budget"],
    audit_fraction: AuditFractionOpt = DEFAULTS["audit_fraction"],
    tune_reference: TuneReferenceOpt = DEFAULTS["tune_reference"],
    replan: ReplanOpt = DEFAULTS["replan"],
    replan_threshold: ReplanThresholdOpt = DEFAULTS["replan_threshold"],
    replan_window_s: ReplanWindowOpt = DEFAULTS["replan_window_s"],
    replan_min_s: ReplanMinOpt = DEFAULTS["replan_min_s"],
    replan_cooldown_s: ReplanCooldownOpt = DEFAULTS["replan_cooldown_s"],
    replan_timeout_s: Annotated[
        float, typer.Option(help="Stop a re-plan (a child process) that runs longer than this.")
    ] = DEFAULTS["replan_timeout_s"],
    qps_scaling: QpsScalingOpt = DEFAULTS["qps_scaling"],
    cost_tolerance: Annotated[
        float,
        typer.Option(
            help="Cost drift: a model whose batches run more than this much off the plan's costs (0.25: beyond "
            "x1.25 or under x0.8), sustained, is logged and counted; with --replan auto the plan is re-made with "
            "the measured costs and swapped in."
        ),
    ] = DEFAULTS["cost_tolerance"],
    cost_window_s: Annotated[
        float, typer.Option(help="Cost drift: the window of batches the factor is the median of (seconds).")
    ] = DEFAULTS["cost_window_s"],
    slowdown: Annotated[
        list[str] | None,
        typer.Option(
            help="Fault injection: [device=NAME,][model=NAME,]at=S,factor=F slows batches from S seconds after "
            "start-up by F (on real models the device thread waits (F-1) times the batch; repeatable)."
        ),
    ] = DEFAULTS["slowdown"],
    out: Annotated[
        Path | None,
        typer.Option(
            help="With --emulate: write a copy of the profile here with the measured per-batch overhead (and Ray "
            "hop) recorded, for plan and simulate (the --profile folder itself is never rewritten unless named here)."
        ),
    ] = DEFAULTS["out"],
    model_repository: Annotated[
        Path | None,
        typer.Option(
            help="Folder of cascades (one folder each) that POST /v2/repository/models/NAME/load serves by name, with "
            "--admin-token; nothing outside it is read. Off without it. Its models configs run code."
        ),
    ] = DEFAULTS["model_repository"],
    model_control_mode: Annotated[
        str,
        typer.Option(
            help="explicit (the load API decides), none (all folders at start, API off) or poll (and rescan)."
        ),
    ] = DEFAULTS["model_control_mode"],
    load_model: Annotated[
        list[str] | None, typer.Option(help="Load this repository folder at start (repeatable; '*': all).")
    ] = DEFAULTS["load_model"],
    repository_poll_s: Annotated[float, typer.Option(help="With poll: seconds between repository scans.")] = DEFAULTS[
        "repository_poll_s"
    ],
    state_dir: Annotated[
        Path,
        typer.Option(
            envvar="CASCADESERVE_STATE_DIR",
            help="Where hot-swapped, re-planned and tuned plans and loaded cascades are kept across restarts.",
        ),
    ] = DEFAULTS["state_dir"],
    restore: Annotated[
        bool,
        typer.Option("--restore/--no-restore", help="Restore what --state-dir recorded (--no-restore: start fresh)."),
    ] = DEFAULTS["restore"],
    workload: WorkloadOpt = None,
) -> None:
    """Serve the plan until SIGINT/SIGTERM; then answer what is in flight (for --grace-s) and fail the rest. With
    --model-repository and --admin-token, POST /v2/repository/models/NAME/load serves more cascades beside it
    (docs/serving.md)."""
    settings = {k: v for k, v in locals().items() if k != "workload"}
    for key in ("alternative", "slowdown", "load_model"):  # repeatable options: tuples in the config
        settings[key] = tuple(settings[key] or ())
    serve_config(ServeConfig(**settings), say=_say)


def _say(line: str) -> None:
    err_console.print(line, highlight=False, soft_wrap=True)  # one line, whatever the width: scripts read the port
