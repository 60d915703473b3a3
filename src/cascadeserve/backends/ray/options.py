"""What the Ray backend is told, and what travels between its processes.

:class:`RayOptions` says how the backend connects to Ray and what each server actor asks for. :class:`ServerLost`
is the one serving error of this backend's own (a server died and nothing could answer for it).

The rest is the wire encoding, kept in one place so that the sender and the receiver cannot drift apart. A request
crosses a process boundary as an :class:`Item` (a frozen record with slots: it pickles as its class and a tuple of
its fields; a burst of thousands goes out per call), carrying what the receiving stage needs to go on exactly where
the sender stopped: its gear, the time it queued and computed so far, the best earlier answer (for a fallback),
and the time left to its deadline (clocks of two processes are not comparable, durations are). An answer comes
back as the :class:`~cascadeserve.runtime.Answer` itself, or an error as a :class:`Failure` that
:func:`decode_error` turns back into the serving error with the same HTTP status: exception objects may not pickle
(a model's own exception as a cause), their status and text do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cascadeserve.runtime import (
    Answer,
    DeadlineExceeded,
    ModelFailed,
    ModelFn,
    Request,
    RuntimeStopped,
    ServingError,
)
from cascadeserve.runtime.request import Best

__all__ = [
    "Failure",
    "Item",
    "ModelSource",
    "RayOptions",
    "RemoteError",
    "Result",
    "ServerLost",
    "Trail",
    "decode_error",
    "encode_items",
    "encode_result",
    "encode_trail",
]

ModelSource = ModelFn | str | tuple[str, Mapping[str, Any]]
"""How a server gets a model: a picklable callable, or ``module:factory`` (with kwargs) that the server imports."""

Trail = tuple[tuple[float, int], ...] | None
"""Each stage's (certainty, prediction) so far; it travels only with online tuning on (``None`` otherwise)."""


@dataclass(frozen=True, slots=True)
class Item:
    """One request as it travels to another process: what the receiving stage needs to go on where the sender
    stopped."""

    payload: Any
    gear: int
    queue_s: float  # time queued so far
    compute_s: float  # time in batches so far
    best: Best | None  # the last stage that ran (for a fallback)
    remaining_s: float  # time left to its deadline (clocks of two processes are not comparable)
    trail: Trail
    audit: bool  # an audit continuation (online tuning; False otherwise)


@dataclass(frozen=True, slots=True)
class Failure:
    """A serving error as it travels back: its class name, HTTP status, message, and the model that failed."""

    kind: str
    status: int
    message: str
    model: str


Result = Answer | Failure
"""What comes back per request: its answer, or its error."""


class ServerLost(ServingError):
    """The server holding a request died and no retry or earlier stage could answer it (HTTP 503)."""

    status = 503


class RemoteError(ServingError):
    """A serving error raised in another process, with that error's HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RayOptions:
    """How the Ray backend connects and what its server actors ask for."""

    address: str | None = None  # None: this process's Ray (started here if none); "auto"; "ray://host:10001"
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)  # extra ray.init arguments for a new instance
    namespace: str | None = None
    max_restarts: int = 3  # Ray restarts a dead server this many times
    retries: int = 2  # re-sends of a request whose server died before any stage answered it
    deadline_slack_s: float = 1.0  # the front end's safety deadline comes this much after the servers'
    num_cpus: float | None = None  # per server; default 0 for emulated devices, 1 for a CPU device
    num_gpus: float = 1.0  # per server of a device whose kind starts with "gpu"
    resources: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # device name -> custom resources
    max_concurrency: int = 10_000  # concurrent calls per server (each call is one group of requests)
    start_timeout_s: float = 120.0  # how long start() waits for every server to load its replicas


def encode_items(reqs: Sequence[Request], now: float) -> list[Item]:
    """``reqs`` as they travel to another process (``now`` on the sender's clock turns deadlines into time left)."""
    return [
        Item(
            payload=r.payload, gear=r.gear, queue_s=r.queue_s, compute_s=r.compute_s, best=r.best,
            remaining_s=r.deadline - now, trail=None if r.trail is None else tuple(r.trail), audit=r.audit,
        )
        for r in reqs
    ]  # fmt: skip


def encode_trail(trail: list[tuple[float, int]] | None) -> Trail:
    """A request's trail as it travels back with its answer (``None`` with online tuning off)."""
    return None if trail is None else tuple(trail)


def encode_result(fut: asyncio.Future[Answer]) -> Result:
    """The wire form of a settled future: its answer, or its error as a :class:`Failure`."""
    exc = fut.exception()
    if exc is None:
        return fut.result()
    return Failure(type(exc).__name__, int(getattr(exc, "status", 500)), str(exc), str(getattr(exc, "model", "")))


def decode_error(res: Failure) -> ServingError:
    """The serving error that a :class:`Failure` stands for, with its HTTP status."""
    kind, status, message, model = res.kind, res.status, res.message, res.model
    if kind == "DeadlineExceeded":
        return DeadlineExceeded(message)
    if kind == "RuntimeStopped":
        return RuntimeStopped(message)
    if kind == "ModelFailed":  # rebuilt without its cause (which may not pickle), message and model kept
        err = ModelFailed.__new__(ModelFailed)
        ServingError.__init__(err, message)
        err.model = model
        return err
    return RemoteError(message, status)
