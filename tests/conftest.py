"""Shared fixtures: small deterministic profiles that every test area can use.

``toy_profile`` is synthetic: three models of rising cost and accuracy whose scores come from a seeded RNG,
so certainty and correctness are correlated the way real models' are (a surer model is more often right).
``real_profile`` is the committed profile of a small real model family (scikit-learn models on TweetEval
sentiment, measured on this project's CI-class machine; see tests/data/README.md).
"""

from __future__ import annotations

import dataclasses
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


@pytest.fixture(autouse=True)
def _server_state_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``serve`` a test runs (in process or as a child) keeps its state in a folder of its own, never in the
    checkout, so no test restores what another recorded."""
    monkeypatch.setenv("CASCADESERVE_STATE_DIR", str(tmp_path_factory.mktemp("server-state")))


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


def pytest_configure(config: pytest.Config) -> None:
    """Compile the simulator's compiled loop (or load it from numba's on-disk cache) before any test, and outside
    every test's timeout. Under xdist this runs in the controller before it starts the workers, so the workers load
    the cache instead of each compiling it: as a session fixture, a cold compile in each of two workers beside a
    busy machine (load 12 on 2 cores) ran past the 300 s timeout of the first test, and the fixture's error failed
    every test of the session."""
    from cascadeserve.simulate.warm import warm_up

    warm_up()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start this process's Ray instance now when a collected test runs on Ray, outside every test's timeout (as the
    compile above): beside 8 busy loops (load 13-19 on 2 cores) ``ray.init`` in the session fixture ran past the
    300 s timeout of the first Ray test, and that fixture's error failed every later Ray test of the worker. Under
    xdist each worker collects every test, so each starts the instance its Ray tests will use."""
    if any(_on_ray(item) for item in session.items):
        from tests.backends.backend_fixtures import start_ray

        start_ray()


def _on_ray(item: pytest.Item) -> bool:
    if "ray_session" in getattr(item, "fixturenames", ()):
        return True
    spec = getattr(item, "callspec", None)  # the backend fixture's "ray" parameter asks for Ray on demand
    # compared one by one, as strings: ``in`` would compare a numpy array parameter elementwise (and raise)
    return spec is not None and any(isinstance(v, str) and v == "ray" for v in spec.params.values())


def with_token_costs(profile: Profile, seed: int = 0, models: tuple[str, ...] = ("m1", "m2")) -> Profile:
    """``profile`` with token costs on ``models`` (profile/tokens.py): the first scores (prompts of 5-80 tokens,
    options of 1-3), the others generate (prompts of 5-80, answers of 0-40 steps), with measured-looking cost
    curves; the rest keep their plain runtimes."""
    from cascadeserve.profile.llm_side import LLMCosts
    from cascadeserve.profile.tokens import TokenCost

    rng = np.random.default_rng(seed)
    n = profile.n_samples
    out = []
    for m in profile.models:
        if m.name not in models:
            out.append(m)
            continue
        scoring = m.name == models[0]
        costs = LLMCosts(
            task="llm-scoring" if scoring else "llm-generation",
            prefill_ms_per_token={1: 0.02, 4: 0.05, 16: 0.15},
            decode_ms_per_step={1: 0.1, 4: 0.12, 16: 0.2},
            weights_mb=m.memory_mb,
            kv_cache_mb_per_token=0.01,
            prompt_tokens=40,
            decode_steps=8,
            mean_prompt_tokens=42.0,
            mean_output_tokens=0.0 if scoring else 20.0,
        )
        prompt = rng.integers(5, 81, n)
        output = np.zeros(n, dtype=np.int64) if scoring else rng.integers(0, 41, n)
        scored = rng.integers(1, 4, n) if scoring else np.zeros(n, dtype=np.int64)
        out.append(dataclasses.replace(m, tokens=TokenCost(costs, prompt, output, scored)))
    return dataclasses.replace(profile, models=tuple(out))
