"""Serving a vote stage (``profile/vote.py``): its members run one after the other on the stage's device, and
:func:`~cascadeserve.profile.vote.vote_shares`, the rule that made the profile's records, turns their answers into
the stage's scores.

A plan names a vote stage by its members (``lr-chars+minilm-l3:weighted``); nothing needs to be configured for
it: :func:`with_vote_models` builds the stage from the members the models config already has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from cascadeserve.errors import CascadeServeError
from cascadeserve.models.base import Generated
from cascadeserve.profile.certainty import CertaintyFn, certainty_function
from cascadeserve.profile.vote import Vote, vote_shares
from cascadeserve.runtime.device import ModelFn

__all__ = ["VoteModel", "with_vote_models"]


class VoteModel:
    """``scores = f(batch)`` of a vote stage: the vote shares of its members' labels."""

    def __init__(self, vote: Vote, members: Mapping[str, ModelFn], certainty: CertaintyFn) -> None:
        self.vote = vote
        self.members = tuple(members[m] for m in vote.members)
        self.certainty = certainty

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        scores = []
        for name, fn in zip(self.vote.members, self.members, strict=True):
            out = fn(batch)
            if isinstance(out, Generated):
                raise ValueError(f"vote member {name!r} answered with text; only label scores can vote")
            scores.append(np.asarray(out, dtype=np.float64))
        preds = np.stack([s.argmax(axis=1) for s in scores])
        if self.vote.kind == "weighted":
            weights = np.stack([self.certainty(s) for s in scores])
        else:
            weights = np.ones(preds.shape)
        return vote_shares(preds, weights, max(max(s.shape[1] for s in scores), 2))


def with_vote_models(models: Mapping[str, ModelFn], needed: Iterable[str], certainty: str) -> dict[str, ModelFn]:
    """``models`` plus a :class:`VoteModel` for each vote stage in ``needed`` whose members ``models`` has."""
    out = dict(models)
    for name in needed:
        vote = None if name in out else Vote.parse(name, out)
        if vote is None:
            continue
        if certainty != "margin":
            # the profile's records of a vote stage weigh members by margin and rank the winner's lead by margin
            raise CascadeServeError(
                f"vote stage {name!r} needs the margin certainty (its profile records use it); "
                f"the models config sets certainty: {certainty}"
            )
        out[name] = VoteModel(vote, out, certainty_function("margin"))
    return out
