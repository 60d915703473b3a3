"""Helpers for HTTP tests: an emulated server on 127.0.0.1 (ephemeral port) over the toy profile, on any backend."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cascadeserve.cascade import Cascade
from cascadeserve.http import Server, ServerOptions, build_app
from cascadeserve.http.app import FrontEnd
from cascadeserve.plan import Device, GearPlan, fixed_plan
from cascadeserve.profile import Profile, save_profile
from cascadeserve.runtime import Backend, ModelConfig, RuntimeOptions

ADMIN_TOKEN = "test-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}  # headers of a control-plane call


def toy_plan(profile: Profile, *, min_queue: int = 1, max_wait_ms: float | None = 5.0) -> GearPlan:
    return fixed_plan(
        profile,
        Cascade(("m0", "m1"), (0.5,)),
        (Device(name="d0", memory_mb=1000), Device(name="d1", memory_mb=1000)),
        min_queue=min_queue,
        max_wait_ms=max_wait_ms,
    )


def emulated_folder(repository: Path, name: str, profile: Profile) -> Path:
    """A model repository's folder ``name`` that serves ``profile`` emulated: its ``plan.json`` and ``profile/``."""
    folder = repository / name
    save_profile(profile, folder / "profile")
    toy_plan(profile).save(folder / "plan.json")
    return folder


@contextmanager
def serving(
    profile: Profile,
    plan: GearPlan | None = None,
    *,
    models: ModelConfig | None = None,
    max_in_flight: int | None = 4096,
    max_body_bytes: int = 1 << 20,
    backend: Backend | None = None,
    admin_token: str | None = ADMIN_TOKEN,
    auth_token: str | None = None,
    runtime_options: RuntimeOptions | None = None,
    name: str = "toy",
    front_ends: Sequence[FrontEnd] = (),
    allow_client_shm: bool = False,
) -> Iterator[Server]:
    app = build_app(
        profile,
        plan or toy_plan(profile),
        models=models,
        emulate=models is None,
        name=name,
        runtime_options=runtime_options or RuntimeOptions(max_in_flight=max_in_flight),
        server_options=ServerOptions(
            max_body_bytes=max_body_bytes,
            stop_grace_s=2.0,
            admin_token=admin_token,
            auth_token=auth_token,
            allow_client_shm=allow_client_shm,
        ),
        backend=backend,
        front_ends=front_ends,
    )
    server = Server(app, "127.0.0.1", 0, grace_s=2.0).start()
    try:
        yield server
    finally:
        server.stop()


def metric(text: str, name: str) -> float:
    """Sum of all samples of one metric family in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total
