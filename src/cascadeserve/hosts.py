"""Whether an address names this host's loopback interface: the one test behind every "binds 127.0.0.1 unless told
otherwise" rule (the HTTP server's warning for a public --host, the Ray instance that must not face the network)."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_host"]


def is_loopback_host(host: str) -> bool:
    """``localhost``, ``127.x.y.z``, ``::1`` (brackets allowed) or an IPv4-mapped loopback; a name is not resolved."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback
