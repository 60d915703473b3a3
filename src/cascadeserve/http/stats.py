"""Model statistics in Triton's shape (``GET /v2/models/{m}/stats``), as ``tritonclient.get_inference_statistics``
reads them.

The served model is the whole cascade: ``inference_count`` counts requests (rows) answered, ``execution_count``
the batches run on any stage, ``success``/``fail`` time from admission to answer, ``queue`` the time spent in
queues and ``compute_infer`` the time in batches (all stages), in nanoseconds, as Triton reports them. Per batch
size, ``batch_stats`` holds the count and compute time of the batches of that size.
"""

from __future__ import annotations

from typing import Any

from cascadeserve.runtime import Answer, BatchEvent, Request, ServingError

__all__ = ["InferenceStats"]

_NS = 1_000_000_000


def _pair(count: int, seconds: float) -> dict[str, int]:
    return {"count": count, "ns": round(seconds * _NS)}


class InferenceStats:
    """Counters updated from runtime events (on the event loop), rendered on demand."""

    def __init__(self) -> None:
        self.success = 0
        self.success_s = 0.0
        self.fail = 0
        self.fail_s = 0.0
        self.queue_s = 0.0
        self.compute_s = 0.0
        self.inferences = 0  # rows answered by running the cascade (not from the prediction cache)
        self.executions = 0
        self.last_ms = 0
        self.batches: dict[int, list[float]] = {}  # size -> [count, seconds]

    def answered(
        self, req: Request, answer: Answer | None, error: ServingError | None, now: float, wall_ms: int
    ) -> None:
        took = max(0.0, now - req.arrival)
        if answer is not None:
            self.success += 1
            self.success_s += took
            self.queue_s += answer.queue_s
            self.compute_s += answer.compute_s
            if not answer.cached:
                self.inferences += 1
        else:
            self.fail += 1
            self.fail_s += took
        self.last_ms = wall_ms

    def batch(self, event: BatchEvent) -> None:
        self.executions += 1
        entry = self.batches.setdefault(event.size, [0, 0.0])
        entry[0] += 1
        entry[1] += event.end - event.start

    def render(self, name: str) -> dict[str, Any]:
        zero = _pair(0, 0.0)
        return {
            "model_stats": [
                {
                    "name": name,
                    "version": "1",
                    "last_inference": self.last_ms,
                    "inference_count": self.success,
                    "execution_count": self.executions,
                    "inference_stats": {
                        "success": _pair(self.success, self.success_s),
                        "fail": _pair(self.fail, self.fail_s),
                        "queue": _pair(self.success, self.queue_s),
                        "compute_input": _pair(self.success, 0.0),
                        "compute_infer": _pair(self.success, self.compute_s),
                        "compute_output": _pair(self.success, 0.0),
                        "cache_hit": zero,
                        "cache_miss": zero,
                    },
                    "batch_stats": [
                        {
                            "batch_size": size,
                            "compute_input": _pair(int(c), 0.0),
                            "compute_infer": _pair(int(c), s),
                            "compute_output": _pair(int(c), 0.0),
                        }
                        for size, (c, s) in sorted(self.batches.items())
                    ],
                }
            ]
        }
