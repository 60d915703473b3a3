"""What one server is and what its cascades share: the protocol extensions it serves (its metadata's
``extensions``, on HTTP and gRPC alike) and the state every cascade of the server reads and changes (trace
settings, shared-memory regions), whichever cascade's handlers a request reaches.

A :class:`ServerShared` belongs to a :class:`~cascadeserve.http.app.ServerOptions` object (its ``shared`` field):
the cascades a model repository loads with the server's options share it with the first one. Log settings are the
process's (:mod:`cascadeserve.http.logsettings`), as the loggers are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cascadeserve.http.shared_memory import SystemSharedMemory
from cascadeserve.http.tracesettings import TraceSettings

__all__ = ["EXTENSIONS", "ServerShared"]

EXTENSIONS: tuple[str, ...] = (
    "binary_tensor_data",
    "cascade_plan",
    "classification",
    "logging",
    "model_configuration",
    "model_repository",
    "statistics",
    "system_shared_memory",
)
"""The extensions the server metadata lists: Triton's that are served (``binary_tensor_data`` is HTTP's form of
tensors; gRPC has its raw contents), and ``cascade_plan``, this server's own (``GET``/``PUT /v2/cascade/plan``,
over HTTP). Not listed: ``trace`` (the trace settings are kept, but nothing is traced), ``sequence``,
``schedule_policy``, ``parameters`` and ``cuda_shared_memory``."""


@dataclass
class ServerShared:
    """The state the cascades of one server share."""

    trace: TraceSettings = field(default_factory=TraceSettings)
    shm: SystemSharedMemory = field(default_factory=SystemSharedMemory)
