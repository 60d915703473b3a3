"""The serving host's contention: a batch runs slower while the host's other devices are busy.

``profile measure`` times each model alone. On a host whose devices share CPU cores, memory bandwidth or a PCIe
link (a 2-core box serving 2 CPU "devices", several small GPUs behind one bus), a batch that starts while the other
devices run their own batches takes longer than one that starts on an idle host. A profile may record, per model,
``busy_factor``: how many times slower one of its batches runs when **every** other device of the host is busy
than when none is (1, the default: no contention). ``profile calibrate`` measures it on the serving host
(:mod:`cascadeserve.runtime.costs` fits each model's batch times against the share of the other devices busy when
each batch started).

The rule (:func:`contended`, written once): a batch that starts at ``t`` while ``k`` of the host's ``n`` other
devices are busy takes ``seconds · (1 + (busy_factor − 1) · k / n)``; a device is busy at ``t`` when its batch
started before ``t`` and ends after it (so batches that start or end at the same instant do not depend on the order
in which an engine happens to apply them). The simulator's compiled loop and the emulated devices
(the reference simulator, ``serve --emulate``) apply it, so a plan's latency at low load and at its peak both come
from the same two numbers per model: its runtime alone and its busy factor.
"""

from __future__ import annotations

import numpy as np

__all__ = ["busy_at", "contended"]


def busy_at(t: float, busy: np.ndarray, starts: np.ndarray, ends: np.ndarray, me: int) -> int:
    """How many devices other than ``me`` run a batch at ``t``: ``busy``, started before ``t``, ending after it
    (per device; plain arrays, so the compiled loop runs this very function)."""
    k = 0
    for d in range(busy.shape[0]):
        if d != me and busy[d] and starts[d] < t < ends[d]:
            k += 1
    return k


def contended(seconds: float, busy_factor: float, others_busy: int, others: int) -> float:
    """The rule (module docstring): plain numbers, so the compiled simulator loop runs this very function."""
    if others <= 0 or busy_factor == 1.0:
        return seconds
    return seconds * (1.0 + (busy_factor - 1.0) * others_busy / others)
