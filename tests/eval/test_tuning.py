"""The tuner's yardstick: an exhaustive grid on the same window, and the comparison on real validation windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascadeserve.eval.tuning import compare_on_windows, grid_search, windows_from_profile
from cascadeserve.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
CERT = np.array([[0.9, 1.0], [0.8, 1.0], [0.6, 1.0], [0.4, 1.0], [0.2, 1.0]])
PRED = np.array([[1, 1], [1, 1], [0, 1], [1, 1], [0, 1]])


def test_grid_finds_the_least_work_that_holds_the_target() -> None:
    g = grid_search(CERT, PRED, np.ones(5, dtype=np.int64), np.ones(5), np.array([1.0, 10.0]), 0.8)
    assert g.candidates == 101 and g.work_ms == pytest.approx(3.0) and g.accuracy == pytest.approx(0.8)
    assert g.thresholds == (0.21,)  # the least-work band is (0.2, 0.4]; all its points tie, the first wins
    # no grid point reaches 0.9 at less than 7 ms
    assert grid_search(CERT, PRED, np.ones(5, dtype=np.int64), np.ones(5), np.array([1.0, 10.0]), 0.9).work_ms == 7.0


def test_the_climber_matches_the_grid_on_real_windows() -> None:
    p = load_profile(ROOT / "profiles" / "digits")
    models = ("logreg", "mlp", "cnn")
    ms = np.array([p.models[p.index(m)].runtime.per_sample_ms(8) for m in models])
    wins = list(windows_from_profile(p, models, 300, 3, seed=0))
    rows = compare_on_windows(wins, ms, [0.96, 0.965], [0.5, 0.5])
    assert len(rows) == 6 and {r.target for r in rows} == {0.96, 0.965}
    held = [r for r in rows if r.grid_accuracy >= r.target]
    assert held and all(r.tuner_accuracy >= r.target for r in held)
    assert np.median([r.ratio for r in held]) >= 0.98
