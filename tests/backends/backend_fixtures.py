"""Fixtures shared by every test folder that runs on both backends: one real Ray instance per test session.

Ray takes ~10 s to start on a 2-core machine, so it starts once, the first time a test needs it, and shuts down
when the last folder's session fixture is torn down (the fixture is registered by several conftest files, so
each holds a reference). Settings that keep it small enough for CI containers: 2 CPUs, no dashboard, an 80 MB
object store (the default takes 30% of RAM and fails where /dev/shm is small), and a short temp dir (Ray's
socket paths must stay under 107 bytes). Like the backend's own instance, it listens on 127.0.0.1 only.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from cascadeserve.runtime import Backend, LocalBackend

_state: dict[str, Any] = {"refs": 0, "tmp": None}


def start_ray() -> None:
    import ray

    from cascadeserve.backends.ray.loopback import start_local

    if ray.is_initialized():
        return
    tmp = tempfile.mkdtemp(prefix="csray", dir="/tmp")
    _state["tmp"] = tmp
    start_local(  # on 127.0.0.1, as the backend's own: a test run opens no port to the network
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=80 << 20,
        _temp_dir=tmp,
        log_to_driver=False,
        configure_logging=False,
    )


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    pytest.importorskip("ray")
    start_ray()
    _state["refs"] += 1
    yield
    _state["refs"] -= 1
    if _state["refs"] == 0:
        import ray

        ray.shutdown()
        if _state["tmp"]:
            shutil.rmtree(_state["tmp"], ignore_errors=True)


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend a behaviour test runs on: the embedded one, or Ray (a server actor per device)."""
    if request.param == "local":
        return LocalBackend()
    request.getfixturevalue("ray_session")
    from cascadeserve.backends.ray import RayBackend

    return RayBackend()
