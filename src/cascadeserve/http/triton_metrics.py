"""Triton's inference metrics (``nv_inference_*``) on ``GET /metrics``, beside the project's own, for every cascade.

Dashboards and alerts written for Triton read these names; each series is labelled ``model`` (the cascade's name)
and ``version`` (``"1"``), as Triton labels them, and all are counters:

* ``nv_inference_request_success``: V2 infer calls (HTTP ``POST .../infer`` and gRPC ``ModelInfer``) answered,
  each counted once however many rows it carried;
* ``nv_inference_request_failure{reason}``: V2 infer calls that reached the cascade (their body was decoded)
  and failed, by Triton's reasons: ``REJECTED`` (shed: admission full), ``CANCELED`` (the client went away or
  cancelled), ``BACKEND`` (a model or an upstream stage failed), ``OTHER`` (inputs that do not fit the model, a
  deadline passed, a call too large);
* ``nv_inference_count``: inferences, one per row the cascade answered (whatever protocol it came by), not counting
  rows answered from the prediction cache;
* ``nv_inference_exec_count``: batches executed, on any stage of the cascade (``execution_count`` of the
  statistics extension): ``nv_inference_count / nv_inference_exec_count`` is the mean batch size as rows go in;
* ``nv_inference_request_duration_us``, ``nv_inference_queue_duration_us``,
  ``nv_inference_compute_infer_duration_us``: cumulative microseconds over the successful calls, of each call's
  ``server_ms`` (admission to its last row's answer), ``queue_ms`` and ``compute_ms`` response parameters, each
  truncated to whole microseconds as Triton adds them up.

The per-call counts are plain ints on the event loop (:class:`RequestCounts`, kept by the inference core), read when
the registry is collected: no lock on the request path. Triton's text names a counter without the ``_total`` suffix
that prometheus-client's text format adds, so :func:`exposition` writes the registry with these families under
their Triton names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from cascadeserve.http.stats import InferenceStats

__all__ = ["REASONS", "TRITON_METRICS", "RequestCounts", "TritonCollector", "exposition"]

REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
"""Triton's failure reasons (``nv_inference_request_failure``'s ``reason`` label)."""

TRITON_METRICS: dict[str, str] = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_request_failure": "Number of failed inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (does not include cached requests)",
    "nv_inference_exec_count": "Number of model executions performed (does not include cached requests)",
    "nv_inference_request_duration_us": "Cumulative inference request duration in microseconds "
    "(includes cached requests)",
    "nv_inference_queue_duration_us": "Cumulative inference queuing duration in microseconds "
    "(includes cached requests)",
    "nv_inference_compute_infer_duration_us": "Cumulative compute inference duration in microseconds "
    "(does not include cached requests)",
}
"""Each family's name and help text, as Triton gives them."""

_REJECTED, _CANCELED, _BACKEND, _OTHER = REASONS


def _reason(status: int) -> str:
    if status == 503:
        return _REJECTED
    if status == 499:
        return _CANCELED
    if status in (500, 502):
        return _BACKEND
    return _OTHER


class RequestCounts:
    """One cascade's V2 infer calls: successes, failures by reason, and the cumulative microseconds (event loop)."""

    __slots__ = ("compute_us", "failures", "queue_us", "request_us", "success")

    def __init__(self) -> None:
        self.success = 0
        self.failures = dict.fromkeys(REASONS, 0)
        self.request_us = 0
        self.queue_us = 0
        self.compute_us = 0

    def succeeded(self, parameters: Mapping[str, Any]) -> None:
        """A call answered, with its response ``parameters`` (``server_ms``, ``queue_ms``, ``compute_ms``)."""
        self.success += 1
        self.request_us += int(parameters["server_ms"] * 1000.0)
        self.queue_us += int(parameters["queue_ms"] * 1000.0)
        self.compute_us += int(parameters["compute_ms"] * 1000.0)

    def failed(self, status: int) -> None:
        """A call that failed with HTTP ``status`` (503 shed, 499 gone, 500/502 a model, any other: other)."""
        self.failures[_reason(status)] += 1


class TritonCollector(Collector):
    """The ``nv_inference_*`` families of the cascade ``model``: its calls' ``counts`` and its runtime's ``stats``
    (rows inferred, batches executed)."""

    def __init__(self, model: str, counts: RequestCounts, stats: InferenceStats) -> None:
        self.model = model
        self.counts = counts
        self.stats = stats

    def describe(self) -> list[Metric]:
        return []  # collecting is reading a few ints: nothing to do at registration

    def collect(self) -> Iterator[Metric]:
        c, labels = self.counts, {"model": self.model, "version": "1"}
        values = {
            "nv_inference_request_success": c.success,
            "nv_inference_count": self.stats.inferences,
            "nv_inference_exec_count": self.stats.executions,
            "nv_inference_request_duration_us": c.request_us,
            "nv_inference_queue_duration_us": c.queue_us,
            "nv_inference_compute_infer_duration_us": c.compute_us,
        }
        for name, doc in TRITON_METRICS.items():
            family = Metric(name, doc, "counter")
            if name == "nv_inference_request_failure":
                for reason, n in c.failures.items():
                    family.add_sample(name, {**labels, "reason": reason}, float(n))
            else:
                family.add_sample(name, labels, float(values[name]))
            yield family


_RENAMES = [
    (f"# {kind} {name}_total ".encode(), f"# {kind} {name} ".encode())
    for name in TRITON_METRICS
    for kind in ("HELP", "TYPE")
]


def exposition(registry: Collector) -> bytes:
    """``registry`` in Prometheus' text format, the ``nv_inference_*`` counters under Triton's own names (the text
    format would name them ``..._total`` in their ``# HELP`` and ``# TYPE`` lines; their samples carry no suffix)."""
    text = generate_latest(registry)
    if b"# HELP nv_inference_" not in text:
        return text
    for old, new in _RENAMES:
        text = text.replace(old, new, 1)
    return text
