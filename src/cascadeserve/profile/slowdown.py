"""A fault hook for emulated devices: a schedule of slowdowns, the same data for the simulator and the runtime.

An emulated device (and the simulator's model of a device) takes ``runtime(model, batch size)`` from the profile
for a batch. A :class:`Slowdowns` schedule multiplies that by a factor from a given time on, per device, e.g.
``Slowdowns.of(Slowdown("gpu0", at_s=30.0, factor=2.0))``: from t = 30 s every batch that *starts* on ``gpu0``
takes twice its profiled time (a thermally throttled GPU, a noisy neighbour). The simulator and
:class:`~cascadeserve.runtime.EmulatedDevice` read the factor with :meth:`Slowdowns.factor` at the batch's start,
so both apply the fault identically. It is emulation input, not a decision: no policy reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Slowdown", "Slowdowns"]


@dataclass(frozen=True, slots=True)
class Slowdown:
    """From ``at_s`` (seconds on the serving clock) batches starting on ``device`` take ``factor`` times longer."""

    device: str
    at_s: float
    factor: float

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise ValueError(f"slowdown of {self.device!r}: factor must be positive, got {self.factor}")


@dataclass(frozen=True, slots=True)
class Slowdowns:
    """A slowdown schedule: for each device, the factor in force at a time (the latest step at or before it)."""

    steps: tuple[Slowdown, ...] = ()

    @classmethod
    def of(cls, *steps: Slowdown) -> Slowdowns:
        return cls(tuple(sorted(steps, key=lambda s: s.at_s)))

    def __bool__(self) -> bool:
        return bool(self.steps)

    def factor(self, device: str, t: float) -> float:
        """The runtime multiplier on ``device`` for a batch starting at ``t`` (1.0 with no step in force)."""
        f = 1.0
        for s in self.steps:
            if s.device == device and s.at_s <= t:
                f = s.factor
        return f
