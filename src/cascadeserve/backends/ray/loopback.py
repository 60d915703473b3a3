"""Where a Ray instance that the backend starts listens: on the loopback interface only.

Ray's processes (the GCS, the raylet and its object manager, every worker and actor, the dashboard, metrics and
runtime-env agents, the autoscaler monitor) listen on the node's IP address, and a node started with its default
one (the host's outbound address) also listens on every interface (``*``, ``0.0.0.0``): anyone who reaches one of
those ports can run code in the cluster. ``ray.init(_node_ip_address="127.0.0.1")`` does not help: Ray replaces a
loopback node IP with the host's address (``services.resolve_ip_for_localhost``), so that other hosts could join.
The one switch that keeps a node on loopback is Ray's single-host mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``,
the default on macOS and Windows), which makes the node IP ``127.0.0.1``; every Ray process then binds ``127.0.0.1``
(or ``::ffff:127.0.0.1``), checked with ``ss -ltnp`` on Ray 2.60 (``tests/backends/test_ray_loopback.py``).

:func:`use_loopback` turns that mode on for this process (Ray read the variable when it was imported) and for the
processes Ray starts from it; :func:`check_loopback` refuses to serve on a node that got another address anyway (a
Ray version that changed this), so a new local instance never faces the network silently. A cluster that several
hosts join is started by its operator with ``ray start`` and joined explicitly (``RayOptions.address``,
``serve --address``): see docs/ray.md for what must be protected then.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

import ray

from cascadeserve.errors import CascadeServeError
from cascadeserve.hosts import is_loopback_host

__all__ = ["SINGLE_HOST_ENV", "check_loopback", "is_loopback_address", "start_local", "use_loopback"]

SINGLE_HOST_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for multi-node clusters: ``0`` keeps every node on 127.0.0.1 (and refuses ``ray start --address``)."""


def use_loopback() -> None:
    """Make the Ray node that this process starts (or joins on this host) take the node IP 127.0.0.1."""
    os.environ[SINGLE_HOST_ENV] = "0"  # the processes Ray starts read it when they import Ray
    from ray._private import ray_constants  # this process imported Ray already: its copy of the switch

    ray_constants.ENABLE_RAY_CLUSTER = False


def is_loopback_address(address: str | None) -> bool:
    """Whether a Ray address (``host:port``) names this host's loopback interface (``ray://`` and ``auto``: no)."""
    if not address or "://" in address or address in ("auto", "local"):
        return False
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 or address.startswith("[") else address
    return is_loopback_host(host)


def _node_ip_address() -> str:
    """The IP address of the node this process is connected to (Ray's function has no annotations)."""
    return cast(Callable[[], str], ray.util.get_node_ip_address)()


def check_loopback() -> None:
    """Refuse (and shut down) a node that Ray gave an address other than loopback: its ports would face the
    network."""
    ip = _node_ip_address()
    if is_loopback_host(ip):
        return
    ray.shutdown()
    raise CascadeServeError(
        f"the local Ray instance took the node IP {ip}, not 127.0.0.1, so its ports would face the network "
        f"(this Ray version ignores {SINGLE_HOST_ENV}=0); start a cluster with `ray start` on a network "
        "that only trusted hosts reach and pass --address (docs/ray.md)"
    )


def start_local(**init_kwargs: Any) -> None:
    """Start a new Ray instance on this host, listening on 127.0.0.1 only (``ray.init(address="local")``: never one
    named by ``RAY_ADDRESS`` or left by an earlier ``ray start``, since joining a cluster is explicit)."""
    use_loopback()
    ray.init(address="local", **init_kwargs)
    check_loopback()
