"""Cascades and their vectorised evaluation from a profile's records.

A :class:`Cascade` is an ordered tuple of models and one threshold fewer. Stage ``k`` answers a sample when the
model's certainty is at least ``thresholds[k]``; otherwise the sample moves on. The last stage always answers.

:func:`evaluate` scores many threshold vectors for one model order at once: accuracy, the fraction of samples
that reach each stage, and the expected work (milliseconds of device time per sample at a given batch size).
It never runs a model; it replays the recorded predictions and certainties.

How it is fast: for each stage we sort the samples by certainty once and keep *prefix bitsets*: row ``p`` has
the bits of the ``p`` least certain samples set. "certainty < t" is then one row lookup (found with
``searchsorted``), and a whole cascade is a handful of AND/NOT operations and popcounts over ``n/8`` bytes per
threshold vector. The bitsets cost ``n²/8`` bytes per model, so above :data:`BITSET_MAX_SAMPLES` samples we fall
back to plain boolean broadcasting in chunks. Both paths give identical numbers (there is a test).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cascadeserve.profile import Profile
from cascadeserve.profile.tokens import sample_weights

__all__ = [
    "BITSET_MAX_SAMPLES",
    "Cascade",
    "CascadeEval",
    "enumerate_frontier",
    "evaluate",
    "pareto_front",
    "stage_load",
]

BITSET_MAX_SAMPLES = 16_384
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class Cascade:
    """Ordered models (cheapest first, by convention) and ``len(models) - 1`` thresholds in [0, 1]."""

    models: tuple[str, ...]
    thresholds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(self.models))
        object.__setattr__(self, "thresholds", tuple(float(t) for t in self.thresholds))
        if not self.models:
            raise ValueError("a cascade needs at least one model")
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"a cascade cannot repeat a model: {', '.join(self.models)}")
        if len(self.thresholds) != len(self.models) - 1:
            raise ValueError(
                f"a cascade of {len(self.models)} models needs {len(self.models) - 1} thresholds, "
                f"got {len(self.thresholds)}"
            )
        for t in self.thresholds:
            if not 0.0 <= t <= 1.0:
                raise ValueError(f"threshold {t} is outside [0, 1]")

    def __str__(self) -> str:
        parts = [f"{m}@{t:g}" for m, t in zip(self.models, self.thresholds, strict=False)]
        return " > ".join([*parts, self.models[-1]])

    def evaluate(self, profile: Profile, batch_size: float = 1.0) -> CascadeEval:
        return evaluate(profile, self.models, np.asarray([self.thresholds]), batch_size=batch_size)


@dataclass(frozen=True)
class CascadeEval:
    """Evaluation of ``T`` threshold vectors of one model order."""

    models: tuple[str, ...]
    thresholds: np.ndarray  # [T, k-1]
    accuracy: np.ndarray  # [T]
    reach: np.ndarray  # [T, k]: fraction of samples that reach stage k (reach[:, 0] == 1)
    work_ms: np.ndarray  # [T]: expected device milliseconds per sample at ``batch_size``
    batch_size: float

    def answered(self) -> np.ndarray:
        """``[T, k]`` fraction of samples answered by each stage."""
        nxt = np.concatenate([self.reach[:, 1:], np.zeros((len(self.reach), 1))], axis=1)
        return np.asarray(self.reach - nxt)

    def cascade(self, i: int) -> Cascade:
        return Cascade(self.models, tuple(float(t) for t in self.thresholds[i]))


# ---------------------------------------------------------------------------------------------------------------
# Per-profile caches (sorted certainties and prefix bitsets), dropped with the profile.
class _StageIndex:
    __slots__ = ("bits", "correct_bits", "sorted_cert")

    def __init__(self, cert: np.ndarray, correct: np.ndarray) -> None:
        n = len(cert)
        order = np.argsort(cert, kind="stable")
        self.sorted_cert = cert[order]
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        nbytes = (n + 7) // 8
        bits = np.empty((n + 1, nbytes), dtype=np.uint8)
        step = max(1, _CHUNK_ELEMENTS // max(n, 1))
        for p0 in range(0, n + 1, step):
            p = np.arange(p0, min(p0 + step, n + 1))[:, None]
            bits[p0 : p0 + len(p)] = np.packbits(rank[None, :] < p, axis=1)
        self.bits = bits
        self.correct_bits = np.packbits(correct)


_INDEX: weakref.WeakKeyDictionary[Profile, dict[int, _StageIndex]] = weakref.WeakKeyDictionary()


def _stage_index(profile: Profile, m: int) -> _StageIndex:
    per = _INDEX.setdefault(profile, {})
    idx = per.get(m)
    if idx is None:
        idx = per[m] = _StageIndex(profile.certainties[m], profile.correct[m])
    return idx


def _eval_bitsets(profile: Profile, rows: list[int], th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t, k = th.shape[0], len(rows)
    correct = np.zeros(t, dtype=np.int64)
    reach = np.zeros((t, k), dtype=np.int64)
    reach[:, 0] = profile.n_samples
    nbytes = (profile.n_samples + 7) // 8
    step = max(1, _CHUNK_ELEMENTS // nbytes)
    idx = [_stage_index(profile, m) for m in rows]
    for a in range(0, t, step):
        b = min(a + step, t)
        r: np.ndarray | None = None  # bits of samples reaching the current stage; None = all
        for s in range(k - 1):
            unsure = idx[s].bits[np.searchsorted(idx[s].sorted_cert, th[a:b, s], side="left")]
            sure = ~unsure if r is None else r & ~unsure
            correct[a:b] += np.bitwise_count(sure & idx[s].correct_bits).sum(axis=1, dtype=np.int64)
            r = unsure if r is None else r & unsure
            reach[a:b, s + 1] = np.bitwise_count(r).sum(axis=1, dtype=np.int64)
        last = idx[k - 1].correct_bits if r is None else r & idx[k - 1].correct_bits
        correct[a:b] += np.bitwise_count(np.atleast_2d(last)).sum(axis=1, dtype=np.int64)
    return correct, reach


def _eval_dense(profile: Profile, rows: list[int], th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t, k, n = th.shape[0], len(rows), profile.n_samples
    certs = profile.certainties[rows]
    corr = profile.correct[rows]
    correct = np.zeros(t, dtype=np.int64)
    reach = np.zeros((t, k), dtype=np.int64)
    reach[:, 0] = n
    step = max(1, _CHUNK_ELEMENTS // n)
    for a in range(0, t, step):
        b = min(a + step, t)
        r = np.ones((b - a, n), dtype=bool)
        for s in range(k - 1):
            unsure = certs[s][None, :] < th[a:b, s][:, None]
            correct[a:b] += np.count_nonzero(r & ~unsure & corr[s][None, :], axis=1)
            r &= unsure
            reach[a:b, s + 1] = np.count_nonzero(r, axis=1)
        correct[a:b] += np.count_nonzero(r & corr[k - 1][None, :], axis=1)
    return correct, reach


def evaluate(
    profile: Profile,
    models: Sequence[str],
    thresholds: np.ndarray | Sequence[Sequence[float]],
    *,
    batch_size: float = 1.0,
    method: str = "auto",
) -> CascadeEval:
    """Evaluate ``T`` threshold vectors (shape ``[T, len(models) - 1]``) for one model order."""
    models = tuple(models)
    rows = [profile.index(m) for m in models]
    k = len(rows)
    raw = np.asarray(thresholds, dtype=np.float64)
    th = np.zeros((max(len(raw), 1) if raw.ndim == 2 else 1, 0)) if k == 1 else raw.reshape(-1, k - 1)
    n = profile.n_samples
    if method == "auto":
        method = "bitsets" if n <= BITSET_MAX_SAMPLES else "dense"
    if method == "bitsets":
        correct, reach = _eval_bitsets(profile, rows, th)
    elif method == "dense":
        correct, reach = _eval_dense(profile, rows, th)
    else:
        raise ValueError(f"unknown method {method!r}")
    reach_frac = reach / n
    per_sample_ms = np.array([profile.models[m].runtime.per_sample_ms(batch_size) for m in rows])
    return CascadeEval(
        models=models,
        thresholds=th,
        accuracy=correct / n,
        reach=reach_frac,
        work_ms=reach_frac @ per_sample_ms,
        batch_size=batch_size,
    )


def stage_load(profile: Profile, models: Sequence[str], thresholds: np.ndarray) -> np.ndarray:
    """``[T, k]``: per threshold vector and stage, the share of the work of all requests that reaches the stage when
    each request is weighed by its token cost there (:func:`~cascadeserve.profile.tokens.sample_weights`, mean 1;
    a model without token costs weighs every request 1, and its column is the plain reach)."""
    rows = [profile.index(m) for m in models]
    raw = np.asarray(thresholds, dtype=np.float64)
    th = np.zeros((max(len(raw), 1) if raw.ndim == 2 else 1, 0)) if len(rows) == 1 else raw.reshape(-1, len(rows) - 1)
    n = profile.n_samples
    weights = [sample_weights(profile.models[r]) for r in rows]
    w = np.stack([np.ones(n) if x is None else x for x in weights])
    out = np.empty((len(th), len(rows)))
    for i, t in enumerate(th):
        r = np.ones(n, dtype=bool)
        for s in range(len(rows)):
            if s:
                r &= profile.certainties[rows[s - 1]] < t[s - 1]  # unsure at the stage before: goes on
            out[i, s] = float(w[s][r].sum()) / n
    return out


def pareto_front(accuracy: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both axes (higher accuracy, lower work), cheapest first.

    Among points with equal work only the most accurate survives; a point survives only if it is strictly more
    accurate than every cheaper survivor.
    """
    acc = np.asarray(accuracy, dtype=np.float64)
    w = np.asarray(work, dtype=np.float64)
    if acc.shape != w.shape:
        raise ValueError("accuracy and work must have the same shape")
    order = np.lexsort((-acc, w))  # by work ascending, then accuracy descending
    keep: list[int] = []
    best = -np.inf
    for i in order.tolist():
        if acc[i] > best:
            keep.append(i)
            best = acc[i]
    return np.asarray(keep, dtype=np.int64)


def enumerate_frontier(
    profile: Profile,
    *,
    levels: Sequence[float] | np.ndarray = tuple(np.round(np.linspace(0.0, 1.0, 11), 6)),
    batch_size: float = 1.0,
    max_models: int | None = None,
) -> list[tuple[Cascade, float, float]]:
    """Exact enumeration: every cost-ordered model subset × every threshold in ``levels``; the Pareto frontier.

    Returns ``(cascade, accuracy, work_ms)`` triples, cheapest first. Exponential in the number of models; the
    planner's SP1 prunes, this is the plain version for small families and for ``profile frontier``.
    """
    from itertools import combinations, product

    order = profile.by_cost(int(max(1, batch_size)))
    lv = np.asarray(levels, dtype=np.float64)
    accs: list[np.ndarray] = []
    works: list[np.ndarray] = []
    keys: list[tuple[tuple[str, ...], np.ndarray]] = []
    top = len(order) if max_models is None else min(max_models, len(order))
    for k in range(1, top + 1):
        for subset in combinations(order, k):
            th = (
                np.array(list(product(lv, repeat=k - 1)), dtype=np.float64).reshape(-1, k - 1)
                if k > 1
                else np.zeros((1, 0))
            )
            ev = evaluate(profile, subset, th, batch_size=batch_size)
            accs.append(ev.accuracy)
            works.append(ev.work_ms)
            keys.append((subset, ev.thresholds))
    acc = np.concatenate(accs)
    work = np.concatenate(works)
    offsets = np.cumsum([0] + [len(a) for a in accs])
    out: list[tuple[Cascade, float, float]] = []
    for i in pareto_front(acc, work).tolist():
        j = int(np.searchsorted(offsets, i, side="right") - 1)
        subset, th = keys[j]
        out.append((Cascade(subset, tuple(float(x) for x in th[i - offsets[j]])), float(acc[i]), float(work[i])))
    return out
