"""Baselines and ablations (paper §6.2, §6.6) on the same simulator and runtime as cascadeserve.

Every system is a :class:`System`: a grid of hyper-parameter settings and, per setting, a :class:`Deployment`
(profile, gear plan, optional AIMD batching and gear schedule) that runs on the shared simulator. See
:mod:`~cascadeserve.baselines.dynba` (DynBa), :mod:`~cascadeserve.baselines.msplus` (MS+),
:mod:`~cascadeserve.baselines.cocktail` (Cocktail+) and :mod:`~cascadeserve.baselines.ours` (cascadeserve, no
switching, no cascade). :func:`all_systems` lists them in the order reports use. A :class:`Workload`'s
``batch_overhead_ms`` is charged to every system alike (in its plans and in its own batch-size and capacity
estimates).
"""

from __future__ import annotations

from cascadeserve.baselines.cocktail import CocktailPlus, LoadTime, ensemble_profile
from cascadeserve.baselines.common import (
    ACCURACY_TOL,
    Config,
    Deployment,
    Outcome,
    System,
    Workload,
    batch_for_latency,
    batch_ms,
    pareto_models,
    sub_profile,
)
from cascadeserve.baselines.dynba import DynBa
from cascadeserve.baselines.msplus import MSPlus, colocate
from cascadeserve.baselines.ours import CascadeServe, NoCascade, NoSwitching, without_cascades

__all__ = [
    "ACCURACY_TOL",
    "BASELINES",
    "OURS",
    "CascadeServe",
    "CocktailPlus",
    "Config",
    "Deployment",
    "DynBa",
    "LoadTime",
    "MSPlus",
    "NoCascade",
    "NoSwitching",
    "Outcome",
    "System",
    "Workload",
    "all_systems",
    "batch_for_latency",
    "batch_ms",
    "colocate",
    "ensemble_profile",
    "pareto_models",
    "sub_profile",
    "without_cascades",
]

OURS = "cascadeserve"
BASELINES = ("dynba", "ms+", "cocktail+")


def all_systems(load_time: LoadTime | None = None) -> list[System]:
    """cascadeserve, the three baselines, and the two ablations."""
    return [CascadeServe(), DynBa(), MSPlus(), CocktailPlus(load_time), NoSwitching(), NoCascade()]
