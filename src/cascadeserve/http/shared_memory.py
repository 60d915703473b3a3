"""System shared memory (Triton's shared-memory extension, its system part): tensors passed through memory that a
client on the same host shares with the server, instead of in the request and the response.

A client creates a POSIX shared-memory object (``shm_open``; ``tritonclient.utils.shared_memory`` does, with a key
such as ``"/input0"``), then registers a region of it under a name: ``POST /v2/systemsharedmemory/region/<name>/
register`` with ``{"key", "offset", "byte_size"}`` (gRPC ``SystemSharedMemoryRegister``). An input whose
``parameters`` name ``shared_memory_region`` and ``shared_memory_byte_size`` (and ``shared_memory_offset``, default
0, from the region's start) is read from there, and must fill exactly what its datatype and shape need; an output
requested with those parameters is written there, and the response lists it without its data, as Triton does.
``GET /v2/systemsharedmemory[/region/<name>]/status`` lists the regions, ``POST .../unregister`` forgets one (or
all); every region is unregistered when the server stops.

A region maps the server's memory onto an object that other processes may share, and an output written there lands
in their memory: so, as Triton since 26.04 (``--allow-client-shm``, off by default), registering and unregistering
are off unless the server allows them: ``serve --allow-client-shm`` lets any client that may infer register (as
Triton's ``--allow-client-shm=true``); otherwise the admin token does (403 on a server with neither). Always, the key
must name an object that already exists in ``/dev/shm`` (a regular file; the server never creates one, follows no
symbolic link and reads no other directory), and the region must lie within it. Every call needs the inference
token where the server has one. Refusals are 400s naming the field:
an unknown region, an offset and size past the region's end, a size that does not match the tensor, a region
parameter without its size. A region name already registered is a 409.

CUDA shared memory is not served: the server has no GPU. Registering a CUDA region answers 400 (gRPC
UNIMPLEMENTED) saying so; its status lists no region and unregistering finds none, as Triton answers without a GPU
(perf_analyzer unregisters both kinds when it is done).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cascadeserve.http.v2 import OutputTensor, ProtocolError, tensor_bytes

__all__ = ["NO_CUDA", "SHM_ROOT", "Region", "SystemSharedMemory", "Target", "write_outputs"]

SHM_ROOT = Path("/dev/shm")
NO_CUDA = "CUDA shared memory is not served: this server has no GPU (register system shared memory instead)"
_KEY = re.compile(r"^/?([^/\0]+)$")
_log = logging.getLogger("cascadeserve.shm")


@dataclass
class Region:
    """A registered region: ``byte_size`` bytes from ``offset`` in the shared-memory object ``key``."""

    name: str
    key: str
    offset: int
    byte_size: int
    view: mmap.mmap  # the object mapped from its start to the region's end

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


@dataclass(frozen=True)
class Target:
    """Where an output goes: ``byte_size`` bytes at ``offset`` in the region ``region``."""

    region: str
    offset: int
    byte_size: int


def _count(prefix: str, name: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ProtocolError(f"{prefix}{name}: expected a non-negative integer, got {value!r}")
    return value


class SystemSharedMemory:
    """The regions one server has registered, by name (module docstring); ``root``: where keys are looked up."""

    def __init__(self, root: Path = SHM_ROOT) -> None:
        self.root = root
        self.regions: dict[str, Region] = {}
        self._users = 0  # the cascades started that share it: the last to stop unregisters every region

    # -- the registry -----------------------------------------------------------------------------------------
    def register(self, name: str, key: Any, offset: Any, byte_size: Any) -> Region:
        """Map ``byte_size`` bytes at ``offset`` of the existing object ``key`` as region ``name``."""
        if not isinstance(name, str) or not name:
            raise ProtocolError("name: expected a non-empty region name")
        if not isinstance(key, str) or (m := _KEY.match(key)) is None or m.group(1) in (".", ".."):
            raise ProtocolError(f"key: expected the name of a shared-memory object such as '/input0', got {key!r}")
        offset = _count("", "offset", offset)
        byte_size = _count("", "byte_size", byte_size)
        if byte_size == 0:
            raise ProtocolError("byte_size: a region holds at least one byte")
        if name in self.regions:
            raise ProtocolError(f"shared memory region {name!r} is registered already: unregister it first", 409)
        path = self.root / m.group(1)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)  # never O_CREAT: existing objects only
        except OSError as e:
            why = "no such object" if isinstance(e, FileNotFoundError) else e.strerror
            raise ProtocolError(
                f"key: {key!r} is not a shared-memory object this server can open in {self.root} ({why}; the server "
                "never creates one)"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ProtocolError(f"key: {key!r} is not a shared-memory object")
            if offset + byte_size > info.st_size:
                raise ProtocolError(
                    f"offset, byte_size: {offset} + {byte_size} bytes runs past the end of {key!r} "
                    f"({info.st_size} bytes)"
                )
            view = mmap.mmap(fd, offset + byte_size, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        region = self.regions[name] = Region(name, key, offset, byte_size, view)
        _log.info("registered system shared memory region %r: %s, offset %d, %d bytes", name, key, offset, byte_size)
        return region

    def unregister(self, name: str | None = None) -> None:
        """Forget region ``name`` (``None``: every region); an unknown name is a 400."""
        names = list(self.regions) if name is None else [name]
        if name is not None and name not in self.regions:
            raise ProtocolError(self._unknown(name))
        for n in names:
            region = self.regions.pop(n)
            with contextlib.suppress(BufferError):  # a view still exported: the map closes when it is collected
                region.view.close()
            _log.info("unregistered system shared memory region %r", n)

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        """Each region's name, key, offset and byte size (``name``: that one; unknown: 400)."""
        if name is None:
            return [r.status() for r in self.regions.values()]
        region = self.regions.get(name)
        if region is None:
            raise ProtocolError(self._unknown(name))
        return [region.status()]

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While a cascade that shares the regions runs; when the last stops, every region is unregistered."""
        self._users += 1
        try:
            yield
        finally:
            self._users -= 1
            if self._users == 0:
                self.unregister()

    def _unknown(self, name: str) -> str:
        known = ", ".join(repr(n) for n in self.regions) or "none"
        return f"unknown shared memory region {name!r} (registered: {known})"

    # -- tensors ----------------------------------------------------------------------------------------------
    def target(self, where: str, params: Mapping[str, Any]) -> Target | None:
        """The region, offset and size a tensor's ``params`` name (``None`` when they name no region), checked
        against the region (400 naming ``where``'s parameter otherwise)."""
        region = params.get("shared_memory_region")
        size = params.get("shared_memory_byte_size")
        if region is None and size is None:
            return None
        if region is None or size is None:
            missing = "shared_memory_region" if region is None else "shared_memory_byte_size"
            raise ProtocolError(f"{where}: {missing} is missing (shared_memory_region and _byte_size go together)")
        if not isinstance(region, str):
            raise ProtocolError(f"{where}.shared_memory_region: expected a region name, got {region!r}")
        size = _count(f"{where}.", "shared_memory_byte_size", size)
        offset = _count(f"{where}.", "shared_memory_offset", params.get("shared_memory_offset", 0))
        known = self.regions.get(region)
        if known is None:
            raise ProtocolError(f"{where}.shared_memory_region: {self._unknown(region)}")
        if offset + size > known.byte_size:
            raise ProtocolError(
                f"{where}: shared_memory_offset {offset} + shared_memory_byte_size {size} runs past the end of "
                f"region {region!r} ({known.byte_size} bytes)"
            )
        return Target(region, offset, size)

    def read(self, where: str, params: Mapping[str, Any]) -> bytes | None:
        """An input's bytes from the region its ``params`` name (a copy), or ``None`` when they name none."""
        t = self.target(where, params)
        if t is None:
            return None
        region = self.regions[t.region]
        start = region.offset + t.offset
        return bytes(region.view[start : start + t.byte_size])

    def write(self, where: str, target: Target, data: bytes) -> None:
        """An output's ``data`` into ``target`` (400 naming ``where`` when it does not fit, or the region was
        unregistered meanwhile)."""
        if len(data) > target.byte_size:
            raise ProtocolError(
                f"{where}: shared_memory_byte_size {target.byte_size} is too small for the {len(data)} bytes of the "
                "output"
            )
        region = self.regions.get(target.region)
        if region is None or region.view.closed:
            raise ProtocolError(f"{where}: region {target.region!r} was unregistered during the request")
        start = region.offset + target.offset
        region.view[start : start + len(data)] = data


def write_outputs(memory: SystemSharedMemory, outputs: Sequence[OutputTensor], targets: Mapping[str, Target]) -> None:
    """Write each of ``outputs`` that ``targets`` names into its region (its raw bytes, as the binary form has
    them: little-endian elements, a BYTES element behind its 4-byte length)."""
    for o in outputs:
        target = targets.get(o.name)
        if target is not None:
            memory.write(f"output {o.name!r}", target, tensor_bytes(o))
