"""Batch-time spread: served batches scatter around the time their rule gives, and a queue's tail feels it.

Every engine charges a batch what its rule says: the runtime curve at its size, or for an LLM stage what its longest
prompt and output cost (:mod:`cascadeserve.profile.tokens`), slowed by the host's load (:mod:`.host`). Served, the
same batch takes a little more one time and a little less the next (the CPU's caches and frequency, the allocator,
the other threads of the process). The mean is what calibration fixes; the scatter is not a mean, and near saturation
a queue's p95 grows with it (measured: SmolLM2 served at ~90 % busy on two devices, batches of one, their times'
p95 1.41–1.44× their mean where the token rule alone spreads them 1.27×; the simulated p95 missed the served one by
up to +27 %).

A model's ``batch_spread`` (:class:`~cascadeserve.profile.ModelProfile`, default 0: none) is the σ of a log-normal
factor of mean 1 on each batch's time: what served batches scatter *beyond* the rule. Calibration measures it
(:func:`residual_spread`: the served ratios' log-variance with the host's load and the batch sizes taken out, less
the log-variance the token rule already draws); every engine applies it the same way (:func:`spread_draws`): device
``d``'s ``k``-th batch (counting every model's), of model row ``m``, is ``draws[m, k mod N]`` times longer, from
one seeded table per device that the compiled loop and the emulated devices both index. So the reference and the
compiled engine stay identical to the bit, a run is repeatable, and a plan's mean costs (the planner's capacity) do
not move: each row of the table has mean exactly 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from cascadeserve.profile.tokens import PricedModel, token_tables

__all__ = [
    "MAX_SPREAD",
    "SPREAD_DRAWS",
    "SpreadFamily",
    "lognormal_sigma",
    "residual_spread",
    "rule_ratios",
    "served_spread",
    "spread_draws",
    "spread_table",
]

Z95 = 1.6448536269514722  # the standard normal's 95th percentile
MAX_SPREAD = Z95  # the widest σ a mean and a p95 can name (lognormal_sigma)
SPREAD_DRAWS = 4096  # draws per device and model: a batch takes the next, cyclically
MIN_SPREAD_BATCHES = 40  # fewer batches say too little about a p95


class SpreadModel(PricedModel, Protocol):
    """What the draws read of a :class:`~cascadeserve.profile.ModelProfile` (a protocol: that module imports this)."""

    @property
    def batch_spread(self) -> float: ...


class SpreadFamily(Protocol):
    """What the draws read of a :class:`~cascadeserve.profile.Profile`."""

    @property
    def models(self) -> Sequence[SpreadModel]: ...

    @property
    def n_samples(self) -> int: ...


def lognormal_sigma(mean: float, p95: float) -> float:
    """The σ of the log-normal whose mean and 95th percentile are these (0: a constant). ``p95/mean =
    exp(1.645σ − σ²/2)``, whose largest value is at σ = 1.645; a wider ratio than that takes σ = 1.645."""
    if mean <= 0 or p95 <= mean:
        return 0.0
    disc = Z95 * Z95 - 2.0 * math.log(p95 / mean)
    return Z95 - math.sqrt(disc) if disc > 0 else Z95


def _log_var(values: np.ndarray) -> float:
    """The variance of ``log(values)``, the top 1 % left out (a stalled batch says nothing of the usual scatter, and
    calibration's mean leaves it out too). Variances of logs add exactly for independent factors, whatever their
    shape: the token rule's scatter is nothing like a log-normal."""
    logs = np.sort(np.log(values))
    keep = logs[: max(int(np.ceil(0.99 * len(logs))), 1)]
    return float(keep.var())


def residual_spread(observed: np.ndarray, rule: np.ndarray | None = None) -> float | None:
    """The ``batch_spread`` of served batches: ``observed`` holds each batch's time over what its rule charges at
    its size (the host's load and each size's mean factor already divided out), ``rule`` the ratios the rule itself
    draws for batches of the same sizes (token costs; None or empty: the rule is a constant). The variance of the
    served batches' logs less the rule's (independent factors: their logs' variances add); None with fewer than
    :data:`MIN_SPREAD_BATCHES` batches."""
    obs = np.asarray(observed, dtype=np.float64)
    obs = obs[np.isfinite(obs) & (obs > 0)]
    if len(obs) < MIN_SPREAD_BATCHES:
        return None
    own = _log_var(np.asarray(rule, dtype=np.float64)) if rule is not None and len(rule) else 0.0
    # rounded: a scatter under 0.01 % is float noise, and a profile or a calibration line should not carry it
    return round(min(math.sqrt(max(_log_var(obs) - own, 0.0)), MAX_SPREAD), 4)


def rule_ratios(profile: SpreadFamily, row: int, sizes: np.ndarray, seed: int = 0) -> np.ndarray | None:
    """What the token rule alone scatters: for each size in ``sizes``, one batch of that many validation samples
    drawn at random, its rule's time over the runtime curve's at that size; None for a model without token costs
    (its rule is the curve itself: no scatter)."""
    z = np.asarray(sizes, dtype=np.int64)
    tab = token_tables(profile.models, profile.n_samples, int(z.max()) if len(z) else 1)
    if tab is None or profile.models[row].tokens is None or not len(z):
        return None
    rng = np.random.default_rng(seed)
    curve = profile.models[row].runtime
    return np.asarray(
        [tab.seconds(row, rng.integers(0, profile.n_samples, b)) / (curve.ms_of(int(b)) / 1000.0) for b in z]
    )


def served_spread(
    profile: SpreadFamily, row: int, ratios: np.ndarray, shares: np.ndarray, sizes: np.ndarray, busy_factor: float
) -> float | None:
    """Model ``row``'s ``batch_spread`` from its served batches (each one's time over the profile's curve at its
    size, the share of the host's other devices busy when it started, its size): the host's load divided out by
    ``busy_factor`` (:func:`~cascadeserve.profile.host.contended`'s rule), each size's own mean divided out (what
    calibration scales), then :func:`residual_spread` against what the token rule draws for the same sizes (at most
    2,000 of them, the most recent)."""
    r = np.asarray(ratios, dtype=np.float64)[-2000:]
    z = np.asarray(sizes, dtype=np.int64)[-2000:]
    s = np.asarray(shares, dtype=np.float64)[-2000:]
    if len(r) < MIN_SPREAD_BATCHES:
        return None
    adjusted = r / (1.0 + (busy_factor - 1.0) * s)
    _, group = np.unique(z, return_inverse=True)
    adjusted = adjusted / (np.bincount(group, adjusted) / np.bincount(group))[group]
    return residual_spread(adjusted, rule_ratios(profile, row, z))


def spread_draws(profile: SpreadFamily, order: int) -> np.ndarray | None:
    """Device ``order``'s factors: ``[model row, SPREAD_DRAWS]``, each row log-normal with its model's
    ``batch_spread`` and scaled to mean exactly 1 (1 throughout for a model without spread); None when no model of
    ``profile`` has any. Seeded by the device's order, so every engine draws the same table."""
    sigmas = [m.batch_spread for m in profile.models]
    if not any(sigmas):
        return None
    z = np.random.default_rng([0x5BEAD, order]).standard_normal((len(sigmas), SPREAD_DRAWS))
    out = np.ones((len(sigmas), SPREAD_DRAWS))
    for row, s in enumerate(sigmas):
        if s > 0:
            f = np.exp(s * z[row] - s * s / 2.0)
            out[row] = f / f.mean()
    return out


def spread_table(profile: SpreadFamily, devices: int) -> np.ndarray | None:
    """Every device's :func:`spread_draws`, ``[device, model row, SPREAD_DRAWS]`` (None: no model has spread)."""
    draws = [spread_draws(profile, d) for d in range(devices)]
    if not draws or draws[0] is None:
        return None
    return np.stack([d for d in draws if d is not None])
