"""SP1, cascade search: the Pareto frontier of accuracy against work over ordered model subsets × thresholds.

A candidate cascade is an ordered subset of the family (cheapest first, by per-sample runtime at batch 1) with one
threshold per non-final stage, taken from ``levels`` equally spaced values in [0, 1]. Its *work* is the expected
device milliseconds per request at batch size 1 (each stage's per-sample runtime times the fraction of requests
that reach it); its accuracy is replayed from the profile's records. No model runs and no simulation happens here.

Two strategies:

* **Exact enumeration with branch-and-bound** when the raw space (Σ_k C(M, k)·L^(k-1)) is at most
  :data:`EXACT_LIMIT` (about 6 models × 20 levels). Stages are expanded depth-first over a shared prefix, so a
  prefix's "who is still unsure" bitset is computed once for all its completions. A prefix is pruned when the
  frontier found so far already holds a point at most as costly as the prefix's cheapest possible completion and
  at least as accurate as its best possible completion (every remaining unsure sample answered correctly whenever
  *some* remaining model gets it right). Threshold levels that select the same samples are merged, and a stage
  that answers nobody (pure cost) or everybody (later stages unreachable, a duplicate of a shorter cascade) is
  skipped, since both are dominated by or equal to another candidate.
* **Random sampling** (the paper's method) above that: ``samples`` random (subset, thresholds) draws, plus every
  single-model cascade.

The frontier always contains the cheapest cascade (the cheapest model alone) and the most accurate one found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

import numpy as np

from cascadeserve.cascade import Cascade, evaluate, pareto_front, stage_load
from cascadeserve.planner.bitcount import extend_counts
from cascadeserve.profile import Profile

__all__ = ["EXACT_LIMIT", "Candidate", "Frontier", "search_cascades", "space_size"]

EXACT_LIMIT = 5_000_000
_CHUNK_ROWS = 20_000  # prefix rows expanded at once; bounds memory at rows × levels × n/8 bytes


@dataclass(frozen=True)
class Candidate:
    """One frontier cascade with its replayed accuracy, work (ms/request at batch 1), per-stage reach (the share of
    requests each stage runs on) and per-stage load (the share of the requests' work: requests weighed by their
    token costs, :func:`~cascadeserve.cascade.stage_load`; the reach itself where no stage has token costs)."""

    cascade: Cascade
    accuracy: float
    work_ms: float
    reach: tuple[float, ...]
    load: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.load:
            object.__setattr__(self, "load", self.reach)

    @property
    def models(self) -> tuple[str, ...]:
        return self.cascade.models


@dataclass(frozen=True)
class Frontier:
    """Candidates sorted cheapest (and least accurate) first; ``method`` is ``"exact"`` or ``"random"``."""

    candidates: tuple[Candidate, ...]
    method: str
    evaluated: int

    def __len__(self) -> int:
        return len(self.candidates)

    def __getitem__(self, i: int) -> Candidate:
        return self.candidates[i]


def space_size(n_models: int, levels: int) -> int:
    """Raw number of (ordered subset, threshold vector) pairs."""
    return sum(comb(n_models, k) * levels ** (k - 1) for k in range(1, n_models + 1))


def _levels(levels: int) -> np.ndarray:
    # Thresholds strictly inside (0, 1]: 0 would make a stage answer everything (a shorter cascade).
    return np.round(np.linspace(0.0, 1.0, levels + 1)[1:], 9)


def search_cascades(
    profile: Profile,
    *,
    levels: int = 20,
    samples: int = 20_000,
    seed: int = 0,
    method: str = "auto",
    models: Sequence[str] | None = None,
) -> Frontier:
    """The accuracy/work Pareto frontier (see the module docstring). ``method``: auto, exact or random."""
    names = [m for m in profile.by_cost(1) if models is None or m in models]
    if not names:
        raise ValueError("no models to build cascades from")
    if method == "auto":
        method = "exact" if space_size(len(names), levels) <= EXACT_LIMIT else "random"
    if method == "exact":
        found, evaluated = _exact(profile, names, _levels(levels))
    elif method == "random":
        found, evaluated = _random(profile, names, _levels(levels), samples, seed)
    else:
        raise ValueError(f"unknown search method {method!r}")
    return _to_frontier(profile, found, method, evaluated)


# ---------------------------------------------------------------------------------------------------------------
def _to_frontier(
    profile: Profile, found: list[tuple[tuple[str, ...], tuple[float, ...], float, float]], method: str, evaluated: int
) -> Frontier:
    acc = np.array([f[2] for f in found])
    work = np.array([f[3] for f in found])
    front = pareto_front(acc, work).tolist()
    # Re-evaluate the frontier with the one evaluator, one call per model order (not per point); work is taken
    # row by row with the evaluator's own product, so each number is the one a single-point call gives.
    by_models: dict[tuple[str, ...], list[int]] = {}
    for i in front:
        by_models.setdefault(found[i][0], []).append(i)
    scored: dict[int, Candidate] = {}
    for models, rows in by_models.items():
        ev = evaluate(profile, models, np.asarray([found[i][1] for i in rows]).reshape(len(rows), -1))
        per_sample = np.array([profile.model(m).runtime.per_sample_ms(ev.batch_size) for m in models])
        tokens = any(profile.model(m).tokens is not None for m in models)
        load = stage_load(profile, models, ev.thresholds) if tokens else ev.reach
        for j, i in enumerate(rows):
            work_ms = float((load[j : j + 1] @ per_sample)[0])
            scored[i] = Candidate(
                Cascade(models, found[i][1]), float(ev.accuracy[j]), work_ms, tuple(ev.reach[j]), tuple(load[j])
            )
    kept = [scored[i] for i in front]
    if any(c.load != c.reach for c in kept):  # token costs moved the work: keep the points still on the front
        on = pareto_front(np.array([c.accuracy for c in kept]), np.array([c.work_ms for c in kept]))
        kept = [kept[i] for i in on]
    return Frontier(tuple(kept), method, evaluated)


def _random(
    profile: Profile, names: list[str], lv: np.ndarray, samples: int, seed: int
) -> tuple[list[tuple[tuple[str, ...], tuple[float, ...], float, float]], int]:
    rng = np.random.default_rng(seed)
    found: list[tuple[tuple[str, ...], tuple[float, ...], float, float]] = []
    for m in names:  # every single model, so the cheapest and the most accurate model are always present
        ev = evaluate(profile, (m,), np.zeros((1, 0)))
        found.append(((m,), (), float(ev.accuracy[0]), float(ev.work_ms[0])))
    groups: dict[tuple[str, ...], list[np.ndarray]] = {}
    for _ in range(samples):
        k = int(rng.integers(2, len(names) + 1)) if len(names) > 1 else 1
        if k == 1:
            continue
        idx = np.sort(rng.choice(len(names), size=k, replace=False))
        subset = tuple(names[i] for i in idx)
        groups.setdefault(subset, []).append(rng.choice(lv, size=k - 1))
    for subset, ths in groups.items():
        th = np.unique(np.asarray(ths), axis=0)
        ev = evaluate(profile, subset, th)
        keep = pareto_front(ev.accuracy, ev.work_ms)
        for i in keep.tolist():
            found.append((subset, tuple(float(x) for x in th[i]), float(ev.accuracy[i]), float(ev.work_ms[i])))
    return found, samples + len(names)


def _words(bits: np.ndarray, nwords: int) -> np.ndarray:
    """Packed bits (uint8, last axis) as ``nwords`` 64-bit words, zero-padded: popcounts and AND/NOT over words
    are 8× fewer numpy elements than over bytes, with the same integer results (padding bits are zero)."""
    pad = nwords * 8 - bits.shape[-1]
    if pad:
        bits = np.concatenate([bits, np.zeros((*bits.shape[:-1], pad), dtype=np.uint8)], axis=-1)
    return np.ascontiguousarray(bits).view(np.uint64)


def _count(words: np.ndarray) -> np.ndarray:
    """Set bits per row (last axis summed)."""
    return np.asarray(np.bitwise_count(words).sum(axis=-1, dtype=np.int64))


class _Exact:
    """Depth-first prefix expansion with branch-and-bound against the running frontier.

    Sample sets are bitsets of 64-bit words (:func:`_words`); a set's padding bits are always zero because every
    set is an AND with the all-samples set or with a packed boolean row.
    """

    def __init__(self, profile: Profile, names: list[str], lv: np.ndarray) -> None:
        self.names = names
        n = profile.n_samples
        self.n = n
        self.nwords = (n + 63) // 64
        rows = [profile.index(m) for m in names]
        self.cost = np.array([profile.models[r].runtime.per_sample_ms(1) for r in rows])
        self.correct_bits = [_words(np.packbits(profile.correct[r]), self.nwords) for r in rows]
        # unsure bitsets per model and distinct level: samples with certainty < threshold
        self.level_vals: list[np.ndarray] = []
        self.unsure: list[np.ndarray] = []
        for r in rows:
            cert = profile.certainties[r]
            cuts = np.searchsorted(np.sort(cert), lv, side="left")
            _, first = np.unique(cuts, return_index=True)
            keep = [i for i in first.tolist() if 0 < cuts[i] < n]  # drop "answers all" and "answers none"
            vals = lv[keep]
            self.level_vals.append(vals)
            self.unsure.append(_words(np.packbits(cert[None, :] < vals[:, None], axis=1), self.nwords))
        # oracle bits: some model at position >= j is right
        self.oracle = [np.zeros(self.nwords, dtype=np.uint64) for _ in names]
        acc = np.zeros(self.nwords, dtype=np.uint64)
        for j in range(len(names) - 1, -1, -1):
            acc = acc | self.correct_bits[j]
            self.oracle[j] = acc.copy()
        self.min_cost_after = [float(self.cost[j:].min()) if j < len(names) else np.inf for j in range(len(names) + 1)]
        self.found: list[tuple[tuple[str, ...], tuple[float, ...], float, float]] = []
        self.evaluated = 0
        self._fw = np.zeros(0)
        self._fa = np.zeros(0)

    def all_samples(self) -> np.ndarray:
        """The one-row bitset of every sample."""
        return _words(np.packbits(np.ones(self.n, dtype=bool))[None, :], self.nwords)

    # running frontier: works ascending with the best accuracy at or below each work
    def _refresh(self) -> None:
        if not self.found:
            return
        acc = np.array([f[2] for f in self.found])
        work = np.array([f[3] for f in self.found])
        keep = pareto_front(acc, work)
        self.found = [self.found[i] for i in keep.tolist()]
        self._fw = work[keep]
        self._fa = np.maximum.accumulate(acc[keep])

    def _dominated(self, ub_acc: np.ndarray, lb_work: np.ndarray) -> np.ndarray:
        if not len(self._fw):
            return np.zeros(len(ub_acc), dtype=bool)
        pos = np.searchsorted(self._fw, lb_work + 1e-12, side="right") - 1
        best = np.where(pos >= 0, self._fa[np.maximum(pos, 0)], -1.0)
        return np.asarray(best >= ub_acc - 1e-12)

    def _complete(
        self, models: tuple[int, ...], th: np.ndarray, reach: np.ndarray, corr: np.ndarray, work: np.ndarray, f: int
    ) -> None:
        """Finish prefixes with final model ``f``; record the Pareto-optimal completions."""
        n_reach = _count(reach)
        acc = (corr + _count(reach & self.correct_bits[f])) / self.n
        w = work + n_reach / self.n * self.cost[f]
        self.evaluated += len(acc)
        keep = pareto_front(acc, w)
        keep = keep[~self._dominated(acc[keep] + 1e-12, w[keep])]
        names = tuple(self.names[i] for i in (*models, f))
        for i in keep.tolist():
            self.found.append((names, tuple(float(x) for x in th[i]), float(acc[i]), float(w[i])))
        if len(keep):
            self._refresh()

    def expand(
        self, models: tuple[int, ...], th: np.ndarray, reach: np.ndarray, corr: np.ndarray, work: np.ndarray
    ) -> None:
        """``models`` are the non-final stages so far; ``reach`` the bitsets of samples still unsure after them."""
        start = models[-1] + 1 if models else 0
        m = len(self.names)
        for f in range(start, m):
            if models:
                self._complete(models, th, reach, corr, work, f)
        for x in range(start, m - 1):
            for a in range(0, len(th), _CHUNK_ROWS):
                self._extend(models, x, th[a : a + _CHUNK_ROWS], reach[a : a + _CHUNK_ROWS], corr[a:], work[a:])

    def _extend(
        self,
        models: tuple[int, ...],
        x: int,
        th: np.ndarray,
        reach: np.ndarray,
        corr: np.ndarray,
        work: np.ndarray,
    ) -> None:
        p = len(th)
        corr = corr[:p]
        work = work[:p]
        un = self.unsure[x]
        n_lv = len(un)
        if n_lv == 0:
            return
        n_reach = _count(reach)
        w2 = np.repeat(work + n_reach / self.n * self.cost[x], n_lv)
        # row i*n_lv + j: prefix i extended at level j; the counts in one compiled pass (bitcount.py)
        nr, right, still_ok = extend_counts(reach, un, self.correct_bits[x], self.oracle[x + 1])
        c2 = np.repeat(corr, n_lv) + right
        # stage x answers nobody (pure cost) or everybody (later stages unreachable): dominated or duplicate
        useful = (nr > 0) & (nr < np.repeat(n_reach, n_lv))
        ub = (c2 + still_ok) / self.n
        lb = w2 + nr / self.n * self.min_cost_after[x + 1]
        self.evaluated += len(useful)
        keep = useful & ~self._dominated(ub, lb)
        if not keep.any():
            return
        idx = np.flatnonzero(keep)
        th2 = np.concatenate([th[idx // n_lv], self.level_vals[x][idx % n_lv][:, None]], axis=1)
        new_reach = reach[idx // n_lv] & un[idx % n_lv]  # the kept rows' unsure sets only
        self.expand((*models, x), th2, new_reach, c2[idx], w2[idx])


def _exact(
    profile: Profile, names: list[str], lv: np.ndarray
) -> tuple[list[tuple[tuple[str, ...], tuple[float, ...], float, float]], int]:
    ex = _Exact(profile, names, lv)
    full = ex.all_samples()
    # single models first: they seed the frontier that prunes everything else
    for f in range(len(names)):
        ex._complete((), np.zeros((1, 0)), full, np.zeros(1, dtype=np.int64), np.zeros(1), f)
    ex.expand((), np.zeros((1, 0)), full, np.zeros(1, dtype=np.int64), np.zeros(1))
    return ex.found, ex.evaluated
