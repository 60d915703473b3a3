"""Compile the simulator's compiled loop ahead of time: :func:`warm_up` runs one tiny simulation through it.

The first compiled simulation in a process loads the loop from numba's on-disk cache, or compiles it when the cache
is cold (tens of seconds); a benchmark or a test session calls :func:`warm_up` first so that no measured run and no
single test pays for it.
"""

from __future__ import annotations

import time

import numpy as np

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.simulate.engine import simulate

__all__ = ["warm_up"]


def warm_up() -> float:
    """Compile (or load from cache) the loop and its kernels now; returns the seconds it took."""
    t0 = time.perf_counter()
    models = [ModelProfile(f"m{i}", 1.0, RuntimeCurve((1, 8), (1.0, 2.0))) for i in range(2)]
    labels = np.array([0, 1, 0, 1])
    scores = {m.name: np.eye(2)[labels] + 0.1 * i for i, m in enumerate(models)}
    prof = Profile.from_scores("warm", models, labels, scores, device="none")
    plan = fixed_plan(prof, Cascade(("m0", "m1"), (0.5,)), [Device(name="d0", memory_mb=10.0)], min_queue=2)
    simulate(prof, plan, np.array([0.0, 0.01, 0.2]), engine="compiled")
    return time.perf_counter() - t0
