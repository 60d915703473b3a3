"""Vote stages: a few models of the family answer together, and the label with the most votes wins.

A vote stage is a *virtual model* made of members of the profile. On a device, its batch runs the members one
after the other, so it costs the sum of their runtimes and needs the sum of their memory. Each member votes for its
label, with weight 1 (``majority``) or with its certainty (``weighted``); where no member is sure at all (every
certainty 0) a weighted vote counts heads instead. A tie goes to the most accurate member, which the stage's name
lists last: ``lr-chars+minilm-l3:weighted``.

Its scores are the vote *shares* (each label's part of the votes, a probability vector), so the margin certainty of
a vote stage is how far the winner leads: a vote stage can itself be an early stage of a cascade. The same function,
:func:`vote_shares`, makes the profile's records here and the served answers (``runtime/vote.py``), so the records
are what the server will answer. The records use the margin certainty; the server refuses a vote stage under any
other certainty function.

Why: a certainty-weighted vote of two cheap models can be more accurate than the family's best model, at a fraction
of its cost (Cocktail's observation). No cascade of single models can reach past its best model, so without vote
stages the planner could lose to an ensemble system in exactly the cells that need the most devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from cascadeserve.profile.certainty import margin
from cascadeserve.profile.profile import ModelProfile, Profile
from cascadeserve.profile.runtime import RuntimeCurve

__all__ = [
    "VOTE_KINDS",
    "Vote",
    "useful_votes",
    "vote_front",
    "vote_model",
    "vote_records",
    "vote_shares",
    "with_votes",
]

VOTE_KINDS = ("majority", "weighted")
_TIE = 1e-9  # the most accurate member's bonus: it wins ties and nothing else
_REF_BATCH = 32  # the batch size at which votes are compared by cost per sample


@dataclass(frozen=True)
class Vote:
    """Members (least accurate first: the last one wins ties) and how they vote."""

    members: tuple[str, ...]
    kind: str = "weighted"

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a vote needs at least one member")
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"a vote's members must differ: {self.members}")
        if self.kind not in VOTE_KINDS:
            raise ValueError(f"unknown vote kind {self.kind!r} (one of {', '.join(VOTE_KINDS)})")

    @property
    def name(self) -> str:
        return f"{'+'.join(self.members)}:{self.kind}"

    @staticmethod
    def parse(name: str, known: Iterable[str]) -> Vote | None:
        """The vote a model name stands for, if it is one over ``known`` models (else ``None``: a plain model)."""
        head, sep, kind = name.rpartition(":")
        if not sep or kind not in VOTE_KINDS:
            return None
        members = tuple(head.split("+"))
        have = set(known)
        if name in have or not all(m in have for m in members) or len(set(members)) != len(members):
            return None
        return Vote(members, kind)

    @staticmethod
    def of(profile: Profile, members: Iterable[str], kind: str = "weighted") -> Vote:
        """The vote of ``members`` named in the canonical order: ascending accuracy, then the profile's order."""
        order = sorted(members, key=lambda m: (float(profile.accuracies[profile.index(m)]), profile.index(m)))
        return Vote(tuple(order), kind)


def vote_shares(predictions: np.ndarray, weights: np.ndarray, n_classes: int) -> np.ndarray:
    """``[n, n_classes]`` vote shares from the members' ``predictions[k, n]`` and vote ``weights[k, n]`` (the last
    member wins ties). The one rule for the profile's records and the server's answers."""
    preds = np.asarray(predictions, dtype=np.int64)
    w = np.array(weights, dtype=np.float64)
    k, n = preds.shape
    w[:, w.sum(axis=0) <= 0] = 1.0  # nobody is sure: count heads
    score = np.zeros((n, n_classes))
    cols = np.arange(n)
    for i in range(k):
        np.add.at(score, (cols, preds[i]), w[i])
    score /= score.sum(axis=1, keepdims=True)
    score[cols, preds[-1]] += _TIE
    return score


def vote_records(profile: Profile, vote: Vote) -> tuple[np.ndarray, np.ndarray]:
    """The vote stage's prediction and (margin) certainty per validation sample."""
    rows = [profile.index(m) for m in vote.members]
    preds = profile.predictions[rows]
    weights = profile.certainties[rows] if vote.kind == "weighted" else np.ones(preds.shape)
    n_cls = int(max(int(profile.predictions.max()), int(profile.labels.max()))) + 1
    shares = vote_shares(preds, weights, max(n_cls, 2))
    return np.asarray(shares.argmax(axis=1), dtype=np.int64), margin(shares)


def _llm(m: ModelProfile) -> bool:
    """An LLM stage (its answers are text): token costs of another task than a text encoder's."""
    return m.tokens is not None and m.tokens.costs.task != "encode"


def vote_model(profile: Profile, vote: Vote) -> ModelProfile:
    """The stage's costs: members run one after the other on one device."""
    members = [profile.model(m) for m in vote.members]
    if any(_llm(m) for m in members):
        raise ValueError(f"vote {vote.name!r}: LLM stages cannot vote (their answers are text, not labels)")
    sizes = sorted({b for m in members for b in m.runtime.batch_sizes})
    ms = np.sum([m.runtime.ms_at(np.array(sizes)) for m in members], axis=0)
    caps = [m.max_batch for m in members if m.max_batch is not None]
    # contention stretches each member's part of the batch: the runtime-weighted mean of their busy factors
    alone = np.array([m.runtime.ms_at(np.array([1]))[0] for m in members])
    busy = float(np.dot(alone, [m.busy_factor for m in members]) / alone.sum())
    return ModelProfile(
        vote.name,
        float(sum(m.memory_mb for m in members)),
        RuntimeCurve(tuple(sizes), tuple(float(x) for x in ms)),
        max_batch=min(caps) if caps else None,
        busy_factor=busy,
    )


def with_votes(profile: Profile, votes: Sequence[Vote]) -> Profile:
    """``profile`` with the vote stages added as models (ones it already has are kept as they are)."""
    new = [v for v in dict.fromkeys(votes) if v.name not in profile.model_names]
    if not new:
        return profile
    records = [vote_records(profile, v) for v in new]
    return dataclasses.replace(
        profile,
        models=(*profile.models, *(vote_model(profile, v) for v in new)),
        predictions=np.vstack([profile.predictions, *(r[0][None, :] for r in records)]),
        certainties=np.vstack([profile.certainties, *(r[1][None, :] for r in records)]),
    )


def vote_front(profile: Profile, min_accuracy: float = 0.0, tol: float = 0.0) -> list[tuple[Vote, float, float]]:
    """(vote, accuracy, ms per sample at batch 32) on the accuracy/cost Pareto front of the family's votes (single
    models are votes of one; in a family of more than 8, votes of at most 3), cheapest first; votes below
    ``min_accuracy - tol`` are left out."""
    names = [m for m in profile.model_names if not _llm(profile.model(m))]
    # every subset up to 8 models (255 votes); past that, votes of at most 3 (a family of 20 has 1,350, not 10^6)
    largest = len(names) if len(names) <= 8 else 3
    cands: list[tuple[Vote, float, float]] = []
    for k in range(1, largest + 1):
        for members in combinations(names, k):
            for kind in ("majority",) if k == 1 else VOTE_KINDS:
                if kind == "majority" and k == 2:
                    continue  # two voters with ties to the better one = the better one alone
                vote = Vote.of(profile, members, kind)
                acc = float(np.mean(vote_records(profile, vote)[0] == profile.labels))
                if acc < min_accuracy - tol:
                    continue
                cost = sum(profile.model(m).runtime.per_sample_ms(_REF_BATCH) for m in members)
                cands.append((vote, acc, cost))
    keep = [c for c in cands if not any(o[1] >= c[1] and o[2] <= c[2] and (o[1] > c[1] or o[2] < c[2]) for o in cands)]
    if not keep and cands:  # nothing on the front reaches the target: keep the most accurate vote
        keep = [max(cands, key=lambda c: c[1])]
    return sorted(keep, key=lambda c: c[2])


def useful_votes(profile: Profile, limit: int = 1) -> tuple[Vote, ...]:
    """Up to ``limit`` vote stages worth planning with: the cheapest votes of two or more models on the front that
    are more accurate than every single model (below that, cascades of single models do the job)."""
    if limit <= 0 or len(profile.models) < 2:
        return ()
    best = float(profile.accuracies.max())
    return tuple(v for v, acc, _ in vote_front(profile) if len(v.members) > 1 and acc > best)[:limit]
