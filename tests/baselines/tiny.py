"""A tiny two-model family for the baseline and evaluation tests."""

from __future__ import annotations

import numpy as np

from cascadeserve.baselines import Workload
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.traces import Trace


def tiny_profile(n: int = 200, fast_ms: float = 1.0, slow_ms: float = 5.0) -> Profile:
    """``fast`` (60 % right) and ``slow`` (90 % right); runtimes flat per sample up to batch 64 (no batching gain
    for ``slow``, so its capacity is exactly 1000 / slow_ms requests per second per device)."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, n)
    fast_ok = np.arange(n) % 10 < 6
    slow_ok = np.arange(n) % 10 < 9
    preds = np.stack([np.where(fast_ok, labels, 1 - labels), np.where(slow_ok, labels, 1 - labels)])
    certs = np.stack([np.where(fast_ok, 0.9, 0.1), np.full(n, 0.5)])
    models = (
        ModelProfile("fast", 10.0, RuntimeCurve((1, 64), (fast_ms, fast_ms * 8))),
        ModelProfile("slow", 10.0, RuntimeCurve((1, 64), (slow_ms, slow_ms * 64))),
    )
    return Profile("tiny", models, np.arange(n), labels, preds, certs)


def workload(trace: Trace, lats: tuple[float, ...] = (100.0,), accs: tuple[float, ...] = (0.9,)) -> Workload:
    return Workload(tiny_profile(), trace, lats, accs, device_memory_mb=100.0)


def voters_profile(n: int = 400) -> Profile:
    """Three cheap models right on ~75 % of the samples each, wrong on different ones: their vote gets ~84 %, more
    than any of them alone."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, n)
    scores = {}
    for m in ("a", "b", "c"):
        pred = np.where(rng.random(n) < 0.75, labels, 1 - labels)
        s = np.full((n, 2), 0.3)
        s[np.arange(n), pred] = 0.7
        scores[m] = s + rng.random((n, 2)) * 0.01
    models = [ModelProfile(m, 10.0, RuntimeCurve((1, 32), (1.0, 4.0))) for m in ("a", "b", "c")]
    return Profile.from_scores("voters", models, labels, scores)
