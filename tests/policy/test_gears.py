"""Gear selection: lookup at the edges of the QPS ranges, qps_scale, and the α·Q0 hysteresis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cascadeserve.policy import GearDecision, GearSelector

HIGHS = [10.0, 20.0, 30.0]  # gears: [0, 10), [10, 20), [20, 30]


@pytest.mark.parametrize(
    ("qps", "gear"),
    [
        (0.0, 0),
        (9.999, 0),
        (10.0, 1),  # a range's low edge belongs to it
        (19.999, 1),
        (20.0, 2),
        (29.999, 2),
        (30.0, 2),  # at the plan's max QPS: the last gear
        (1e9, 2),  # above it: still the last gear
    ],
)
def test_lookup_at_range_edges(qps: float, gear: int) -> None:
    assert GearSelector(HIGHS).lookup(qps) == gear


def test_qps_scale_multiplies_measured_qps_before_lookup() -> None:
    sel = GearSelector(HIGHS, qps_scale=2.0)
    assert sel.lookup(4.9) == 0
    assert sel.lookup(5.0) == 1
    assert sel.lookup(10.0) == 2
    assert GearSelector(HIGHS, qps_scale=0.5).lookup(19.0) == 0


def test_selector_fields_and_validation() -> None:
    sel = GearSelector(HIGHS)
    assert (sel.n_gears, sel.alpha, sel.qps_scale) == (3, 8.0, 1.0)
    assert GearSelector([5.0]).lookup(100.0) == 0
    with pytest.raises(ValueError, match="ascending"):
        GearSelector([])
    with pytest.raises(ValueError, match="ascending"):
        GearSelector([20.0, 10.0])


def test_decide_without_hysteresis_follows_the_lookup() -> None:
    sel = GearSelector(HIGHS)
    assert sel.decide(0, 15.0, 0) == GearDecision(gear=1, target=1, qps=15.0, q0=0, held=False)
    assert sel.decide(2, 5.0, 0) == GearDecision(gear=0, target=0, qps=5.0, q0=0, held=False)
    assert sel.decide(1, 12.0, 50) == GearDecision(gear=1, target=1, qps=12.0, q0=50, held=False)


def test_downgrade_is_held_while_qps_is_below_alpha_q0() -> None:
    sel = GearSelector(HIGHS, alpha=8.0)
    # current gear 2, QPS now asks for gear 0; backlog Q0 = 2 -> hold while qps < 16
    assert sel.decide(2, 5.0, 2) == GearDecision(gear=2, target=0, qps=5.0, q0=2, held=True)
    assert sel.decide(2, 15.0, 2) == GearDecision(gear=2, target=1, qps=15.0, q0=2, held=True)
    # qps = 16 = alpha * Q0 is not below it: switch
    assert sel.decide(2, 16.0, 2).gear == 1
    # the backlog drained: switch down
    assert sel.decide(2, 5.0, 0) == GearDecision(gear=0, target=0, qps=5.0, q0=0, held=False)


def test_alpha_scales_the_hold() -> None:
    assert GearSelector(HIGHS, alpha=1.0).decide(2, 5.0, 5).held is False
    assert GearSelector(HIGHS, alpha=1.0).decide(2, 5.0, 6).held is True
    assert GearSelector(HIGHS, alpha=0.0).decide(2, 0.0, 1000).held is False


def test_upgrade_is_never_held() -> None:
    sel = GearSelector(HIGHS, alpha=8.0)
    assert sel.decide(0, 25.0, 1_000_000) == GearDecision(gear=2, target=2, qps=25.0, q0=1_000_000, held=False)
    assert sel.decide(0, 12.0, 100).gear == 1


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 3),
    st.floats(0.0, 50.0),
    st.integers(0, 100),
    st.floats(0.0, 16.0),
)
def test_hysteresis_invariants(current: int, qps: float, q0: int, alpha: float) -> None:
    sel = GearSelector([10.0, 20.0, 30.0, 40.0], alpha=alpha)
    d = sel.decide(current, qps, q0)
    assert d.target == sel.lookup(qps)
    assert (d.qps, d.q0) == (qps, q0)
    assert d.held == (d.target < current and qps < alpha * q0)
    assert d.gear == (current if d.held else d.target)
    if d.target >= current:  # upgrades (and staying) are never held
        assert not d.held
        assert d.gear == d.target


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(1.0, 1000.0), min_size=1, max_size=8, unique=True), st.floats(0.0, 2000.0))
def test_lookup_picks_the_range_holding_qps(highs: list[float], qps: float) -> None:
    highs = sorted(highs)
    g = GearSelector(highs).lookup(qps)
    low = 0.0 if g == 0 else highs[g - 1]
    assert low <= qps
    assert qps < highs[g] or g == len(highs) - 1
