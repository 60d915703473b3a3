"""What a server is started with: :class:`ServeConfig`, one frozen keyword-only record of every serving setting and
its default, written once. ``cascadeserve serve`` takes its options' defaults from it and builds one from what was
typed; :class:`cascadeserve.Server` builds one from keywords, or from a workload (:meth:`ServeConfig.for_workload`).
Each field is the option of the same name (``max_in_flight`` is ``--max-in-flight``), and ``serve --help`` says
what each does."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cascadeserve.plan import GearPlan
from cascadeserve.profile import Profile

if TYPE_CHECKING:
    from cascadeserve.workload import LoadedWorkload

__all__ = ["DEFAULTS", "ServeConfig"]


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Every setting of a served cascade (module docstring). ``plan`` and ``profile`` are files, or objects in
    memory (a plan or profile in memory cannot be re-planned from, and its state record is keyed by its content)."""

    plan: Path | GearPlan
    profile: Path | Profile
    models: Path | None = None
    emulate: bool = False
    name: str | None = None
    # where it listens, and who may call it
    host: str = "127.0.0.1"
    port: int = 8000
    grpc_port: int | None = None
    admin_token: str | None = None
    auth_token: str | None = None
    allow_client_shm: bool = False
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    # admission and deadlines
    max_in_flight: int = 4096
    max_wait_slos: float = 2.0
    capacity_qps: float | None = None
    slo_p95_ms: float | None = None
    timeout_ms: float | None = None
    # the front door
    max_body_bytes: int = 8 << 20
    grace_s: float = 5.0
    keep_alive_s: float = 75.0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000
    # devices
    backend: str = "local"
    address: str | None = None
    measure_overhead: bool = True
    out: Path | None = None
    slowdown: tuple[str, ...] = ()
    # Clipper's serving layer
    cache_size: int = 0
    batching: str | None = None
    alternative: tuple[str, ...] = ()
    selection: str = "exp3"
    selection_store: Path = Path("cascadeserve-selection.sqlite")
    default_output: int | None = None
    # online tuning, re-planning, cost drift
    tune: bool = False
    tune_target: float | None = None
    tune_budget: float = 0.01
    audit_fraction: float | None = None
    tune_reference: str = "audit"
    replan: str = "off"
    replan_threshold: float = 0.25
    replan_window_s: float = 3600.0
    replan_min_s: float = 300.0
    replan_cooldown_s: float = 600.0
    replan_timeout_s: float = 300.0
    qps_scaling: str = "off"
    cost_tolerance: float = 0.25
    cost_window_s: float = 10.0
    # more cascades, and what survives a restart
    model_repository: Path | None = None
    model_control_mode: str = "explicit"
    load_model: tuple[str, ...] = ()
    repository_poll_s: float = 15.0
    state_dir: Path = Path("cascadeserve-state")
    restore: bool = True

    def replace(self, **changes: Any) -> ServeConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def for_workload(
        cls, workload: LoadedWorkload, *, workload_state_dir: Path | None = None, **overrides: Any
    ) -> ServeConfig:
        """The settings ``cascadeserve up`` serves ``workload`` with (its serve block, its state folder's plan,
        profile and models config), then ``overrides``. ``workload_state_dir``: the workload's state folder, as
        ``up --state-dir`` gives it (default: ``.cascadeserve/`` beside the workload file)."""
        from cascadeserve.workload import StateDir
        from cascadeserve.workload.values import workload_values

        values = workload_values(StateDir.of(workload, workload_state_dir))
        names = {f.name for f in dataclasses.fields(cls)}
        kw: dict[str, Any] = {k: v for k, v in values.items() if k in names}
        for key in ("plan", "profile", "models", "state_dir"):
            if isinstance(kw.get(key), str):
                kw[key] = Path(kw[key])
        return cls(**{**kw, **overrides})


DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(ServeConfig) if f.default is not dataclasses.MISSING
}
"""Each setting's default, by name (``serve``'s option defaults)."""
