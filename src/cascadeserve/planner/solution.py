"""The joint solution that Algorithm 1's submodules take turns improving (paper §4, Algorithm 1; appendix A).

Each submodule owns part of one shared solution: SP1 the frontier of candidate cascades, SP2 the cascade of every
QPS range (and, under an accuracy SLO, the cap on it), SP3 the replica placement and each range's load shares, SP4
the first stage's minimum queue lengths and the p95 its simulation predicted. A submodule reads the others' parts
and replaces its own; an error it raises travels back as an :class:`Issue`.

:class:`Solution` is frozen: a submodule returns a new one (``dataclasses.replace``), so every change is visible at
the point it is made and nothing else can change a solution behind a submodule's back. Its mappings are typed
read-only (``Mapping``) for the same reason: a submodule that wants to change one builds a new dict.

A submodule returns its solution *also when it raises an error*: some keep part of their work (SP3 clears the
shares of a range its LP cannot balance, SP4 keeps the queue lengths it found for the ranges that held), and the
next call, or the final message, sees it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cascadeserve.planner.problem import Problem, RepKey
from cascadeserve.planner.search import Candidate, Frontier

__all__ = ["Issue", "PlacedFor", "Solution", "empty_solution", "weighted_acc"]

# What a placement was made for: the models the assignment uses and the forced replica counts (SP3 re-places only
# when this changes).
PlacedFor = tuple[tuple[str, ...], tuple[tuple[str, int], ...]]


@dataclass(frozen=True)
class Issue:
    """An error travelling back through the submodules (Algorithm 1's ``error``)."""

    kind: str  # capacity | memory | batch | accuracy | final
    ranges: tuple[int, ...] = ()  # the QPS ranges it concerns (none: it is about the plan as a whole)
    models: tuple[str, ...] = ()  # the models to blame (SP3 adds replicas of these; SP2 may drop them)
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: ranges {list(self.ranges)} models {list(self.models)} {self.detail}".strip()


@dataclass(frozen=True)
class Solution:
    """What one cycle of Algorithm 1 may change. Per-range tuples have one entry per QPS range.

    * ``frontier`` (SP1): candidate cascades, cheapest first; ``None`` until SP1 has run, fixed afterwards.
    * ``assign`` (SP2): the frontier index of each range's cascade; empty until SP2 has run.
    * ``caps`` (SP2, accuracy SLO only): the costliest frontier index each range may use.
    * ``placement`` (SP3): the replicas, as (model, device index).
    * ``placed_for`` (SP3): what ``placement`` was computed for (:data:`PlacedFor`), to re-place only on change.
    * ``forced`` (SP3): the least number of replicas of a model, raised when SP4 names it a bottleneck.
    * ``shares`` (SP3): per range, each replica's share of its model's requests.
    * ``share_for`` (SP3): per range, the (cascade, placement) the shares were balanced for.
    * ``mq`` (SP4): per range, the minimum queue length of each first-stage replica.
    * ``p95`` (SP4): per range, the p95 (ms) of the simulation that accepted it; NaN until then.
    * ``busy`` (SP4): per range, the busiest device's busy fraction in that simulation at the range's check load.
    * ``memory_dropped`` (SP2): the models SP2 dropped from the plan to resolve a memory error, in order (the
      planner warns about those still absent from the final placement).
    """

    frontier: Frontier | None
    assign: tuple[int, ...]
    caps: tuple[int, ...]
    placement: tuple[RepKey, ...]
    placed_for: PlacedFor | None
    forced: Mapping[str, int]
    shares: tuple[Mapping[RepKey, float], ...]
    share_for: tuple[tuple[int, tuple[RepKey, ...]] | None, ...]
    mq: tuple[Mapping[RepKey, int], ...]
    p95: tuple[float, ...]
    busy: tuple[float, ...] = ()
    memory_dropped: tuple[str, ...] = ()

    @property
    def fr(self) -> Frontier:
        """The frontier, once SP1 has built it (every later submodule runs after SP1)."""
        assert self.frontier is not None
        return self.frontier

    def cand(self, r: int) -> Candidate:
        """The cascade assigned to range ``r``."""
        return self.fr[self.assign[r]]

    def base_batch(self, r: int) -> int:
        """Range ``r``'s first-stage batch: the largest minimum queue of its first model's replicas (1 if unset)."""
        first = self.cand(r).models[0]
        vals = [v for (m, _), v in self.mq[r].items() if m == first]
        return max(vals) if vals else 1

    def used_models(self) -> set[str]:
        """Every model some range's cascade uses (the ones SP3 must place)."""
        return {m for r in range(len(self.assign)) for m in self.cand(r).models}

    def ranges_using(self, models: Sequence[str]) -> tuple[int, ...]:
        return tuple(r for r in range(len(self.assign)) if set(self.cand(r).models) & set(models))

    def placement_key(self) -> PlacedFor:
        return tuple(sorted(self.used_models())), tuple(sorted(self.forced.items()))


def empty_solution(n_ranges: int) -> Solution:
    """The solution before SP1's first call: nothing chosen yet."""
    return Solution(
        frontier=None,
        assign=(),
        caps=(),
        placement=(),
        placed_for=None,
        forced={},
        shares=tuple({} for _ in range(n_ranges)),
        share_for=(None,) * n_ranges,
        mq=tuple({} for _ in range(n_ranges)),
        p95=(math.nan,) * n_ranges,
        busy=(math.nan,) * n_ranges,
    )


def weighted_acc(problem: Problem, frontier: Frontier, assign: Sequence[int]) -> float:
    """Time-weighted accuracy of an assignment: SP2's objective and the plan's reported accuracy."""
    return float(sum(w * frontier[a].accuracy for w, a in zip(problem.weights, assign, strict=True)))
