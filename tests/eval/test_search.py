"""The cost grid's device search against a full scan: the same fewest devices per cell, with fewer runs.

The scan is the reference written out here: every device count from 1 up, every setting of the system, and per
cell the first count where some setting meets it. The search (:mod:`cascadeserve.eval.search`) must give the same
counts on a real GPU-class family (``profiles/tweets-bert-v100``: real TweetEval predictions, published V100 BERT
runtimes) on a short slice of the Twitter trace that needs several devices.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadeserve.baselines import Config, DynBa, MSPlus, NoSwitching, System, Workload
from cascadeserve.eval import evaluate_system
from cascadeserve.eval.search import search_cells
from cascadeserve.profile import load_profile
from cascadeserve.simulate.memo import remembering
from cascadeserve.traces import build_trace

ROOT = Path(__file__).resolve().parents[2]
TWITTER = ROOT.parent / "shared" / "data" / "traces" / "twitter_2021" / "tweets_per_second.txt"
MAX_DEVICES = 8
CELLS = ((20.0, 0.575), (20.0, 0.6), (100.0, 0.575), (100.0, 0.6))


def _workload() -> Workload:
    prof = load_profile(ROOT / "profiles" / "tweets-bert-v100")
    if TWITTER.exists():
        tr = build_trace(str(TWITTER), max_qps=3000.0, window="0:20", drop_zero=True, seed=0)
    else:  # a checkout without the shared data: a synthetic trace of the same scale
        tr = build_trace("synthetic:spike:base=1000,peak=3000,at=5,width=5,duration=20", seed=0)
    lats = tuple(sorted({c[0] for c in CELLS}))
    accs = tuple(sorted({c[1] for c in CELLS}))
    return Workload(prof, tr, lats, accs, device_memory_mb=32500.0)


def _scan(system: System, w: Workload) -> dict[tuple[float, float], int | None]:
    """The reference: every count, every setting."""
    found: dict[tuple[float, float], int | None] = dict.fromkeys(CELLS)
    for d in range(1, MAX_DEVICES + 1):
        outs = system.run(w, d)
        for cell in CELLS:
            if found[cell] is None and any(o.meets(*cell) for o in outs):
                found[cell] = d
    return found


class FixedDynBa(DynBa):
    """DynBa's work-conserving settings only (its planner settings search the same way, at a planner fit each)."""

    def configs(self, w: Workload, devices: int) -> list[Config]:
        return [c for c in super().configs(w, devices) if c["batching"] == "min_queue=1"]


class StaticCascades(NoSwitching):
    """The no-switching ablation's fixed cascades only (likewise)."""

    def configs(self, w: Workload, devices: int) -> list[Config]:
        return [c for c in super().configs(w, devices) if "batching" not in c]


@pytest.mark.parametrize("system", [FixedDynBa(), StaticCascades(), MSPlus()], ids=lambda s: s.name)
def test_search_gives_the_scans_device_counts_with_fewer_runs(system: System) -> None:
    w = _workload()
    with remembering():
        scanned = _scan(system, w)
        grid = evaluate_system(system, w, MAX_DEVICES)
    assert {c: grid.devices[c] for c in CELLS} == scanned
    if not isinstance(system, NoSwitching):  # single models need several devices here; cascades need one
        assert any(d is not None and d > 1 for d in scanned.values())
    every = sum(len(system.configs(w, d)) for d in range(1, MAX_DEVICES + 1))
    assert grid.simulations < every


def test_search_cells_on_a_monotone_table_matches_the_scan() -> None:
    need = {(20.0, 0.5): 2, (20.0, 0.6): 5, (50.0, 0.5): 1, (50.0, 0.6): 4, (100.0, 0.5): 1, (100.0, 0.6): None}
    asked: list[tuple[int, tuple[float, float]]] = []

    def meets(d: int, cell: tuple[float, float]) -> bool:
        asked.append((d, cell))
        n = need[cell]
        return n is not None and d >= n

    # (100, 0.6) needing nothing while (50, 0.6) needs 4 is not consistent; drop it from the consistent table
    need[(100.0, 0.6)] = 3
    assert search_cells(list(need), meets, 16) == need
    assert len(asked) < 6 * 16
