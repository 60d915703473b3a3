"""Assembling a server from a :class:`~cascadeserve.api.config.ServeConfig`: the composition root of serving.

:func:`assemble` checks every setting first (a bad one fails at once, one line naming it, before any model loads
or any measurement runs), then builds the runtime, the HTTP app (with gRPC beside it when asked), the model
repository and the state folder, and returns a :class:`Serving` ready to run. :func:`serve` runs one until
SIGINT/SIGTERM (``cascadeserve serve``); :class:`Server` runs one in the background for a ``with`` block (a script,
a notebook, a test). Both print what the server says through ``say`` (the console, or stderr).

With ``emulate``, when neither the profile nor the plan records the runtime's per-batch overhead, the server
measures it at start-up (:mod:`cascadeserve.eval.overhead`, about a second) and says it; it writes into no
profile unless asked: ``out`` gets a copy of the profile with it recorded. On the Ray backend the same start-up run
also measures the Ray process hop.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from cascadeserve.api.checks import (
    check_options,
    class_names,
    cost_settings,
    loopback,
    measure_costs,
    slowdowns,
    thread_note,
)
from cascadeserve.api.config import ServeConfig
from cascadeserve.api.settings import (
    clipper_options,
    headroom_note,
    layer_options,
    replan_options,
    tuning_options,
    with_batch_target,
)
from cascadeserve.errors import CascadeServeError
from cascadeserve.http import Server as HttpServer
from cascadeserve.http import ServerOptions, build_app
from cascadeserve.http.app import FrontEnd
from cascadeserve.http.connections import ConnectionLimits
from cascadeserve.http.model_control import ModelControl
from cascadeserve.http.persist import ServerState, plan_base
from cascadeserve.http.server import App, with_repository
from cascadeserve.plan import GearPlan, load_plan, plan_profile
from cascadeserve.policy import DEFAULT_SLO_MS
from cascadeserve.profile import Profile, load_profile
from cascadeserve.runtime import Backend, LocalBackend, RuntimeOptions, load_model_config
from cascadeserve.workload.repository import ModelRepository, repository_builder

__all__ = ["Server", "Serving", "assemble", "serve"]

Say = Callable[[str], None]


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


@dataclass
class Serving:
    """An assembled server, not yet listening: its HTTP server, the first cascade's app, the plan it serves, the
    state folder, and the notes to say before it starts."""

    config: ServeConfig
    server: HttpServer
    app: App
    plan: GearPlan
    state: ServerState
    backend: Backend
    notes: list[str]

    def banner(self) -> str:
        """The line said once it listens (scripts read the port from it)."""
        c, plan = self.config, self.plan
        mode = ("emulated devices" if c.emulate else "devices") + f" on the {self.backend.name} backend"
        limit = self.app.runtime.admission_policy.limit
        grpc = "" if self.server.grpc_port is None else f" and gRPC on {_address(c.host, self.server.grpc_port)}"
        return (
            f"serving model {self.app.model.name!r} ({len(plan.gears)} gears, {len(plan.devices)} {mode}) "
            f"on {self.server.url}{grpc}; admission holds at most {limit} requests, control plane "
            f"{'on' if c.admin_token else 'off'}"
        )


def _loaded(config: ServeConfig) -> tuple[Profile, GearPlan, dict[str, str]]:
    """The profile and plan (files or objects), and what a state record of this plan is keyed by."""
    prof = config.profile if isinstance(config.profile, Profile) else load_profile(config.profile)
    if isinstance(config.plan, GearPlan):
        config.plan.check_against(prof)
        plan, base = (
            config.plan,
            {"path": "<in memory>", "sha256": hashlib.sha256(config.plan.to_json().encode()).hexdigest()},
        )
    else:
        plan, base = load_plan(config.plan, prof), plan_base(config.plan)
    return plan_profile(prof, plan), plan, base


def assemble(config: ServeConfig, *, say: Say = _stderr) -> Serving:
    """Check every setting of ``config``, then build the server it describes (module docstring)."""
    c = config
    check_options(
        c.max_in_flight, c.max_wait_slos, c.capacity_qps, c.slo_p95_ms, c.timeout_ms, c.max_body_bytes, c.grace_s,
        c.keep_alive_s,
    )  # fmt: skip
    if (c.ssl_certfile is None) != (c.ssl_keyfile is None):
        raise CascadeServeError("--ssl-certfile and --ssl-keyfile go together")
    for opt, f in (("--ssl-certfile", c.ssl_certfile), ("--ssl-keyfile", c.ssl_keyfile)):
        if f is not None and not f.is_file():
            raise CascadeServeError(f"{opt}: {f} is not a file")
    front_ends = _grpc_front_end(c.host, c.grpc_port, c.ssl_certfile, c.ssl_keyfile)
    prof, gear_plan, base = _loaded(c)
    profile_dir = None if isinstance(c.profile, Profile) else c.profile
    engine = _backend(c.backend, c.address, None if c.emulate else c.models)
    planned = gear_plan  # as loaded: what the start-up measurement checks for recorded costs
    repository = _repository(c.model_repository, c.backend)
    control = model_control(repository, c.model_control_mode, list(c.load_model), c.repository_poll_s, c.emulate)
    state = ServerState(c.state_dir, restore=c.restore, log=say)
    served_name = c.name or prof.name
    gear_plan = state.restored(served_name, base, gear_plan, prof.model_names)[0]  # what served before a restart

    # every option is checked before anything runs: a bad one fails at once, not after the measurement below
    gear_plan = with_batch_target(gear_plan, c.batching, c.slo_p95_ms)
    clipper = clipper_options(c.cache_size, c.batching, gear_plan)
    tuning = tuning_options(c.tune, c.tune_target, c.tune_budget, c.audit_fraction, c.tune_reference, gear_plan, prof)
    layer = layer_options(list(c.alternative), c.selection, c.selection_store, c.slo_p95_ms, c.default_output, prof)
    if not c.emulate and c.models is None:
        raise CascadeServeError("give --models config.yaml, or --emulate to answer from the profile's records")
    labels = class_names(c.models, prof)  # with --emulate too: the models file then only names the classes
    if c.replan != "off" and profile_dir is None:
        raise CascadeServeError("--replan: a re-plan reads the profile folder; give the profile as a path")
    replanning = replan_options(
        c.replan, c.qps_scaling, gear_plan, profile_dir or Path("."), threshold=c.replan_threshold,
        window_s=c.replan_window_s, min_s=c.replan_min_s, cooldown_s=c.replan_cooldown_s, timeout_s=c.replan_timeout_s,
    )  # fmt: skip
    costs = cost_settings(c.cost_tolerance, c.cost_window_s)
    slowed = slowdowns(list(c.slowdown))
    if c.out is not None and profile_dir is None:
        raise CascadeServeError("--out: copies the profile folder; give the profile as a path")
    if c.emulate and c.measure_overhead:
        measure_costs(prof, planned, engine, profile_dir, c.out, say=say)
    models = None if c.emulate else load_model_config(c.models)  # type: ignore[arg-type]
    slo = c.slo_p95_ms
    if slo is None:
        slo = gear_plan.slo.value if gear_plan.slo is not None and gear_plan.slo.kind == "p95_ms" else DEFAULT_SLO_MS
    options = RuntimeOptions(
        max_in_flight=c.max_in_flight,
        max_wait_slos=c.max_wait_slos or None,
        capacity_qps=c.capacity_qps,
        slo_ms=slo,
        default_timeout_s=(c.timeout_ms if c.timeout_ms is not None else 10 * slo) / 1000.0,
        tuning=tuning,
        slowdowns=slowed,
        **clipper,
    )
    served = ServerOptions(
        max_body_bytes=c.max_body_bytes,
        stop_grace_s=c.grace_s,
        admin_token=c.admin_token,
        auth_token=c.auth_token,
        allow_client_shm=c.allow_client_shm,
    )
    watcher = state.watch(served_name, base)  # records each swap and threshold change
    built = build_app(
        prof, gear_plan, models=models, emulate=c.emulate, name=c.name, runtime_options=options,
        server_options=served, backend=engine, clipper=layer, replan=replanning, costs=costs, front_ends=front_ends,
        labels=labels, observer=watcher,
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
    limits = ConnectionLimits(c.header_timeout_s, c.body_timeout_s, c.max_connections)  # slow and idle clients
    server = HttpServer(
        built, c.host, c.port, grace_s=c.grace_s, keep_alive_s=c.keep_alive_s, limits=limits,
        ssl_certfile=None if c.ssl_certfile is None else str(c.ssl_certfile),
        ssl_keyfile=None if c.ssl_keyfile is None else str(c.ssl_keyfile),
    )  # fmt: skip
    notes: list[str | None] = []
    if not loopback(c.host) and c.auth_token is None:
        notes.append(
            f"warning: binding {c.host}, which is not a loopback address, without --auth-token: anyone who reaches "
            "the port can run inference"
        )
    notes.append(headroom_note(gear_plan, emulate=c.emulate, replan=c.replan))  # after every option is checked
    if c.models is not None and not c.emulate and c.backend == "local":
        notes.append(thread_note(c.models, sum(d.upstream is None for d in gear_plan.devices)))  # ours only
    kept = [n for n in notes if n is not None]
    return Serving(c, server, built, gear_plan, state, engine, kept)


def serve(
    config: ServeConfig,
    *,
    say: Say = _stderr,
    on_listening: Callable[[str], None] | None = None,
    on_serving: Callable[[Serving], None] | None = None,
) -> None:
    """Serve ``config`` until SIGINT/SIGTERM; then answer what is in flight (for ``grace_s``) and fail the rest.
    ``on_listening`` is called with the server's URL once it listens, after the banner; then ``on_serving`` with the
    running server (its app's ``events.status()`` is what ``cascadeserve up``'s status line shows)."""
    s = assemble(config, say=say)
    for note in s.notes:
        say(note)

    def banner() -> None:
        say(s.banner())
        if on_listening is not None:
            on_listening(s.server.url)
        if on_serving is not None:
            on_serving(s)

    s.server.server.on_listening = banner
    # uvicorn re-raises the signal it handled once it has shut down: SIGINT as KeyboardInterrupt, and SIGTERM as
    # SystemExit where Ray's driver installed its handler (--backend ray). Either way the drain is done.
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        s.server.run()
    if not s.state.flush():
        say(f"warning: {config.state_dir} is still being written; its last records may be lost")
    if not s.server.server.started:
        # uvicorn logs a bind error and exits through SystemExit before it ever listens: that is a failure.
        c = config
        where = f"{c.host}:{c.port}" + ("" if c.grpc_port is None else f" (gRPC: {_address(c.host, c.grpc_port)})")
        raise CascadeServeError(f"could not listen on {where} (is the port in use?)")
    say("stopped")


class Server:
    """A server running in the background for a ``with`` block::

        with cascadeserve.Server(plan=plan, profile=prof, emulate=True, port=0) as srv:
            httpx.get(f"{srv.url}/v2/models/{srv.name}")

        with cascadeserve.Server(workload, plan, prof, port=0) as srv:  # a workload, as `cascadeserve up` serves it
            ...

    Keywords are :class:`ServeConfig`'s (or give ``config=``); a ``workload`` is served as ``cascadeserve up`` does
    (its plan, profile, models and serve block; ``plan``, ``profile`` and the keywords override them). It listens
    once the block starts and stops on exit, answering what is in flight first."""

    def __init__(
        self,
        workload: Any = None,
        plan: Path | GearPlan | None = None,
        profile: Path | Profile | None = None,
        *,
        config: ServeConfig | None = None,
        say: Say = _stderr,
        **settings: Any,
    ) -> None:
        settings.update({k: v for k, v in (("plan", plan), ("profile", profile)) if v is not None})
        if config is None:
            config = ServeConfig.for_workload(workload, **settings) if workload is not None else ServeConfig(**settings)
        elif workload is not None or settings:
            raise TypeError("give config= alone, or workload= and/or settings")
        self.config = config
        self._say = say
        self._serving: Serving | None = None

    @property
    def url(self) -> str:
        return self._running.server.url

    @property
    def name(self) -> str:
        return self._running.app.model.name

    @property
    def app(self) -> App:
        return self._running.app

    @property
    def _running(self) -> Serving:
        if self._serving is None:
            raise RuntimeError("the server is not running: use it in a with block, or call start()")
        return self._serving

    def start(self) -> Server:
        s = assemble(self.config, say=self._say)
        for note in s.notes:
            self._say(note)
        s.server.start()
        self._serving = s
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.server.stop()
            self._serving.state.flush()
            self._serving = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


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
