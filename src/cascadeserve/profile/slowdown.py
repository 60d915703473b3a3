"""A fault hook for emulated devices: a schedule of slowdowns, the same data for the simulator and the runtime.

An emulated device (and the simulator's model of a device) takes ``runtime(model, batch size)`` from the profile
for a batch. A :class:`Slowdowns` schedule multiplies that by a factor from a given time on, per device, e.g.
``Slowdowns.of(Slowdown("gpu0", at_s=30.0, factor=2.0))``: from t = 30 s every batch that *starts* on ``gpu0``
takes twice its profiled time (a thermally throttled GPU, a noisy neighbour). The simulator and
:class:`~cascadeserve.runtime.EmulatedDevice` read the factor with :meth:`Slowdowns.factor` at the batch's start,
so both apply the fault identically. It is emulation input, not a decision: no policy reads it.

A step may name a ``model`` (only that model's batches slow down) and the device ``"*"`` (every device). On real
models (``serve --models --slowdown``) the device thread runs the batch, then waits ``(factor - 1)`` times what it
took: the device is held as a slower device would hold it (factors below 1 cannot be emulated there and are
refused). :meth:`Slowdowns.parse` reads the ``serve --slowdown`` spelling, ``[device=NAME,][model=NAME,]at=S,factor=F``.
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
    model: str | None = None  # only this model's batches; None: every model on the device

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise ValueError(f"slowdown of {self.device!r}: factor must be positive, got {self.factor}")

    def applies(self, device: str, model: str | None) -> bool:
        return self.device in ("*", device) and (self.model is None or self.model == model)

    @classmethod
    def parse(cls, spec: str) -> Slowdown:
        """``[device=NAME,][model=NAME,]at=SECONDS,factor=F`` (device defaults to ``*``: every device)."""
        fields: dict[str, str] = {}
        for part in spec.split(","):
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or key not in ("device", "model", "at", "factor") or key in fields:
                raise ValueError(
                    f"{spec!r}: expected [device=NAME,][model=NAME,]at=SECONDS,factor=F (bad part {part.strip()!r})"
                )
            fields[key] = value.strip()
        if "at" not in fields or "factor" not in fields:
            raise ValueError(f"{spec!r}: at=SECONDS and factor=F are both required")
        try:
            at, factor = float(fields["at"]), float(fields["factor"])
        except ValueError:
            raise ValueError(f"{spec!r}: at and factor must be numbers") from None
        if not (at >= 0 and factor > 0) or at == float("inf") or factor == float("inf"):
            raise ValueError(f"{spec!r}: at must be ≥ 0 and factor > 0, both finite")
        return cls(fields.get("device", "*") or "*", at, factor, fields.get("model") or None)


@dataclass(frozen=True, slots=True)
class Slowdowns:
    """A slowdown schedule: for each device, the factor in force at a time (the latest step at or before it)."""

    steps: tuple[Slowdown, ...] = ()

    @classmethod
    def of(cls, *steps: Slowdown) -> Slowdowns:
        return cls(tuple(sorted(steps, key=lambda s: s.at_s)))

    def __bool__(self) -> bool:
        return bool(self.steps)

    def factor(self, device: str, t: float, model: str | None = None) -> float:
        """The runtime multiplier on ``device`` for a batch of ``model`` starting at ``t`` (1.0 with no step in
        force; the latest step that applies wins)."""
        f = 1.0
        for s in self.steps:
            if s.at_s <= t and s.applies(device, model):
                f = s.factor
        return f

    def shifted(self, origin: float) -> Slowdowns:
        """The same schedule with every time counted from ``origin`` (a real clock's reading at start-up)."""
        return Slowdowns(tuple(Slowdown(s.device, s.at_s + origin, s.factor, s.model) for s in self.steps))
