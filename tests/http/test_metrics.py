"""Per-model batch metrics: run time, and run time over the profile's runtime at that batch size."""

from __future__ import annotations

from prometheus_client import generate_latest
from tests.http.http_helpers import metric

from cascadeserve.http.metrics import PrometheusObserver
from cascadeserve.profile import Profile
from cascadeserve.runtime import BatchEvent


def _event(model: str, size: int, start: float, end: float, failed: bool = False) -> BatchEvent:
    return BatchEvent(
        start=start, end=end, device=0, replica=0, row=0, size=size, answered=size, model=model, device_name="d0",
        generation=0, failed=failed,
    )


def test_batch_time_and_its_ratio_to_the_profile(toy_profile: Profile) -> None:
    obs = PrometheusObserver(profile=toy_profile)
    m0 = toy_profile.models[0]
    planned_s = float(m0.runtime.ms_at(4)) / 1000.0
    obs.batch(_event(m0.name, 4, 0.0, 2 * planned_s))  # twice the profile's time
    obs.batch(_event(m0.name, 4, 0.0, planned_s))  # as planned
    obs.batch(_event(m0.name, 4, 0.0, 5 * planned_s, failed=True))  # timed, not compared
    text = generate_latest(obs.registry).decode()
    assert metric(text, "cascadeserve_batch_seconds_count") == 3
    assert abs(metric(text, "cascadeserve_batch_seconds_sum") - 8 * planned_s) < 1e-9
    assert metric(text, "cascadeserve_batch_vs_profile_count") == 2
    assert abs(metric(text, "cascadeserve_batch_vs_profile_sum") - 3.0) < 1e-9
    # one ratio in the le=1.0 bucket (exactly as planned), both by le=2.0
    assert f'cascadeserve_batch_vs_profile_bucket{{le="1.0",model="{m0.name}"}} 1.0' in text
    assert f'cascadeserve_batch_vs_profile_bucket{{le="2.0",model="{m0.name}"}} 2.0' in text


def test_without_a_profile_only_the_run_time_is_kept() -> None:
    obs = PrometheusObserver()
    obs.batch(_event("m", 1, 0.0, 0.004))
    text = generate_latest(obs.registry).decode()
    assert metric(text, "cascadeserve_batch_seconds_count") == 1
    assert metric(text, "cascadeserve_batch_vs_profile_count") == 0
