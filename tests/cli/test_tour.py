"""The README's tour plan (``plan fixed ... --min-queue 4``, no max wait) answers a lone request, in the simulator
and on a real server on 127.0.0.1, at the same moment: the plan default max wait fires the short queue.

Before the default existed the server held a lone request forever while ``simulate`` reported it completed.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
from tests.http.http_helpers import serving

from cascadeserve.cli import run
from cascadeserve.plan import DEFAULT_MAX_WAIT_MS, load_plan
from cascadeserve.profile import Profile
from cascadeserve.simulate import simulate

TOUR = "tests/data/profiles/tweets-sklearn"


def _tour_plan(tmp_path: Path) -> Path:
    out = tmp_path / "plan.json"
    args = ["plan", "fixed", "--profile", TOUR, "--cascade", "nb-words,lr-chars", "--thresholds", "0.4"]
    args += ["--devices", "2", "--device-memory-mb", "16000", "--min-queue", "4", "--out", str(out)]
    assert run(args) == 0
    return out


def test_the_tour_plan_answers_a_lone_request(real_profile: Profile, tmp_path: Path) -> None:
    plan = load_plan(_tour_plan(tmp_path), real_profile)
    assert plan.max_wait_ms is None and {rg.min_queue for g in plan.gears for rg in g.replicas} == {4}

    # A lone request at 0.25 s, and the next one long after: the first must not wait for the second (nor for the
    # drain at the end of the trace, which models the server stopping).
    sim = simulate(real_profile, plan, np.array([0.25, 0.95]), record_batches=True)
    assert sim.completed == 2 and sim.summary()["unanswered"] == 0
    assert sim.batches[0].start == 0.25 + DEFAULT_MAX_WAIT_MS / 1000.0
    assert sim.batches[0].size == 1
    assert 0.35 <= sim.finish[0] < 0.95

    with serving(real_profile, plan) as server:
        body = {"inputs": [{"name": "sample_id", "datatype": "INT64", "shape": [1], "data": [3]}]}
        t0 = time.monotonic()
        r = httpx.post(f"{server.url}/v2/models/toy/infer", json=body, timeout=30)
        waited = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert waited >= DEFAULT_MAX_WAIT_MS / 1000.0 * 0.9  # it did wait for company first ...
    assert waited < 10.0  # ... but not forever
