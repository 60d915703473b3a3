"""A vote stage served on worker threads answers what the profile's records say (runtime/vote.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from cascadeserve.cascade import Cascade
from cascadeserve.errors import CascadeServeError
from cascadeserve.plan import Device, fixed_plan
from cascadeserve.policy.forwarding import sure_mask
from cascadeserve.profile import ModelProfile, Profile, RuntimeCurve, Vote, margin, with_votes
from cascadeserve.runtime import RuntimeOptions, local_runtime
from cascadeserve.runtime.vote import VoteModel, with_vote_models

N = 40
rng = np.random.default_rng(7)
LABELS = rng.integers(0, 3, N)
SCORES = {m: rng.random((N, 3)) for m in ("a", "b", "c")}  # each sample's scores, looked up by its id


def _model(name: str):  # type: ignore[no-untyped-def]
    def predict(batch: np.ndarray) -> np.ndarray:
        return SCORES[name][np.asarray(batch, dtype=np.int64)]

    return predict


def _profile() -> Profile:
    models = [ModelProfile(m, 10.0, RuntimeCurve((1, 8), (1.0, 2.0))) for m in ("a", "b", "c")]
    return Profile.from_scores("three", models, LABELS, SCORES)


@pytest.mark.parametrize("kind", ["weighted", "majority"])
def test_a_vote_model_scores_as_the_records_say(kind: str) -> None:
    prof = _profile()
    vote = Vote.of(prof, ("a", "b", "c"), kind)
    voted = with_votes(prof, [vote])
    fn = with_vote_models({m: _model(m) for m in "abc"}, [vote.name, "a"], "margin")[vote.name]
    assert isinstance(fn, VoteModel)
    scores = fn(np.arange(N))
    assert scores.argmax(axis=1).tolist() == voted.predictions[-1].tolist()
    np.testing.assert_allclose(margin(scores), voted.certainties[-1], atol=1e-12)


def test_a_vote_stage_needs_the_margin_certainty() -> None:
    with pytest.raises(CascadeServeError, match="needs the margin certainty"):
        with_vote_models({m: _model(m) for m in "ab"}, ["a+b:weighted"], "max_probability")
    # names that are no vote of known models are left for the runtime's own check to name
    assert set(with_vote_models({"a": _model("a")}, ["a+z:weighted", "a"], "max_probability")) == {"a"}


def test_a_cascade_ending_in_a_vote_is_served_with_the_recorded_answers() -> None:
    prof = _profile()
    vote = Vote.of(prof, ("b", "c"), "weighted")
    voted = with_votes(prof, [vote])
    thr = float(np.median(voted.certainties[0]))  # a answers about half, the vote the rest
    plan = fixed_plan(voted, Cascade(("a", vote.name), (thr,)), (Device(name="d0", memory_mb=100),))
    rt = local_runtime(plan, {m: _model(m) for m in "abc"}, options=RuntimeOptions(run_producer=False))

    async def serve() -> list[tuple[int, str]]:
        await rt.start()
        reqs = [r for i in range(N) for r in rt.submit([i])]
        answers = await asyncio.gather(*(r.future for r in reqs))
        await rt.stop()
        return [(a.label, a.model) for a in answers]

    got = asyncio.run(serve())
    a, v = voted.index("a"), voted.index(vote.name)
    sure = sure_mask(voted.certainties[a], thr)  # the exit rule
    want = [
        (int(voted.predictions[a, i]), "a") if sure[i] else (int(voted.predictions[v, i]), vote.name) for i in range(N)
    ]
    assert got == want
    assert 0 < sure.sum() < N  # both stages answered some
