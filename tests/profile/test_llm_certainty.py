"""Certainty signals for LLM answers on hand-checked examples; AUROC; calibration and the side files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from cascadeserve.errors import ProfileError
from cascadeserve.profile import CERTAINTY_FUNCTIONS
from cascadeserve.profile.llm_certainty import (
    GENERATION_SIGNALS,
    LLM_SIGNALS,
    LogisticCalibration,
    auroc,
    generation_signals,
    scoring_signals,
)
from cascadeserve.profile.llm_side import (
    LLMCosts,
    read_calibration,
    read_costs,
    read_signals,
    read_tokens,
    signal_report,
    write_calibration,
    write_costs,
    write_signals,
    write_tokens,
)


def test_the_signal_names_are_registered() -> None:
    assert LLM_SIGNALS == (
        "option-margin",
        "option-max-probability",
        "option-entropy",
        "mean-logprob",
        "min-logprob",
        "q10-logprob",
        "first-token-margin",
    )
    assert {"option-margin", "option-max-probability", "option-entropy"} <= set(CERTAINTY_FUNCTIONS)


def test_generation_signals_by_hand() -> None:
    lps = [[-0.1, -0.5, -2.0], [-1.0], []]
    s = generation_signals(lps, [0.3, 0.9, 0.0])
    assert s["mean-logprob"][0] == pytest.approx(math.exp(-2.6 / 3))
    assert s["min-logprob"][0] == pytest.approx(math.exp(-2.0))
    # the 10 % quantile of (-2.0, -0.5, -0.1): 20 % of the way from -2.0 to -0.5
    assert s["q10-logprob"][0] == pytest.approx(math.exp(-2.0 + 0.2 * 1.5))
    assert s["first-token-margin"].tolist() == [0.3, 0.9, 0.0]
    assert [s[k][1] for k in ("mean-logprob", "min-logprob", "q10-logprob")] == pytest.approx([math.exp(-1.0)] * 3)
    assert all(s[k][2] == 0.0 for k in GENERATION_SIGNALS)  # an empty answer is no evidence


def test_scoring_signals_by_hand() -> None:
    s = scoring_signals(np.array([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]]))
    assert s["option-margin"] == pytest.approx([0.5, 0.0])
    assert s["option-max-probability"][0] == pytest.approx((0.7 - 1 / 3) / (2 / 3))


def test_auroc_counts_ordered_pairs_and_ties_half() -> None:
    # right answers at 0.9 and 0.3, wrong at 0.8 and 0.1: 3 of the 4 (right, wrong) pairs are ordered right
    assert auroc(np.array([0.9, 0.8, 0.3, 0.1]), np.array([1, 0, 1, 0])) == pytest.approx(0.75)
    assert auroc(np.array([0.5, 0.5]), np.array([1, 0])) == pytest.approx(0.5)
    assert math.isnan(auroc(np.array([0.1, 0.2]), np.array([1, 1])))


def test_calibration_fits_and_round_trips(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 4000)
    y = rng.uniform(0, 1, 4000) < 1 / (1 + np.exp(-(6 * x - 3)))
    fit = LogisticCalibration.fit(x, y)
    assert fit.a == pytest.approx(6, abs=0.6) and fit.b == pytest.approx(-3, abs=0.4) and fit.n == 4000
    # a one-sided set stays finite and monotone
    flat = LogisticCalibration.fit(np.array([0.2, 0.8]), np.array([1, 1]))
    assert math.isfinite(flat.a) and flat(np.array([0.5]))[0] > 0.5
    write_calibration(tmp_path, "m", {"mean-logprob": fit})
    write_calibration(tmp_path, "n", {"option-margin": flat})
    back = read_calibration(tmp_path)
    assert back["m"]["mean-logprob"] == fit and back["n"]["option-margin"] == flat
    np.testing.assert_allclose(back["m"]["mean-logprob"](x[:5]), fit(x[:5]))


def test_side_files_round_trip_and_are_optional(tmp_path: Path) -> None:
    assert read_signals(tmp_path, "m") is None and read_tokens(tmp_path, "m") is None
    assert read_costs(tmp_path) == {} and read_calibration(tmp_path) == {} and signal_report(tmp_path, ["m"]) == []
    write_signals(tmp_path, "m", ["a", "b", "c"], np.array([True, False, True]), {"s": [0.9, 0.1, 0.5]})
    ids, correct, sig = read_signals(tmp_path, "m") or ([], np.array([]), {})
    assert ids == ["a", "b", "c"] and correct.tolist() == [True, False, True] and sig["s"].tolist() == [0.9, 0.1, 0.5]
    (row,) = signal_report(tmp_path, ["m"])
    assert row == {"model": "m", "signal": "s", "accuracy": pytest.approx(2 / 3), "samples": 3, "auroc": 1.0}
    write_tokens(tmp_path, "m", ["a", "b", "c"], [10, 11, 12], [0, 0, 0], [3, 3, 4])
    tok = read_tokens(tmp_path, "m")
    assert tok is not None and tok.prompt_tokens.tolist() == [10, 11, 12] and tok.scored_tokens.tolist() == [3, 3, 4]
    costs = LLMCosts("llm-generation", {1: 2.0, 4: 1.0}, {1: 10.0, 4: 12.0}, 500.0, 0.05, 40, 8, 41.5, 6.0)
    write_costs(tmp_path, "m", costs)
    assert read_costs(tmp_path) == {"m": costs}
    assert costs.batch_ms(2, 40, 6) == pytest.approx(40 * (2 - 1 / 3) + 6 * (10 + 2 / 3))
    (tmp_path / "llm" / "signals" / "m.csv").write_text("sample_id,correct,s\na,1,1.5\n")
    with pytest.raises(ProfileError, match=r"m\.csv, line 2, column s: expected a number in \[0, 1\], got '1\.5'"):
        read_signals(tmp_path, "m")
