"""Requests that carry their own tokens (a trace's): priced by them, the cost tables still anchored on the
validation set, answered as their validation sample is, the same in both simulator engines."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import make_toy_profile, with_token_costs
from tests.simulate.sim_helpers import assert_same_result

from cascadeserve.cascade import Cascade
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.profile.tokens import token_tables
from cascadeserve.simulate import simulate

PROFILE = with_token_costs(make_toy_profile(n=200))


def _own_tokens(idx: np.ndarray) -> np.ndarray:
    """Each request's validation sample's own prompt and output tokens, as a trace would give them."""
    gen = PROFILE.model("m2").tokens
    assert gen is not None
    return np.stack([gen.prompt_tokens[idx], gen.output_tokens[idx]], axis=1)


def test_requests_carrying_their_samples_own_tokens_cost_what_the_samples_do() -> None:
    idx = np.arange(PROFILE.n_samples)[::-1]
    replay = PROFILE.with_request_tokens(idx, _own_tokens(idx))
    before, after = token_tables(PROFILE.models, PROFILE.n_samples, 16), token_tables(replay.models, len(idx), 16)
    assert before is not None and after is not None
    for arr in ("base_s", "prompt_s", "output_s"):  # the anchor is the validation set's, not the requests'
        assert np.array_equal(getattr(before, arr), getattr(after, arr)), arr
    row = PROFILE.index("m2")
    assert np.array_equal(after.output_tokens[row], before.output_tokens[row][idx])
    assert np.array_equal(replay.predictions, PROFILE.predictions[:, idx])
    assert np.array_equal(replay.labels, PROFILE.labels[idx])


def test_a_request_with_a_long_prompt_costs_more_than_any_of_the_set() -> None:
    idx = np.arange(4)
    long = np.array([[5_000, 0], [10, 0], [10, 400], [10, 0]])
    replay = PROFILE.with_request_tokens(idx, long)
    tab = token_tables(replay.models, 4, 4)
    base = token_tables(PROFILE.models, PROFILE.n_samples, 4)
    assert tab is not None and base is not None
    most = max(base.seconds(PROFILE.index("m2"), np.array([s])) for s in range(PROFILE.n_samples))
    for r in (PROFILE.index("m1"), PROFILE.index("m2")):  # the scoring stage and the generating one
        assert tab.seconds(r, np.array([0])) > 10 * most
    assert tab.seconds(PROFILE.index("m2"), np.array([2])) > most  # a long answer: the generating stage
    assert not tab.output_tokens[PROFILE.index("m1")].any()  # a scoring stage decodes nothing, whatever the trace


def test_both_engines_replay_the_trace_tokens_alike() -> None:
    rng = np.random.default_rng(4)
    n = 600
    arrivals = np.sort(rng.uniform(0.0, 3.0, n))
    tokens = np.stack([rng.integers(1, 400, n), rng.integers(0, 60, n)], axis=1)
    replay = PROFILE.with_request_tokens(np.arange(n) % PROFILE.n_samples, tokens)
    devs = [Device(name="d0", memory_mb=10_000), Device(name="d1", memory_mb=10_000)]
    plan = fixed_plan(replay, Cascade(("m0", "m1", "m2"), (0.5, 0.5)), devs, min_queue=2)
    samples = np.arange(n)
    fast = simulate(replay, plan, arrivals, samples=samples, record_batches=True, engine="compiled")
    ref = simulate(replay, plan, arrivals, samples=samples, record_batches=True, engine="reference")
    assert_same_result(fast, ref)
    own = simulate(PROFILE, plan, arrivals, record_batches=True, engine="compiled")
    assert fast.percentile_ms(95) > own.percentile_ms(95)  # longer prompts than the set's: a slower tail


def test_token_counts_must_match_the_requests() -> None:
    with pytest.raises(ValueError, match=r"tokens must be \[3, 2\]"):
        PROFILE.with_request_tokens(np.arange(3), np.zeros((2, 2)))
