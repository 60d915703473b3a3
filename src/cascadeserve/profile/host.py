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

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "HostFit",
    "busy_at",
    "contended",
    "fit_contention",
    "host_groups",
    "host_peers",
    "host_share",
    "size_factors",
    "trimmed_mean",
]

MIN_SPREAD = 0.2  # the busy shares must span at least this much for a fit (else only the mean is known)
MIN_SIZE_BATCHES = 10  # a batch size needs this many batches for a factor of its own


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
    """A model's batch times against the host's load: ``alone`` (measured / profiled when no other device is busy,
    over the batches' mix of sizes) and ``busy_factor`` (how much slower with all of them busy), fitted on
    ``batches`` with mean share ``share``; ``by_size``: the factor alone at each batch size with at least
    :data:`MIN_SIZE_BATCHES` batches (empty when the fit was not given sizes)."""

    alone: float
    busy_factor: float
    batches: int
    share: float
    by_size: dict[int, float] = field(default_factory=dict)


def trimmed_mean(values: Iterable[float], cut: float = 0.01) -> float:
    """The mean with the top ``cut`` share (rounded up: at least the largest value) left out, so that a stalled
    batch is not a cost; NaN for no values."""
    a = np.sort(np.fromiter(values, dtype=np.float64))
    if not len(a):
        return math.nan
    return float(a[: max(1, len(a) - math.ceil(len(a) * cut))].mean())


def size_factors(ratios: np.ndarray, sizes: np.ndarray, divisor: np.ndarray | float = 1.0) -> dict[int, float]:
    """Per batch size with at least :data:`MIN_SIZE_BATCHES` batches, the :func:`trimmed_mean` of ``ratios /
    divisor`` (the contention a batch met taken out) over its batches: as the model's own factor, one stalled batch
    among a size's ten is not that size's cost (one such read ×59.6 for a size no plan used)."""
    r = np.asarray(ratios, dtype=np.float64) / divisor
    z = np.asarray(sizes, dtype=np.int64)
    out: dict[int, float] = {}
    for b in np.unique(z):
        m = z == b
        if int(m.sum()) >= MIN_SIZE_BATCHES:
            out[int(b)] = trimmed_mean(r[m])
    return out


def fit_contention(ratios: np.ndarray, shares: np.ndarray, sizes: np.ndarray | None = None) -> HostFit | None:
    """``ratio ≈ alone[size] · (1 + (busy_factor − 1) · share)`` by least squares (``alone`` > 0, ``busy_factor`` ≥
    1), one ``alone`` per batch size when ``sizes`` are given, else one for all; None when the shares do not spread
    over at least :data:`MIN_SPREAD` or fewer than 10 batches were seen.

    Why per size: a host unlike the profiler's (another CPU, another memory bus) can change what a batch of 4 costs
    against a batch of 1, and the larger batches form when the load is high, so the other devices are busy too. A
    fit with one ``alone`` blames the busy share for what the batch's size costs (measured: SmolLM2's batches of 2-4
    ran ×1.21-1.30 their calibrated time at 9 QPS while its batches of 1 ran ×1.06)."""
    r = np.asarray(ratios, dtype=np.float64)
    s = np.asarray(shares, dtype=np.float64)
    if len(r) < 10 or float(np.ptp(s)) < MIN_SPREAD:
        return None
    _, group = np.unique(np.zeros(len(r)) if sizes is None else np.asarray(sizes), return_inverse=True)
    weight = np.bincount(group)

    def alone_at(beta: float) -> np.ndarray:  # each size's least-squares factor given beta = busy_factor - 1
        c = 1.0 + beta * s
        return np.asarray(np.bincount(group, r * c) / np.bincount(group, c * c))

    def residual(beta: float) -> float:
        return float(np.sum((r - alone_at(beta)[group] * (1.0 + beta * s)) ** 2))

    from scipy.optimize import minimize_scalar  # here: the engines import this module, and only a fit needs scipy

    # one unknown left: the residual over beta, minimised on a range far wider than any host's (x0.01 to x101)
    beta = float(minimize_scalar(residual, bounds=(-0.99, 100.0), method="bounded", options={"xatol": 1e-10}).x)
    alone = alone_at(beta)
    if float(np.min(alone)) <= 0:
        return None
    if beta <= 0:  # no slower when busy (or faster: larger batches at load amortise a fixed cost): the means alone
        beta = 0.0
        alone = np.bincount(group, r) / weight
    mix = float(np.sum(alone * weight) / len(r))
    by_size = {} if sizes is None else size_factors(r, np.asarray(sizes), 1.0 + beta * s)
    return HostFit(mix, 1.0 + beta, len(r), float(s.mean()), by_size)
