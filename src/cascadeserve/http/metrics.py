"""Prometheus metrics: an :class:`~cascadeserve.runtime.Observer` that counts, plus a scrape-time collector.

Counters and histograms are updated from the runtime's observer calls; queue lengths, requests in flight, the
current gear and its QPS range (``cascadeserve_gear_qps_low`` / ``_high``, beside the measured ``cascadeserve_qps``)
are read from the runtime when ``/metrics`` is scraped, so the hot path never touches a gauge. A Grafana dashboard
over all of them: ``docs/grafana-dashboard.json``.
Exactly-once answering is visible as ``admitted_total == answered_total`` once traffic stops (and
``duplicate_answers_refused_total`` counts the second answers the runtime refused). With online threshold tuning
(``serve --tune``): ``cascadeserve_threshold_changes_total{gear,reason}``, and at scrape time the thresholds in force
(``cascadeserve_threshold{gear,stage}``), each gear's window accuracy, target and record count. Per model, each
batch's run time (``cascadeserve_batch_seconds``) and its ratio to the profile's runtime at that size
(``cascadeserve_batch_vs_profile``): a plan is only as good as its profile, and this shows where the serving
hardware departs from it (on a GPU at low load, isolated batches ran 1.2-1.7x the profiler's back-to-back times).

LLM stages: per answering model, the time to the first token of a generated answer
(``cascadeserve_time_to_first_token_seconds``: admission to release, since a stage's answer is released whole once
its certainty is known) and its output tokens per second over the request's latency
(``cascadeserve_output_tokens_per_second``); per model, the requests it sent on to the next stage
(``cascadeserve_escalations_total``). Upstream stages (``adapter: upstream``): every request attempt by outcome
(``cascadeserve_upstream_requests_total{model,outcome}``: ok, connect_error, timeout, http_error, error,
bad_response) and its latency (``cascadeserve_upstream_request_seconds{model}``).

The per-request events (admitted, shed, answered: its outcome, exit stage and latency) are kept in plain ints and a
list on the event loop and folded into the prometheus-client metrics on every collection of the registry (a scrape,
``generate_latest``, a merged registry) and every producer tick: prometheus-client takes a lock per ``inc`` and
``observe``, ~10 µs of the loop's time per request on the HTTP path. Every count a scrape reads is exact; the
histogram's sum adds the same floats in the same order, so it is the same number too. A collection from another
thread (``prometheus_client.start_http_server`` on this registry, a push-gateway thread) folds on the event loop
and waits for it: the loop can add to the pending counts between the read and the reset of a fold run elsewhere.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cascadeserve.http.stats import InferenceStats
from cascadeserve.policy.tuning import ThresholdDecision
from cascadeserve.runtime import Answer, BatchEvent, NullObserver, Request, ServingError, TickEvent
from cascadeserve.runtime.request import ClientGone, DeadlineExceeded, ModelFailed

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from cascadeserve.profile import Profile
    from cascadeserve.runtime import Runtime
    from cascadeserve.runtime.tuning import ServingTuning

__all__ = ["CONTENT_TYPE", "PrometheusObserver"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_BATCH_SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_TOKENS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
_RATIO_BUCKETS = (0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
_PENDING_MAX = 4096  # latencies held between folds at most: a runtime that never ticks still folds this often
_FOREIGN_FOLD_S = 5.0  # a collection from another thread waits this long for the loop to fold (then reads stale)


class _Fold(Collector):
    """Collected first in its registry: folds the observer's pending counts into the metrics collected after it."""

    def __init__(self, observer: PrometheusObserver) -> None:
        self.observer = observer

    def describe(self) -> list[Metric]:
        return []  # no series of its own (and registering it must not collect it)

    def collect(self) -> Iterator[Metric]:
        self.observer.fold()
        return iter(())


class PrometheusObserver(NullObserver):
    """Turns runtime events into Prometheus metrics in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None, profile: Profile | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # before any metric of ours: a collection of the registry folds the pending counts, then reads the metrics
        r.register(_Fold(self))
        self._admitted = 0
        self._shed = 0
        self._answered = dict.fromkeys(("ok", "fallback", "deadline", "model_error", "client_gone", "other"), 0)
        self._exit_n: dict[int, int] = {}  # stage -> answers since the last fold
        self._latencies: list[float] = []  # admission to answer, seconds, in answer order
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the events come on (bound at the first)
        # the profile's runtime per model, to show how served batches compare with what the plan assumed
        self._curves = {} if profile is None else {m.name: m.runtime for m in profile.models}
        self.admitted_c = Counter("cascadeserve_admitted", "Requests (rows) admitted.", registry=r)
        self.shed_c = Counter("cascadeserve_shed", "Requests (rows) shed with 503: admission queue full.", registry=r)
        self.answered_c = Counter(
            "cascadeserve_answered", "Requests answered or failed, exactly once each.", ["outcome"], registry=r
        )
        self.duplicates_c = Counter(
            "cascadeserve_duplicate_answers_refused", "Second answers refused (exactly-once guard).", registry=r
        )
        self.latency_h = Histogram(
            "cascadeserve_request_latency_seconds", "Admission to answer.", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.batch_h = Histogram(
            "cascadeserve_batch_size", "Batch sizes per model.", ["model"], buckets=_BATCH_BUCKETS, registry=r
        )
        self.batch_s = Histogram(
            "cascadeserve_batch_seconds",
            "Batch run time per model (start to end on its device).",
            ["model"],
            buckets=_BATCH_SECONDS_BUCKETS,
            registry=r,
        )
        self.batch_vs_profile = Histogram(
            "cascadeserve_batch_vs_profile",
            "Batch run time over the profile's runtime at that batch size, per model (1: as planned).",
            ["model"],
            buckets=_RATIO_BUCKETS,
            registry=r,
        )
        self.exits_c = Counter("cascadeserve_exits", "Requests answered per cascade stage.", ["stage"], registry=r)
        self.escalations_c = Counter(
            "cascadeserve_escalations",
            "Requests a model was unsure of, sent on to the next stage.",
            ["model"],
            registry=r,
        )
        self.ttft_h = Histogram(
            "cascadeserve_time_to_first_token_seconds",
            "Admission to the first token of a generated answer, per answering model.",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens_h = Histogram(
            "cascadeserve_output_tokens_per_second",
            "Output tokens of a generated answer over its request's latency, per answering model.",
            ["model"],
            buckets=_TOKENS_BUCKETS,
            registry=r,
        )
        self.upstream_c = Counter(
            "cascadeserve_upstream_requests",
            "Requests to upstream stages (OpenAI-compatible servers) per stage and outcome.",
            ["model", "outcome"],
            registry=r,
        )
        self.upstream_h = Histogram(
            "cascadeserve_upstream_request_seconds",
            "Latency of requests to upstream stages, per stage (every attempt).",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.switches_c = Counter("cascadeserve_gear_switches", "Gear switches by the producer.", registry=r)
        self.swaps_c = Counter("cascadeserve_plan_swaps", "Plan hot-swaps.", registry=r)
        self.threshold_c = Counter(
            "cascadeserve_threshold_changes",
            "Threshold changes by online tuning (serve --tune), per gear and reason.",
            ["gear", "reason"],
            registry=r,
        )
        self._outcomes = {
            k: self.answered_c.labels(k) for k in ("ok", "fallback", "deadline", "model_error", "client_gone", "other")
        }
        self.stats = InferenceStats()  # Triton's model statistics (GET /v2/models/{m}/stats)
        self._batch: dict[str, tuple[Histogram, Histogram]] = {}  # per model: batch size, batch seconds
        self._ratio: dict[str, Histogram] = {}  # per model: batch seconds over the profile's
        self._exits: dict[int, Counter] = {}

    def attach(self, runtime: Runtime) -> None:
        """Read queue lengths, requests in flight and the gear from ``runtime`` at scrape time."""
        self.registry.register(_RuntimeCollector(runtime))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def fold(self) -> None:
        """Add the counts and latencies kept since the last fold to the prometheus-client metrics, on the event loop
        the events come on: called from another thread while that loop runs, it asks the loop to fold and waits (at
        most ``_FOREIGN_FOLD_S``; a loop stuck that long is folded by its own next tick, so nothing is lost)."""
        loop = self._loop
        if loop is not None and loop.is_running() and not _running(loop):
            done: concurrent.futures.Future[None] = concurrent.futures.Future()

            def fold_there() -> None:
                self._fold()
                done.set_result(None)

            loop.call_soon_threadsafe(fold_there)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                done.result(timeout=_FOREIGN_FOLD_S)
            return
        self._fold()

    def _fold(self) -> None:
        if self._admitted:
            self.admitted_c.inc(self._admitted)
            self._admitted = 0
        if self._shed:
            self.shed_c.inc(self._shed)
            self._shed = 0
        counts = self._answered
        for outcome, n in counts.items():
            if n:
                self._outcomes[outcome].inc(n)
                counts[outcome] = 0
        if self._exit_n:
            for stage, n in self._exit_n.items():
                ex = self._exits.get(stage)
                if ex is None:
                    ex = self._exits[stage] = self.exits_c.labels(str(stage))
                ex.inc(n)
            self._exit_n = {}
        if self._latencies:
            latencies, self._latencies = self._latencies, []
            _observe_all(self.latency_h, latencies)

    # -- observer ----------------------------------------------------------------------------------------------
    def admitted(self, n: int) -> None:
        self._admitted += n
        if self._loop is None:  # every request is admitted first: the loop its events come on
            self._bind()

    def _bind(self) -> None:
        with contextlib.suppress(RuntimeError):  # no loop: a test driving the observer by hand, folds stay here
            self._loop = asyncio.get_running_loop()

    def shed(self, n: int) -> None:
        self._shed += n
        if self._loop is None:
            self._bind()

    def answered(self, req: Request, answer: Answer | None, error: ServingError | None, now: float) -> None:
        counts = self._answered
        if answer is not None:
            counts["fallback" if answer.fallback else "ok"] += 1
            stage = answer.stage
            self._exit_n[stage] = self._exit_n.get(stage, 0) + 1
            out = answer.output
            if out is not None and out.output_tokens > 0:  # a generated answer (scoring and echo have none)
                seconds = now - req.arrival
                self.ttft_h.labels(answer.model).observe(seconds)
                if seconds > 0:
                    self.tokens_h.labels(answer.model).observe(out.output_tokens / seconds)
        elif isinstance(error, DeadlineExceeded):
            counts["deadline"] += 1
        elif isinstance(error, ModelFailed):
            counts["model_error"] += 1
        elif isinstance(error, ClientGone):
            counts["client_gone"] += 1
        else:
            counts["other"] += 1
        latencies = self._latencies
        latencies.append(now - req.arrival)
        if len(latencies) >= _PENDING_MAX:
            self._fold()
        self.stats.answered(req, answer, error, now, int(time.time() * 1000))

    def refused_duplicate(self) -> None:
        self.duplicates_c.inc()

    def batch(self, event: BatchEvent) -> None:
        model = event.model
        children = self._batch.get(model)
        if children is None:  # labels() per batch costs a lock and a tuple lookup: keep each model's children
            children = self._batch[model] = (self.batch_h.labels(model), self.batch_s.labels(model))
        size_h, seconds_h = children
        size_h.observe(event.size)
        seconds = event.end - event.start
        seconds_h.observe(seconds)
        curve = self._curves.get(model)
        if curve is not None and not event.failed:
            planned_ms = curve.ms_of(event.size)
            if planned_ms > 0:
                ratio_h = self._ratio.get(model)
                if ratio_h is None:  # made on the first ratio only: a model never compared exports no series
                    ratio_h = self._ratio[model] = self.batch_vs_profile.labels(model)
                ratio_h.observe(seconds * 1000.0 / planned_ms)
        if not event.failed and event.size > event.answered:
            self.escalations_c.labels(event.model).inc(event.size - event.answered)
        self.stats.batch(event)

    def upstream_request(self, model: str, outcome: str, seconds: float) -> None:
        """One request attempt of an upstream stage (``models/upstream.py``'s listener; any thread)."""
        self.upstream_c.labels(model, outcome).inc()
        self.upstream_h.labels(model).observe(seconds)

    def tick(self, event: TickEvent) -> None:
        if event.switched:
            self.switches_c.inc()
        self._fold()  # keeps the pending list short between scrapes

    def plan_swapped(self, generation: int) -> None:
        self.swaps_c.inc()

    def thresholds_changed(self, decision: ThresholdDecision, generation: int) -> None:
        self.threshold_c.labels(str(decision.gear), decision.reason).inc()


def _running(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is the one running in this thread."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _observe_all(histogram: Histogram, values: list[float]) -> None:
    """``histogram.observe(v)`` for each of ``values``, with one lock per bucket touched instead of two per value.

    Reaches into prometheus-client's Histogram (``_upper_bounds``, ``_buckets``, ``_sum``, there since 0.4): the
    bucket is the first upper bound at or above the value, as ``observe`` picks it, and the sum adds the values one
    by one onto the current sum, as ``observe`` does, so the exported numbers are the same bits. A version without
    those attributes gets plain ``observe`` calls.
    """
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total_v = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total_v is None or len(bounds) != len(buckets):
        for v in values:
            histogram.observe(v)
        return
    counts = [0] * len(bounds)
    total = total_v.get()
    for v in values:
        total += v
        if v == v:  # observe puts a NaN in no bucket (bisect would put it in the first)
            counts[bisect.bisect_left(bounds, v)] += 1
    total_v.set(total)
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)


class _RuntimeCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        rt = self.runtime
        q = GaugeMetricFamily("cascadeserve_queue_length", "Requests waiting per replica.", labels=["replica"])
        gear = GaugeMetricFamily("cascadeserve_gear", "The gear in force (index into the plan's gears).")
        flight = GaugeMetricFamily("cascadeserve_in_flight", "Requests admitted and not yet answered.")
        qps = GaugeMetricFamily(
            "cascadeserve_qps", "The load the gear was last chosen for: requests per second offered, shed ones too."
        )
        # the gear's QPS range, to plot the measured load against the range the gear in force was planned for
        low = GaugeMetricFamily("cascadeserve_gear_qps_low", "Lower end of the gear in force's QPS range.")
        high = GaugeMetricFamily("cascadeserve_gear_qps_high", "Upper end of the gear in force's QPS range.")
        if rt.accepting or rt.generations:
            for rid, n in rt.queue_lengths().items():
                q.add_metric([rid], n)
            with contextlib.suppress(RuntimeError):  # not started yet
                gear.add_metric([], rt.gear)
                qps.add_metric([], rt.producer.last_qps)
                g = rt.plan.gears[rt.gear]
                low.add_metric([], g.qps_low)
                high.add_metric([], g.qps_high)
        flight.add_metric([], rt.in_flight)
        yield from (q, gear, qps, low, high, flight)
        tuning = rt.tuning if rt.accepting or rt.generations else None
        if tuning is not None:
            yield from _tuning_gauges(tuning)


def _tuning_gauges(tuning: ServingTuning) -> Iterator[Metric]:
    """Online tuning's state: the thresholds in force per gear and stage, and each gear's window accuracy."""
    th = GaugeMetricFamily(
        "cascadeserve_threshold",
        "Certainty threshold in force per gear and stage (online tuning).",
        labels=["gear", "stage"],
    )
    acc = GaugeMetricFamily(
        "cascadeserve_tuning_window_accuracy",
        "Accuracy of the thresholds in force on the gear's window of reference outcomes.",
        labels=["gear"],
    )
    target = GaugeMetricFamily(
        "cascadeserve_tuning_target", "The accuracy online tuning holds per gear.", labels=["gear"]
    )
    size = GaugeMetricFamily(
        "cascadeserve_tuning_window_records", "Whole records in the gear's window.", labels=["gear"]
    )
    for g in range(tuning.tables.n_gears):
        for stage, t in enumerate(tuning.tables.thresholds_of(g)):
            th.add_metric([str(g), str(stage)], t)
        a = tuning.window_accuracy(g)
        if a is not None:
            acc.add_metric([str(g)], a)
        target.add_metric([str(g)], tuning.tuning.tuner.target[g])
        size.add_metric([str(g)], len(tuning.tuning.tuner.windows[g]))
    yield th
    yield acc
    yield target
    yield size
