"""Token costs: a batch costs what its longest prompt and output cost, anchored to the profile's runtimes.

Exact small cases (every batch of a tiny set enumerated), hypothesis over random token counts, and the files:
a committed LLM profile loads its token costs, and they survive a save, a calibration and a split.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.conftest import make_toy_profile, with_token_costs
from tests.property import property_settings

from cascadeserve.errors import ProfileError
from cascadeserve.profile import calibrate, load_profile, save_profile
from cascadeserve.profile.llm_side import LLMCosts
from cascadeserve.profile.tokens import TokenCost, batch_seconds, expected_max, sample_weights, token_tables

ROOT = Path(__file__).resolve().parents[2]
LLM_PROFILE = ROOT / "profiles" / "llm-sst2"


def _costs(prefill: dict[int, float], decode: dict[int, float], fixed: dict[int, float] | None = None) -> LLMCosts:
    return LLMCosts("llm-generation", prefill, decode, 100.0, 0.01, 10, 8, 10.0, 5.0, fixed or {})


def test_expected_max_is_the_exact_mean_over_every_batch() -> None:
    values = np.array([3, 7, 7, 12])
    for b in (1, 2, 3):
        every = [max(values[list(ix)]) for ix in itertools.product(range(4), repeat=b)]
        assert expected_max(values, np.array([b]))[0] == pytest.approx(np.mean(every), rel=1e-12)


@property_settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 90), min_size=1, max_size=5),
    st.lists(st.integers(0, 30), min_size=5, max_size=5),
    st.floats(0.0, 2.0),
    st.floats(0.0, 2.0),
    st.floats(0.0, 50.0),
)
def test_random_batches_cost_the_profiled_runtime_on_average(
    prompt: list[int], output: list[int], prefill: float, decode: float, fixed: float
) -> None:
    """Over every batch of each size (drawn with replacement), the rule's mean is the runtime curve's value: the
    planner's mean costs do not move, only which batch costs what."""
    prof = make_toy_profile(n=len(prompt), n_models=1)
    tc = TokenCost(
        _costs({1: prefill, 4: 2 * prefill}, {1: decode, 4: decode}, {1: fixed, 4: fixed / 2}),
        np.array(prompt),
        np.array(output[: len(prompt)]),
        np.zeros(len(prompt), dtype=np.int64),
    )
    prof = dataclasses.replace(prof, models=(dataclasses.replace(prof.models[0], tokens=tc),))
    tables = token_tables(prof.models, prof.n_samples, 8)
    n = len(prompt)
    if max(prompt) == 0 and max(output[:n]) == 0:  # no token anywhere: the plain runtime, never a free batch
        assert tables is None
        return
    assert tables is not None
    rt = prof.models[0].runtime.table(8)
    for b in (1, 2, 3):
        costs = [tables.seconds(0, np.array(ix)) for ix in itertools.product(range(n), repeat=b)]
        assert np.mean(costs) == pytest.approx(rt[b], rel=1e-9)


def test_a_batch_costs_its_longest_prompt_and_longest_output() -> None:
    """Two samples, prompt 10 and 30 tokens, outputs 8 and 2 steps; prefill and decode measured equal per token,
    and a fixed part as large as 20 tokens, so the split of a mean batch's time is fixed 20 : prompt E[longest
    prompt] : output E[longest output]."""
    prof = make_toy_profile(n=2, n_models=1)
    costs = _costs({1: 1.0}, {1: 1.0}, {1: 20.0})
    tc = TokenCost(costs, np.array([10, 30]), np.array([8, 2]), np.zeros(2, dtype=np.int64))
    prof = dataclasses.replace(prof, models=(dataclasses.replace(prof.models[0], tokens=tc),))
    tables = token_tables(prof.models, 2, 4)
    assert tables is not None
    rt2 = prof.models[0].runtime.table(4)[2]
    e_p, e_d = 0.25 * 10 + 0.75 * 30, 0.25 * 2 + 0.75 * 8  # E[max] over the 4 ordered pairs
    total = 20.0 + e_p + e_d
    want = rt2 * (20.0 + 30 + 8) / total  # longest prompt 30, longest output 8
    assert tables.seconds(0, np.array([0, 1])) == pytest.approx(want, rel=1e-12)
    assert tables.seconds(0, np.array([0, 0])) == pytest.approx(rt2 * (20.0 + 10 + 8) / total, rel=1e-12)
    args = (float(tables.base_s[0, 2]), float(tables.prompt_s[0, 2]), float(tables.output_s[0, 2]), 30.0, 8.0)
    assert batch_seconds(*args) == tables.seconds(0, np.array([1, 0]))
    assert costs.batch_ms(2, 30, 8) == 58.0  # the cost model's own estimate: fixed + per token


def test_models_without_tokens_keep_their_runtime_and_weights() -> None:
    plain = make_toy_profile(n=50)
    assert token_tables(plain.models, 50, 8) is None
    mixed = with_token_costs(plain, models=("m1",))
    tables = token_tables(mixed.models, 50, 8)
    assert tables is not None
    for row in (0, 2):  # plain models: the runtime table, whatever the batch holds
        assert tables.seconds(row, np.arange(5)) == mixed.models[row].runtime.table(8)[5]
    assert sample_weights(mixed.models[0]) is None
    w = sample_weights(mixed.models[1])
    assert w is not None and w.mean() == pytest.approx(1.0) and w.min() < 0.5 < 1.5 < w.max()


def test_bad_token_data_is_refused() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        TokenCost(_costs({1: 1.0}, {1: 1.0}), np.array([1, 2]), np.array([1]), np.array([0, 0]))
    with pytest.raises(ValueError, match="prefill_ms_per_token needs"):
        TokenCost(_costs({1: -1.0}, {1: 1.0}), np.array([1]), np.array([1]), np.array([0]))
    prof = make_toy_profile(n=3, n_models=1)
    short = TokenCost(_costs({1: 1.0}, {1: 1.0}), np.array([1, 2]), np.array([1, 1]), np.array([0, 0]))
    with pytest.raises(ValueError, match="token counts for 2 samples, not 3"):
        dataclasses.replace(prof, models=(dataclasses.replace(prof.models[0], tokens=short),))


def test_an_llm_profile_loads_its_token_costs_and_keeps_them_through_save_calibrate_and_split(tmp_path: Path) -> None:
    prof = load_profile(LLM_PROFILE)
    small = prof.models[prof.index("smollm2-135m")]
    assert small.tokens is not None and small.tokens.costs.task == "llm-scoring"
    assert len(small.tokens.prompt_tokens) == prof.n_samples and small.tokens.work_tokens.min() >= 13
    cal = calibrate(prof, {"smollm2-135m": 1.5}, source="a test")
    out = load_profile(save_profile(cal, tmp_path / "cal"))
    got = out.models[out.index("smollm2-135m")].tokens
    assert got is not None and got.costs == small.tokens.costs
    assert np.array_equal(got.prompt_tokens, small.tokens.prompt_tokens)
    assert np.array_equal(got.scored_tokens, small.tokens.scored_tokens)
    # calibration scales the runtime, so every batch's token-priced cost scales with it
    before, after = token_tables(prof.models, prof.n_samples, 8), token_tables(out.models, out.n_samples, 8)
    assert before is not None and after is not None
    row = prof.index("smollm2-135m")
    assert after.seconds(row, np.array([3, 9])) == pytest.approx(1.5 * before.seconds(row, np.array([3, 9])))
    part = small.tokens.subset(np.array([2, 0]))
    assert part.prompt_tokens.tolist() == small.tokens.prompt_tokens[[2, 0]].tolist()


def test_token_counts_for_unknown_or_missing_samples_name_the_file(tmp_path: Path) -> None:
    d = tmp_path / "p"
    shutil.copytree(LLM_PROFILE, d)
    path = d / "llm" / "tokens" / "gemma3-270m.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")  # the last sample has no counts
    with pytest.raises(ProfileError, match="no token counts for sample_id") as err:
        load_profile(d)
    assert "gemma3-270m.csv" in str(err.value)
    path.write_text("\n".join([*lines, "nosuch,1,0,2"]) + "\n")
    with pytest.raises(ProfileError, match=r"'nosuch' is not in labels\.csv") as err:
        load_profile(d)
    assert "gemma3-270m.csv" in str(err.value)


def test_the_fixed_and_per_token_fit_keeps_both_parts_non_negative() -> None:
    from cascadeserve.models.timing import fit_fixed_and_slope

    tokens = np.array([10.0, 20.0, 30.0, 40.0])
    assert fit_fixed_and_slope(tokens, 50.0 + 2.0 * tokens, 9.0) == pytest.approx((50.0, 2.0))
    assert fit_fixed_and_slope(tokens, np.array([90.0, 80.0, 70.0, 60.0]), 9.0) == pytest.approx((75.0, 0.0))
    assert fit_fixed_and_slope(tokens, 4.0 * tokens - 20.0, 9.0) == pytest.approx((0.0, 80.0 / 25.0))
    assert fit_fixed_and_slope(np.full(4, 10.0), np.full(4, 100.0), 3.0) == pytest.approx((70.0, 3.0))
