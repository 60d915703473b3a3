"""SP1, cascade search (paper §4.2): the accuracy/work frontier that every other submodule chooses from.

The frontier (:func:`~cascadeserve.planner.search.search_cascades`) is built once, on SP1's first call. It does
not depend on the load or the hardware, so nothing a later submodule learns can improve it: SP1 answers later
calls with "ok, unchanged". The frontier already holds both the cheapest and the most accurate cascade, so an
error that travels all the way back to SP1 is final: the SLO is unreachable, and the planner explains why
(:mod:`cascadeserve.planner.explain`).
"""

from __future__ import annotations

from dataclasses import replace

from cascadeserve.planner.loop import Step
from cascadeserve.planner.problem import Problem
from cascadeserve.planner.search import search_cascades
from cascadeserve.planner.solution import Issue, Solution

__all__ = ["sp1"]


def sp1(problem: Problem, sol: Solution, error: Issue | None) -> tuple[Solution, Step[Issue]]:
    """Build the frontier on the first call; pass every error on (it is final)."""
    if error is not None:
        return sol, Step(error)  # the frontier already holds the cheapest and the most accurate cascade: final
    if sol.frontier is not None:
        return sol, Step()
    opts = problem.options
    frontier = search_cascades(problem.profile, levels=opts.levels, seed=opts.seed, method=opts.search_method)
    return replace(sol, frontier=frontier), Step(changed=True)
