"""The planner charges each request its own tokens: a stage's demand is the token-weighted share that reaches it.

A two-model family where the small model is unsure exactly on the long prompts: the big model sees 30 % of the
requests but more than half of the token work, and the planner's demand, capacity and the frontier's work say so.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cascadeserve.cascade import stage_load
from cascadeserve.plan import SLO, Device
from cascadeserve.planner import Planner
from cascadeserve.planner.problem import make_problem
from cascadeserve.planner.search import search_cascades
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve
from cascadeserve.profile.llm_side import LLMCosts
from cascadeserve.profile.tokens import TokenCost


def _family(tokens: bool) -> Profile:
    n = 100
    labels = np.zeros(n, dtype=np.int64)
    unsure = np.arange(n) < 30  # the small model's first 30 samples: certainty 0.2 (right or not), else 0.9
    small_cert = np.where(unsure, 0.2, 0.9)
    small_pred = np.where(np.arange(n) < 15, 1, 0)  # wrong on half of its unsure samples
    models = [
        ModelProfile("small", 10.0, RuntimeCurve.from_mapping({1: 2.0, 8: 8.0})),
        ModelProfile("big", 10.0, RuntimeCurve.from_mapping({1: 20.0, 8: 80.0})),
    ]
    if tokens:
        costs = LLMCosts("llm-scoring", {1: 1.0}, {1: 1.0}, 10.0, 0.01, 40, 8, 40.0, 0.0)
        prompt = np.where(unsure, 100, 10)  # the unsure ones are the long prompts
        zeros = np.zeros(n, dtype=np.int64)
        models[1] = dataclasses.replace(models[1], tokens=TokenCost(costs, prompt, zeros, zeros))
    return Profile(
        "longtail",
        tuple(models),
        np.arange(n),
        labels,
        np.stack([small_pred, labels]),
        np.stack([small_cert, np.full(n, 0.95)]),
    )


def test_stage_load_weighs_each_reaching_request_by_its_tokens() -> None:
    prof = _family(tokens=True)
    load = stage_load(prof, ("small", "big"), np.array([[0.5]]))
    mean = (30 * 100 + 70 * 10) / 100  # 37 tokens on average at batch 1
    assert load[0].tolist() == pytest.approx([1.0, 30 * 100 / mean / 100])  # 0.81 of the work, 0.3 of the requests
    plain = stage_load(_family(tokens=False), ("small", "big"), np.array([[0.5]]))
    assert plain[0].tolist() == pytest.approx([1.0, 0.3])
    assert stage_load(prof, ("big",), np.zeros((3, 0)))[:, 0].tolist() == pytest.approx([1.0] * 3)  # all, mean 1


def test_the_planner_charges_the_long_prompts_that_reach_the_big_model() -> None:
    with_tok, without = _family(tokens=True), _family(tokens=False)

    def cand(prof: Profile):  # type: ignore[no-untyped-def]  # the frontier's cascade that escalates the unsure 30 %
        front = search_cascades(prof, levels=4)
        return next(c for c in front.candidates if c.models == ("small", "big") and abs(c.reach[1] - 0.3) < 1e-9)

    c_tok, c_plain = cand(with_tok), cand(without)
    assert c_tok.reach == pytest.approx(c_plain.reach) and c_tok.reach[1] == pytest.approx(0.3)
    assert c_tok.load[1] == pytest.approx(30 * 100 / 37 / 100) and c_plain.load == c_plain.reach
    assert c_tok.work_ms == pytest.approx(2.0 + 20.0 * 30 * 100 / 37 / 100)  # ms at batch 1: small, then big's share
    assert c_plain.work_ms == pytest.approx(2.0 + 20.0 * 0.3)
    devs = [Device(name="d0", memory_mb=100.0)]
    slo = SLO(kind="p95_ms", value=500.0)

    def problem(prof: Profile):  # type: ignore[no-untyped-def]
        return make_problem(prof, devs, slo, 10.0, Planner(n_ranges=1)._options(prof), 1, "zipf")

    p_tok, p_plain = problem(with_tok), problem(without)
    assert p_tok.demand(c_tok, 10.0)["big"] == pytest.approx(10.0 * 30 * 100 / 37 / 100)
    assert p_plain.demand(c_plain, 10.0)["big"] == pytest.approx(3.0)
    assert p_tok.capacity_qps(c_tok)[0] < 0.6 * p_plain.capacity_qps(c_plain)[0]
