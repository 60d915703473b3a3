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
in which an engine happens to apply them). Only devices of one host contend (:func:`host_groups`): an upstream
stage's device waits on another server, so its batches neither slow this host's devices nor are slowed by them.
The simulator's compiled loop and the emulated devices
(the reference simulator, ``serve --emulate``) apply it, so a plan's latency at low load and at its peak both come
from the same two numbers per model: its runtime alone and its busy factor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["HostFit", "busy_at", "contended", "fit_contention", "host_groups", "host_peers", "host_share"]

MIN_SPREAD = 0.2  # the busy shares must span at least this much for a fit (else only the mean is known)


def host_groups(upstream: Sequence[bool]) -> np.ndarray:
    """Which host each device is on, given whether each is an upstream stage's device: 0 for this host's devices,
    a host of its own (1, 2, ...) for each upstream one."""
    up = np.asarray(upstream, dtype=bool)
    return np.where(up, np.cumsum(up), 0).astype(np.int64)


def host_peers(group: np.ndarray, me: int) -> int:
    """How many devices other than ``me`` share its host (the rule's ``n``)."""
    n = 0
    for d in range(group.shape[0]):
        if d != me and group[d] == group[me]:
            n += 1
    return n


def busy_at(t: float, busy: np.ndarray, starts: np.ndarray, ends: np.ndarray, me: int, group: np.ndarray) -> int:
    """How many devices other than ``me`` on its host (``group``, :func:`host_groups`) run a batch at ``t``:
    ``busy``, started before ``t``, ending after it (per device; plain arrays, so the compiled loop runs this very
    function)."""
    k = 0
    for d in range(busy.shape[0]):
        if d != me and group[d] == group[me] and busy[d] and starts[d] < t < ends[d]:
            k += 1
    return k


def host_share(others_busy: int, others: int) -> float:
    """The rule's ``k / n``: the share of the other devices busy (0 on a one-device host)."""
    return others_busy / others if others > 0 else 0.0


def contended(seconds: float, busy_factor: float, share: float) -> float:
    """The rule (module docstring): plain numbers, so the compiled simulator loop runs this very function."""
    if busy_factor == 1.0 or share == 0.0:
        return seconds
    return seconds * (1.0 + (busy_factor - 1.0) * share)


@dataclass(frozen=True)
class HostFit:
    """A model's batch times against the host's load: ``alone`` (measured / profiled when no other device is busy)
    and ``busy_factor`` (how much slower with all of them busy), fitted on ``batches`` with mean share ``share``."""

    alone: float
    busy_factor: float
    batches: int
    share: float


def fit_contention(ratios: np.ndarray, shares: np.ndarray) -> HostFit | None:
    """``ratio ≈ alone · (1 + (busy_factor − 1) · share)`` by least squares (``alone`` > 0, ``busy_factor`` ≥ 1);
    None when the shares do not spread over at least :data:`MIN_SPREAD` or fewer than 10 batches were seen."""
    r = np.asarray(ratios, dtype=np.float64)
    s = np.asarray(shares, dtype=np.float64)
    if len(r) < 10 or float(np.ptp(s)) < MIN_SPREAD:
        return None
    slope, alone = (float(v) for v in np.polyfit(s, r, 1))
    if alone <= 0:
        return None
    if slope <= 0:  # no slower when busy (or faster: larger batches at load amortise a fixed cost): the mean alone
        return HostFit(float(r.mean()), 1.0, len(r), float(s.mean()))
    return HostFit(alone, 1.0 + slope / alone, len(r), float(s.mean()))
