"""Gear selection: which gear serves the measured QPS, with the paper's α·Q0 hysteresis (§5).

Gears cover contiguous QPS ranges ``[qps_low, qps_high)``; a QPS at or above the last range's top uses the last
gear. Under an accuracy SLO the plan may carry a ``qps_scale`` (appendix C.2), by which measured QPS is multiplied
before the lookup. Neighbouring gears that serve alike (:attr:`~cascadeserve.plan.GearPlan.gear_runs`) are given one
top, their run's, so the lookup answers the run's first gear for all of them: moving between identical gears is no
switch.

Hysteresis: after a burst the queues hold a backlog. Switching to a gear for a *lower* QPS range (a slower, more
accurate cascade) would then make the backlog drain slower, so the producer keeps the current gear while
``qps < α · Q0``, where Q0 is the first stage's queue length. Moving to a gear for a *higher* QPS range is never
held back: holding a slow gear under rising load only grows the backlog. cascadeserve keeps one gear for all
inference servers, so Q0 is the first stage's queue summed over its replicas; with one server this is exactly the
paper's rule.

:class:`GearPolicy` is the producer's one decision per tick, in the simulator and in every runtime: the selector
above, or, when the plan is served with a :class:`~cascadeserve.policy.GearSchedule` (an autoscaler told the
future load, Cocktail+), the schedule's gear for the tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cascadeserve.policy.kernels import gear_for_qps, select_gear
from cascadeserve.policy.schedule import GearSchedule

__all__ = ["GearDecision", "GearPolicy", "GearSelector"]


@dataclass(frozen=True, slots=True)
class GearDecision:
    """What the producer decided on one tick (loggable, replayable)."""

    gear: int  # the gear to use from now on
    target: int  # the gear the QPS alone asks for
    qps: float
    q0: int
    held: bool  # True when hysteresis kept ``gear`` although ``target`` differs


class GearSelector:
    """Looks up the gear for a QPS and applies hysteresis; pure, with no clock and no I/O."""

    __slots__ = ("_highs", "_qps_scale", "alpha")

    def __init__(self, qps_highs: Sequence[float], *, alpha: float = 8.0, qps_scale: float = 1.0) -> None:
        if not qps_highs or list(qps_highs) != sorted(qps_highs):
            raise ValueError("qps_highs must be a non-empty ascending sequence")
        self._highs = list(qps_highs)
        self.alpha = alpha
        self._qps_scale = qps_scale

    @property
    def qps_scale(self) -> float:
        """The factor measured QPS is multiplied by before the lookup (appendix C.2; :meth:`rescale` changes it)."""
        return self._qps_scale

    def rescale(self, qps_scale: float) -> None:
        """Multiply measured QPS by ``qps_scale`` from the next decision on (the load-drift estimate of
        :class:`~cascadeserve.policy.replan.LoadDrift`, or a simulation's per-tick factor)."""
        self._qps_scale = qps_scale

    @property
    def qps_highs(self) -> tuple[float, ...]:
        """The top of each gear's QPS range, ascending."""
        return tuple(self._highs)

    @property
    def n_gears(self) -> int:
        return len(self._highs)

    def lookup(self, qps: float) -> int:
        """The gear whose range holds ``qps`` (after scaling); the last gear above the plan's max QPS."""
        return gear_for_qps(self._highs, qps * self._qps_scale)

    def decide(self, current: int, qps: float, q0: int) -> GearDecision:
        gear, target, held = select_gear(self._highs, self._qps_scale, self.alpha, current, qps, q0)
        return GearDecision(gear=gear, target=target, qps=qps, q0=q0, held=held)


class GearPolicy:
    """Which gear serves from each producer tick on: :class:`GearSelector`, or a fixed :class:`GearSchedule`."""

    __slots__ = ("schedule", "selector")

    def __init__(self, selector: GearSelector, schedule: GearSchedule | None = None) -> None:
        if schedule is not None:
            gears = schedule.gears
            top = int(gears.max())
            if top >= selector.n_gears:
                tick = int((gears >= selector.n_gears).argmax())
                raise ValueError(
                    f"the gear schedule names gear {top} (first at tick {tick}), but the plan has only "
                    f"{selector.n_gears} gear(s), numbered 0 to {selector.n_gears - 1}"
                )
        self.selector = selector
        self.schedule = schedule

    def rescale(self, qps_scale: float) -> None:
        """The selector multiplies measured QPS by ``qps_scale`` from the next tick on (no effect on a schedule)."""
        self.selector.rescale(qps_scale)

    def initial(self, qps: float = 0.0) -> int:
        """The gear before the first tick (tick 0), for a server starting at ``qps``."""
        return self.selector.lookup(qps) if self.schedule is None else self.schedule.gear_at(0)

    def decide(self, tick: int, current: int, qps: float, q0: int) -> GearDecision:
        """The gear from tick ``tick`` (0-based, the tick at ``start + tick·tick_s``) on."""
        if self.schedule is None:
            return self.selector.decide(current, qps, q0)
        gear = self.schedule.gear_at(tick)
        return GearDecision(gear=gear, target=gear, qps=qps, q0=q0, held=False)
