"""Shared fixtures: small deterministic profiles that every test area can use.

``toy_profile`` is synthetic: three models of rising cost and accuracy whose scores come from a seeded RNG,
so certainty and correctness are correlated the way real models' are (a surer model is more often right).
``real_profile`` is the committed profile of a small real model family (scikit-learn models on TweetEval
sentiment, measured on this project's CI-class machine; see tests/data/README.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, load_profile

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def make_toy_profile(n: int = 2000, seed: int = 0, n_models: int = 3) -> Profile:
    rng = np.random.default_rng(seed)
    models = [
        ModelProfile(f"m{i}", 100.0 * (i + 1), RuntimeCurve((1, 8, 64), (1.0 * (i + 1), 3.0 * (i + 1), 10.0 * (i + 1))))
        for i in range(n_models)
    ]
    labels = rng.integers(0, 3, n)
    scores = {m.name: rng.random((n, 3)) + np.eye(3)[labels] * (i + 1) * 0.3 for i, m in enumerate(models)}
    return Profile.from_scores("toy", models, labels, scores, device="synthetic", source="tests/conftest.py")


@pytest.fixture(scope="session")
def toy_profile() -> Profile:
    return make_toy_profile()


@pytest.fixture(scope="session")
def real_profile() -> Profile:
    path = DATA / "profiles" / "tweets-sklearn"
    if not path.is_dir():
        pytest.skip("tests/data/profiles/tweets-sklearn is not built yet")
    return load_profile(path)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = SHARED / "data"
    if not path.is_dir():
        pytest.skip("../shared/data is not beside the checkout")
    return path


@pytest.fixture(scope="session", autouse=True)
def _compiled_simulator() -> None:
    """Compile the simulator's compiled loop (or load it from numba's on-disk cache) once per test session, before
    any test: otherwise the first test that simulates would pay for it (tens of seconds on a cold cache)."""
    from cascadeserve.simulate.warm import warm_up

    warm_up()
