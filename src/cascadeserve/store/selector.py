"""The selection layer's state keeper: applies :mod:`cascadeserve.policy.selection` per application and context.

A :class:`Selector` holds an application's alternatives, its policy (exp3 or exp4) and a
:class:`~cascadeserve.store.SelectionStore`. It reads the context's state (else the global one, else uniform),
draws exp3's uniform number from its own seeded generator, and on feedback writes the updated context state and
the updated global state back to the store, so the weights survive a restart. The decisions themselves are the
policy's pure functions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from cascadeserve.policy.selection import (
    Ensemble,
    Pick,
    SelectionPolicy,
    SelectionState,
    exp3_pick,
    exp3_update,
    exp4_combine,
    exp4_update,
)
from cascadeserve.store.selection import SelectionStore

__all__ = ["GLOBAL", "Selector"]

GLOBAL = ""  # the context of an application's global state


class Selector:
    """exp3 or exp4 over ``alternatives`` for application ``app``, with state in ``store``."""

    def __init__(
        self,
        app: str,
        alternatives: Sequence[str],
        policy: SelectionPolicy,
        store: SelectionStore,
        *,
        eta: float = 0.1,
        gamma: float = 0.05,
        seed: int = 0,
    ) -> None:
        if policy not in ("exp3", "exp4"):
            raise ValueError(f"selection policy {policy!r} is not one of exp3, exp4")
        if not alternatives:
            raise ValueError("a selection needs at least one alternative")
        self.app = app
        self.alternatives = tuple(alternatives)
        self.policy: SelectionPolicy = policy
        self.store = store
        self.eta = eta
        self.gamma = gamma
        self._rng = random.Random(seed)

    def state(self, context: str = GLOBAL) -> SelectionState:
        """The weights a request of ``context`` is served with."""
        st = self.store.get(self.app, context) if context else None
        if st is None:
            st = self.store.get(self.app, GLOBAL)
        if st is None or len(st.log_weights) != len(self.alternatives):
            st = SelectionState.uniform(len(self.alternatives))
        return st

    def choose(self, context: str = GLOBAL) -> Pick:
        """exp3: the alternative that serves this request."""
        return exp3_pick(self.state(context), self._rng.random(), self.gamma)

    def combine(self, labels: Sequence[int | None], context: str = GLOBAL) -> Ensemble:
        """exp4: the weighted vote of the alternatives' labels."""
        return exp4_combine(self.state(context), labels)

    def _write(self, context: str, update: SelectionState, global_update: SelectionState) -> None:
        if context:
            self.store.put(self.app, context, update)
        self.store.put(self.app, GLOBAL, global_update)

    def feedback_exp3(self, pick: Pick, correct: bool, context: str = GLOBAL) -> SelectionState:
        """Apply exp3's update for the alternative that answered; returns the context's new state."""
        loss = 0.0 if correct else 1.0
        new = exp3_update(self.state(context), pick.alternative, loss, pick.probability, self.eta)
        glob = new if not context else exp3_update(self.state(), pick.alternative, loss, pick.probability, self.eta)
        self._write(context, new, glob)
        return new

    def feedback_exp4(self, labels: Sequence[int | None], label: int, context: str = GLOBAL) -> SelectionState:
        """Apply exp4's update to every alternative that answered; returns the context's new state."""
        losses = [None if x is None else float(x != label) for x in labels]
        new = exp4_update(self.state(context), losses, self.eta)
        glob = new if not context else exp4_update(self.state(), losses, self.eta)
        self._write(context, new, glob)
        return new
