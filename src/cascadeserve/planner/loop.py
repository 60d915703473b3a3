"""Algorithm 1 of the paper: cycle through the submodules, send errors back, stop when a cycle changes nothing.

Each submodule is a callable ``module(error) -> Step``. Called with ``error=None`` it optimises its subproblem
with the others held fixed; called with the error that the *next* submodule raised, it either resolves it
(adjusts its own solution and answers ok) or passes an error further back. The loop:

* ok moves forward (``cur = (cur + 1) % n``); an error moves back (``cur = cur - 1``);
* an error that the first submodule cannot resolve is final (:class:`LoopInfeasible`);
* it has converged when ``n`` consecutive calls answered ok without changing anything, i.e. one full cycle
  changed nothing;
* a hard cap on submodule calls stops a run that would not converge; the result says whether it was hit (it is
  reported by the planner, never silently swallowed).

The loop knows nothing about plans, so tests drive it with small fake submodules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["LoopInfeasible", "LoopResult", "Step", "run_loop"]

E = TypeVar("E")


@dataclass(frozen=True)
class Step(Generic[E]):
    """A submodule's answer: ``error`` (``None`` = ok) and whether it changed the shared solution."""

    error: E | None = None
    changed: bool = False


@dataclass
class LoopResult:
    iterations: int = 0  # submodule calls in all
    cycles: int = 0  # times the last submodule answered ok
    calls: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    converged: bool = False
    hit_cap: bool = False
    trail: list[tuple[int, bool]] = field(default_factory=list)  # (submodule, ok) per call, for tests and debugging


class LoopInfeasible(Exception, Generic[E]):
    """An error reached the first submodule and was not resolved there."""

    def __init__(self, error: E, result: LoopResult) -> None:
        super().__init__(str(error))
        self.error = error
        self.result = result


def run_loop(
    modules: Sequence[Callable[[E | None], Step[E]]],
    *,
    max_iterations: int = 10_000,
    keep_trail: bool = False,
) -> LoopResult:
    """Run Algorithm 1 over ``modules``; raise :class:`LoopInfeasible` when an error cannot be resolved."""
    n = len(modules)
    if n == 0:
        raise ValueError("Algorithm 1 needs at least one submodule")
    res = LoopResult(calls=[0] * n, seconds=[0.0] * n)
    cur = 0
    error: E | None = None
    quiet = 0
    while True:
        if res.iterations >= max_iterations:
            res.hit_cap = True
            return res
        t0 = time.perf_counter()
        step = modules[cur](error)
        res.seconds[cur] += time.perf_counter() - t0
        res.calls[cur] += 1
        res.iterations += 1
        ok = step.error is None
        if keep_trail:
            res.trail.append((cur, ok))
        if ok:
            quiet = quiet + 1 if not step.changed else 0
            error = None
            if cur == n - 1:
                res.cycles += 1
            cur = (cur + 1) % n
            if quiet >= n:
                res.converged = True
                return res
        else:
            quiet = 0
            error = step.error
            cur -= 1
            if cur < 0:
                assert error is not None
                raise LoopInfeasible(error, res)
