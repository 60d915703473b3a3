"""Load balancing as one linear program (paper Eqs. 1-3), solved once with HiGHS.

Given replicas (each a model on a device), each replica's runtime per sample ``t_r`` (seconds, amortised at the
gear's batch size; the planner includes any per-batch overhead in it) and the QPS ``D_m`` that each model of the
cascade must serve, find per-replica QPS ``q_r``:

    minimise    u + ε · Σ q_r
    subject to  Σ_{r ∈ R[m]} q_r ≥ D_m           for every model m with demand
                Σ_{r ∈ R[d]} q_r · t_r ≤ u       for every device d
                q_r ≥ 0, u ≥ 0

The paper fixes ``u`` and lowers it by repeated solves; here ``u`` is a variable, so one solve gives the lowest
achievable maximum device utilisation. ``u > 1`` means the placement cannot carry the load. The tiny ``ε`` term
removes slack (no replica serves more than its model needs) without trading against ``u``: lowering a ``q_r``
above demand never raises any device's load. Replicas of models without demand are not variables at all, so
they get no load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

__all__ = ["Balance", "balance"]


@dataclass(frozen=True)
class Balance:
    """The LP's answer: per-replica QPS, per-device utilisation and their maximum ``u`` (``inf`` if impossible)."""

    q: np.ndarray  # [R] QPS per replica (0 for replicas of models without demand)
    device_util: np.ndarray  # [D]
    u: float

    @property
    def feasible(self) -> bool:
        return self.u <= 1.0 + 1e-9

    def shares(self, replica_models: Sequence[str], model: str) -> dict[int, float]:
        """Replica index -> share of ``model``'s load (sums to one when the model has load)."""
        idx = [i for i, m in enumerate(replica_models) if m == model]
        total = float(sum(self.q[i] for i in idx))
        if total <= 0:
            return {i: 1.0 / len(idx) for i in idx} if idx else {}
        return {i: float(self.q[i]) / total for i in idx}


def balance(
    replica_models: Sequence[str],
    replica_devices: Sequence[int],
    runtime_s: Sequence[float] | np.ndarray,
    demand: Mapping[str, float],
    n_devices: int,
    *,
    solved: dict[tuple[bytes, bytes], np.ndarray] | None = None,
) -> Balance:
    """Solve the LP above. ``runtime_s[r]`` is replica r's seconds per sample; ``demand`` maps model -> QPS.

    ``solved`` (optional, owned by the caller) caches HiGHS's answers by the normalised LP itself (its matrix and
    right-hand side, byte for byte): the same cascade at another QPS usually normalises to the very same LP, and
    HiGHS then returns the very same solution, so a hit changes no bit of the result."""
    n_rep = len(replica_models)
    t = np.asarray(runtime_s, dtype=np.float64)
    q = np.zeros(n_rep)
    need = {m: float(d) for m, d in demand.items() if d > 0}
    if not need:
        return Balance(q, np.zeros(n_devices), 0.0)
    var = [i for i, m in enumerate(replica_models) if m in need]
    models = list(need)
    for m in models:
        if not any(replica_models[i] == m for i in var):
            return Balance(q, np.full(n_devices, math.inf), math.inf)
    nv = len(var)
    # Normalise demand to sum to one and runtimes to a maximum of one, so HiGHS's absolute tolerances do not
    # swallow small loads; the solution is scaled back below.
    dscale = sum(need.values())
    tscale = float(max(t[i] for i in var)) or 1.0
    c = np.zeros(nv + 1)
    c[:nv] = 1e-9
    c[nv] = 1.0
    a = np.zeros((len(models) + n_devices, nv + 1))
    b = np.zeros(len(models) + n_devices)
    col = {m: k for k, m in enumerate(models)}
    for j, i in enumerate(var):
        a[col[replica_models[i]], j] = -1.0
        a[len(models) + replica_devices[i], j] = t[i] / tscale
    for k, m in enumerate(models):
        b[k] = -need[m] / dscale
    a[len(models) :, nv] = -1.0
    key = (a.tobytes() + bytes(a.shape[1]), b.tobytes())
    raw = None if solved is None else solved.get(key)
    if raw is None:
        res = linprog(c, A_ub=a, b_ub=b, bounds=(0, None), method="highs")
        raw = np.asarray(res.x, dtype=np.float64) if res.status == 0 else np.empty(0)
        if solved is not None:
            solved[key] = raw
    if not len(raw):
        return Balance(q, np.full(n_devices, math.inf), math.inf)
    x = np.maximum(raw, 0.0) * dscale
    q[var] = x[:nv]
    dev = np.asarray(replica_devices, dtype=np.int64)
    # HiGHS meets constraints only up to its feasibility tolerance (1e-7), so a model whose demand is tiny next to
    # the others' can come back unserved. Top such models up exactly: scale their replicas' QPS, or give the
    # shortfall to the replica on the least loaded device. The change is below the tolerance, so u stays optimal.
    for m in models:
        idx = [i for i in var if replica_models[i] == m]
        served = float(q[idx].sum())
        if served >= need[m]:
            continue
        if served > 0:
            q[idx] *= need[m] / served
        else:
            util_now = np.zeros(n_devices)
            np.add.at(util_now, dev, q * t)
            best = min(idx, key=lambda i: (util_now[dev[i]] + need[m] * t[i], i))
            q[best] = need[m]
    util = np.zeros(n_devices)
    np.add.at(util, dev, q * t)
    return Balance(q, util, float(util.max()))
