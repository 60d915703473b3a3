"""A replica's queue keeps forwarded and new requests apart and takes a batch as the policy's batch_members says."""

from __future__ import annotations

import asyncio
from typing import Any

from cascadeserve.policy import batch_members
from cascadeserve.runtime.queue import ReplicaQueue
from cascadeserve.runtime.request import Best, Request


def _queue(loop: asyncio.AbstractEventLoop) -> tuple[ReplicaQueue, list[Request]]:
    owner: Any = None
    reqs = [Request(i, None, 0.0, owner, 0, loop.create_future()) for i in range(4)]
    reqs[1].best = reqs[3].best = Best(1, 0.5, 0)  # a stage ran on them: forwarded
    q = ReplicaQueue(0)
    for req, now in zip(reqs, [0.1, 0.2, 0.3, 0.3], strict=True):
        q.push(req, now)
    return q, reqs


def test_the_whole_queue_is_forwarded_first_and_a_capped_batch_the_oldest_forwarded_first_on_a_tie() -> None:
    loop = asyncio.new_event_loop()
    try:
        q, _ = _queue(loop)
        assert len(q) == 4 and q.oldest == 0.1
        capped = q.take(batch_members(3, *q.times()))
        assert [r.rid for r in capped] == [0, 1, 3]  # 0.1 new, 0.2 forwarded, 0.3 forwarded before 0.3 new
        assert all(r.queue is None for r in capped) and len(q) == 1
        q2, _ = _queue(loop)
        assert [r.rid for r in q2.take(batch_members(4, *q2.times()))] == [1, 3, 0, 2]
    finally:
        loop.close()
