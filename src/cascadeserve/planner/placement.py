"""SP3's model placement: start with every needed model on every device, prune greedily until memory fits.

The utility of pruning replica ``r`` (paper Eq. 4) weighs the over-allocated memory it frees against how well the
load can still be balanced without it:

    util(r) = Σ_d min(m_over(d), m_freed(d, r)) / u_max(r)

where ``u_max(r)`` is the worst device utilisation over all loads (one per distinct cascade in the plan, at its
highest QPS) when ``r`` is removed, found with the load-balancing LP. The numerator is the over-allocated memory
that pruning ``r`` frees, as the paper's text describes it; the equation as printed,
``Σ_d max(0, m_over(d) − m_freed(d, r))``, would instead favour replicas that free *less* memory. Pruning scores
``−∞`` when it would drop a model below its required number of replicas (one, or more once SP4 has named the
model as a bottleneck) or when the LP says the load no longer fits (``u > 1``). If every candidate scores ``−∞``
while a device is still over-full, no placement can realise the cascades: :class:`PlacementError`.

Speed: replicas of a model on devices with the same capacity and the same set of models are interchangeable,
so ``u_max`` is found once per such class, and a load whose cascade does not use the model is unaffected. Only
``u`` is needed here (not the LP's shares), and a replica's runtime does not depend on its device, so ``u`` has a
closed form (:func:`min_max_util`, Hall's condition for the transportation problem): the LP's optimum, without a
solver call; above :data:`HALL_MAX_MODELS` models with load it falls back to the LP.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cascadeserve.planner.lp import balance

__all__ = ["HALL_MAX_MODELS", "Load", "PlacementError", "min_max_util", "place_replicas"]

HALL_MAX_MODELS = 12  # 2^12 model subsets; above that the LP is cheaper


@dataclass(frozen=True)
class Load:
    """A load the placement must carry: QPS per model and seconds per sample per model."""

    demand: Mapping[str, float]
    runtime_s: Mapping[str, float]


class PlacementError(Exception):
    """No placement fits memory while carrying the loads; ``models`` are the ones that could not be kept."""

    def __init__(self, message: str, models: Sequence[str]) -> None:
        super().__init__(message)
        self.models = tuple(models)


def min_max_util(replicas: Sequence[tuple[str, int]], load: Load) -> float | None:
    """The load-balancing LP's optimal ``u`` (:func:`~cascadeserve.planner.lp.balance`) in closed form, or
    ``None`` when more than :data:`HALL_MAX_MODELS` models carry load.

    Every replica of model ``m`` costs ``runtime_s[m]`` per sample wherever it is, so the LP spreads each model's
    work ``W_m = demand[m] · runtime_s[m]`` over the devices holding it, and a maximum utilisation ``u`` is
    reachable exactly when every set ``S`` of models fits on the devices holding any of them:
    ``Σ_{m∈S} W_m ≤ u · |N(S)|`` (Hall's condition; max-flow/min-cut). So ``u = max_S W(S) / |N(S)|``, and ``inf``
    when a model with work has no replica.
    """
    need = [m for m, d in load.demand.items() if d > 0]
    placed = {m for m, _ in replicas}
    if any(m not in placed for m in need):
        return math.inf  # as the LP: a model with demand and no replica cannot be served
    models = [m for m in need if load.runtime_s.get(m, 0.0) > 0]
    if not models:
        return 0.0
    k = len(models)
    if k > HALL_MAX_MODELS:
        return None
    bit = {m: 1 << i for i, m in enumerate(models)}
    masks: dict[int, int] = {}
    for m, d in replicas:
        b = bit.get(m)
        if b is not None:
            masks[d] = masks.get(d, 0) | b
    dev_masks = np.fromiter(masks.values(), dtype=np.int64, count=len(masks))
    subsets = np.arange(1, 1 << k, dtype=np.int64)
    n_hold = ((subsets[:, None] & dev_masks[None, :]) != 0).sum(axis=1)
    work = np.array([load.demand[m] * load.runtime_s[m] for m in models])
    in_s = (subsets[:, None] >> np.arange(k)[None, :]) & 1
    w_s = in_s @ work
    if np.any(n_hold == 0):
        return math.inf
    return float(np.max(w_s / n_hold))


def _u(replicas: Sequence[tuple[str, int]], load: Load, n_devices: int) -> float:
    hall = min_max_util(replicas, load)
    if hall is not None:
        return hall
    models = [m for m, _ in replicas]
    devs = [d for _, d in replicas]
    t = [load.runtime_s.get(m, 0.0) for m in models]
    return balance(models, devs, t, load.demand, n_devices).u


def place_replicas(
    memory_mb: Mapping[str, float],
    device_memory_mb: Sequence[float],
    loads: Sequence[Load],
    required: Mapping[str, int] | None = None,
    allowed: Callable[[str, int], bool] | None = None,
) -> list[tuple[str, int]]:
    """Greedy pruning; returns ``(model, device index)`` replicas that fit every device's memory.

    ``memory_mb`` lists the needed models and their memory per replica. ``required[m]`` is the least number of
    replicas model ``m`` must keep (default 1). ``allowed(m, d)``: whether model ``m`` may go on device ``d`` at
    all (an upstream stage only on its own device, :meth:`~cascadeserve.plan.Device.holds`); default: anywhere.
    """
    n_dev = len(device_memory_mb)
    req = {m: max(1, int((required or {}).get(m, 1))) for m in memory_mb}
    reps: list[tuple[str, int]] = [
        (m, d)
        for d in range(n_dev)
        for m in memory_mb
        if memory_mb[m] <= device_memory_mb[d] + 1e-9 and (allowed is None or allowed(m, d))
    ]
    for m in memory_mb:
        have = sum(1 for mm, _ in reps if mm == m)
        if have < req[m]:
            where = "any device" if have == 0 else f"{req[m]} devices"
            raise PlacementError(f"model {m!r} ({memory_mb[m]:g} MB) does not fit on {where}", [m])

    def used(d: int) -> float:
        return sum(memory_mb[m] for m, dd in reps if dd == d)

    while True:
        over = [max(0.0, used(d) - device_memory_mb[d]) for d in range(n_dev)]
        if max(over) <= 1e-9:
            return sorted(reps, key=lambda r: (r[1], r[0]))
        count = {m: sum(1 for mm, _ in reps if mm == m) for m in memory_mb}
        classes: dict[tuple[str, frozenset[str], float], tuple[str, int]] = {}
        for m, d in reps:
            if over[d] <= 0:
                continue
            sig = (m, frozenset(mm for mm, dd in reps if dd == d), float(device_memory_mb[d]))
            classes.setdefault(sig, (m, d))
        best: tuple[float, tuple[str, int]] | None = None
        for m, d in sorted(classes.values(), key=lambda r: (r[1], r[0])):
            if count[m] - 1 < req[m]:
                continue
            rest = [r for r in reps if r != (m, d)]
            u_max = 0.0
            for load in loads:
                if load.demand.get(m, 0.0) <= 0:
                    continue
                u_max = max(u_max, _u(rest, load, n_dev))
                if u_max > 1.0 + 1e-9:
                    break
            if u_max > 1.0 + 1e-9:
                continue
            freed = min(over[d], memory_mb[m])
            util = freed / max(u_max, 1e-9)
            if best is None or util > best[0] + 1e-12:
                best = (util, (m, d))
        if best is None or not math.isfinite(best[0]) or best[0] <= 0:
            stuck = sorted({m for m, d in reps if over[d] > 0})
            raise PlacementError(
                "no replica can be pruned without overloading a device or dropping a needed model", stuck
            )
        reps.remove(best[1])
