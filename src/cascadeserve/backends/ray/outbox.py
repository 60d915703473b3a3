"""The outbox: how one generation's requests leave this process for the server that holds their replica.

Both ends of the Ray backend send requests elsewhere: the front end sends every admitted request to the server of
its first-stage replica, and a server forwards the samples its stage was unsure of to the server of the next
stage's replica. Both do it through an :class:`Outbox`, one per generation (its transport owns it).

* **Batching.** Requests put in one event-loop iteration go out together, one actor call per replica, so a burst
  costs one call per replica rather than one per request.
* **Streaming answers.** The callee's ``accept`` is a streaming generator: answers come back in groups as they are
  ready, so a sample that an early stage answers does not wait for its call-mates. A lone request takes a plain
  call (``accept_one``), which is cheaper than a stream.
* **Recovery.** When the callee dies (or restarts and lost the generation), each request it had and did not answer
  gets the policy's :func:`~cascadeserve.policy.failover.on_server_lost` decision, applied here: answered now with an
  earlier stage's prediction, marked fallback (:func:`~cascadeserve.runtime.answer_early`); retried on the replica
  the policy picks (another replica of the same model, or the same one once Ray restarted its server), up to
  ``RayOptions.retries`` times; or failed with :class:`~cascadeserve.backends.ray.options.ServerLost`.

A request stays live in the *sender's* generation until it is answered, so the sender's deadline and its
exactly-once guarantee keep holding while the request is away.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from ray.exceptions import RayError

from cascadeserve.backends.ray.audit import on_remote_answer
from cascadeserve.backends.ray.options import RayOptions, Result, ServerLost, Trail, decode_error, encode_items
from cascadeserve.policy.failover import on_server_lost
from cascadeserve.runtime import Answer, Generation, Request, answer_early

__all__ = ["Outbox"]


class Outbox:
    """Requests of one generation bound for replicas on other servers.

    Requests put in one event-loop iteration go out together, one call per replica (so a burst costs one actor
    call per replica, not one per request). The answers stream back; when the callee dies, the requests it had
    are re-routed (see the module docstring). A request stays live in the sender's generation until answered, so
    the sender's deadline and exactly-once guarantees keep holding while it is away.
    """

    def __init__(self, handle: Callable[[str], Any], options: RayOptions) -> None:
        self.handle = handle
        self.options = options
        self.pending: dict[int, list[Request]] = {}
        self._scheduled = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._gen: Generation | None = None

    @property
    def gen(self) -> Generation:
        assert self._gen is not None, "the outbox's generation is bound right after it is built"
        return self._gen

    def bind(self, gen: Generation) -> None:
        self._gen = gen

    def put(self, req: Request, replica: int) -> None:
        self.pending.setdefault(replica, []).append(req)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        pending, self.pending = self.pending, {}
        for replica, reqs in pending.items():
            self._spawn(self._send(replica, reqs, 0))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, replica: int, reqs: list[Request], attempt: int) -> None:
        gen = self.gen
        left = dict(enumerate(reqs))
        try:
            handle = self.handle(gen.plan.replicas[replica].device)
            items = encode_items(reqs, gen.clock.now())
            if len(items) == 1:  # one request cannot wait on call-mates: a plain call is cheaper than a stream
                res, trail = await handle.accept_one.remote(gen.number, replica, items[0])
                self._apply(left.pop(0), res, trail)
            else:
                async for ref in handle.accept.remote(gen.number, replica, items):
                    for i, res, trail in await ref:
                        self._apply(left.pop(i), res, trail)
        except (RayError, KeyError) as e:  # the server died, restarts, or lost the generation
            self._recover(list(left.values()), replica, attempt, e)
            return
        if left:  # the stream ended without answering everything: treat like a lost server
            self._recover(list(left.values()), replica, attempt, RuntimeError("the server's answer stream ended"))

    def _apply(self, req: Request, res: Result, trail: Trail) -> None:
        gen = self.gen
        if trail is not None:  # online tuning: the stages run elsewhere come back with the answer
            req.trail = list(trail)
        if isinstance(res, Answer):
            first = req.resolve(dataclasses.replace(res, finished=gen.clock.now()))  # first: audits never delay it
            if not first and not req.audit:  # (a continuation's future was resolved when its client was answered)
                gen.observer.refused_duplicate()
            if gen.tuning is not None and trail is not None:
                on_remote_answer(gen, req, res, first=first)
        else:  # (a no-op on a continuation, whose future is resolved already)
            req.fail(decode_error(res))

    def _recover(self, reqs: list[Request], replica: int, attempt: int, cause: BaseException) -> None:
        """Apply the policy's failover decision (:func:`~cascadeserve.policy.failover.on_server_lost`) to each
        request the lost server had not answered."""
        gen = self.gen
        now = gen.clock.now()
        rid = gen.plan.replicas[replica].id
        retry: dict[int, list[Request]] = {}
        for req in reqs:
            if req.done:
                continue
            d = on_server_lost(
                gen.tables, gear=req.gear, replica=replica, ran_a_stage=req.best is not None, attempt=attempt,
                retries=self.options.retries, now=now, deadline=req.deadline,
            )  # fmt: skip
            if d.action == "retry":
                retry.setdefault(d.replica, []).append(req)
                continue
            lost = ServerLost(f"the server of replica {rid} failed ({type(cause).__name__}) and retries ran out")
            if d.action == "fallback":  # an earlier stage ran: answer with it, marked fallback
                answer_early(req, now, lost)
            else:
                req.fail(lost)
        for alt, group in retry.items():
            self._spawn(self._resend(alt, group, attempt + 1, same=alt == replica))

    async def _resend(self, replica: int, reqs: list[Request], attempt: int, *, same: bool) -> None:
        if same:  # only this replica serves the model: give Ray a moment to restart its server
            await asyncio.sleep(0.05 * attempt)
        await self._send(replica, reqs, attempt)

    def cancel(self) -> None:
        for t in list(self.tasks):
            t.cancel()
