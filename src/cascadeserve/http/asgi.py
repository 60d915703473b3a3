"""ASGI plumbing for several apps behind one (:class:`~cascadeserve.http.repository.Repository`): drive an app's
lifespan from outside, hand a body already read on to the app, and merge the apps' metrics, each sample labelled
with its app's name."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from starlette.types import Message, Receive

from cascadeserve.http.triton_metrics import TRITON_METRICS

__all__ = ["Labelled", "Lifespan", "replaying"]


class Lifespan:
    """Drives one cascade's ASGI lifespan (its runtime and front ends start and stop with it) from the outside."""

    def __init__(self, asgi: Any) -> None:
        self.asgi = asgi
        self._inbox: asyncio.Queue[Message] = asyncio.Queue()
        self._outbox: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _step(self, kind: str) -> None:
        await self._inbox.put({"type": f"lifespan.{kind}"})
        reply = await self._outbox.get()
        if reply["type"].endswith(".failed"):
            raise RuntimeError(reply.get("message") or f"the cascade's {kind} failed")

    async def start(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._task = asyncio.create_task(self.asgi(scope, self._inbox.get, self._outbox.put))
        await self._step("startup")

    async def stop(self) -> None:
        if self._task is not None:
            await self._step("shutdown")
            await self._task


class Labelled(Collector):
    """Every cascade's metric families merged by name, each sample labelled with its cascade (but Triton's
    ``nv_inference_*``, labelled ``model`` with the cascade's name already, as Triton labels them)."""

    def __init__(self, registries: Mapping[str, CollectorRegistry]) -> None:
        self.registries = registries

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for name, registry in self.registries.items():
            for family in registry.collect():
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                triton = family.name in TRITON_METRICS
                for s in family.samples:
                    labels = s.labels if triton else {**s.labels, "cascade": name}
                    out.add_sample(s.name, labels, s.value, s.timestamp, s.exemplar)
        yield from merged.values()


def replaying(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that gives ``body`` once (already read, to route the request), then what ``receive`` gives."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
