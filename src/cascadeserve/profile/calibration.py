"""Calibration: a profile's runtimes scaled to what batches cost where they are served.

``profile measure`` times each model alone on a quiet machine. Served, the same batch shares the host with the HTTP
front end, the other devices and the client, and costs more (1.25-2x on a 2-core box). A plan made from the quiet
runtimes promises a p95 the server cannot keep. Calibration closes that gap with measurements, not a guess:

1. serve the plan (or any plan that runs every model) under a realistic load: ``bench``, or real traffic;
2. the server's cost monitor (:class:`~cascadeserve.runtime.costs.CostMonitor`) keeps, per model, the ratios of
   measured to profiled batch time: ``GET /v2/cascade/costs``. Calibration takes their mean (the top 1 % left
   out): a queue's wait grows with the mean service time, and under contention batches run long more often than
   short, so the median would promise a p95 the server misses;
3. ``cascadeserve profile calibrate --profile PROFILE --url URL --out NEW`` writes a new profile whose runtimes are the
   old ones times those factors (:func:`calibrate`), with a ``calibration`` line in ``profile.yaml`` saying by how
   much and where it was measured. Plans made from it say so in their ``costs`` note (:func:`costs_note`).

``serve --replan auto`` does the same while serving when the costs drift (a throttled device, a new neighbour),
and the demo calibrates its profile this way before planning.

A factor scales the whole curve where the server saw one batch size (or too few of each): contention slows a batch
of any size by about the same proportion. A host unlike the profiler's can change the curve's shape, though (on a
faster host SmolLM2's batches of 1 ran ×1.06 their calibrated time under load and its batches of 2-4 ran
×1.21-1.30), so where the server saw enough batches of several sizes each size has its own factor
(``sizes``), interpolated between them along the curve and held flat past the largest and below the smallest.

Calibration from a served run (``--url``, and ``serve --replan auto``) also records each model's **batch spread**:
how much its batches scatter around what their rule charges (:mod:`cascadeserve.profile.spread`), which every engine
then draws batch by batch. Near saturation a queue's tail grows with it; a mean cannot say it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cascadeserve.profile.profile import ModelProfile, Profile
from cascadeserve.profile.runtime import RuntimeCurve
from cascadeserve.profile.spread import MAX_SPREAD

__all__ = [
    "MeasuredFactors",
    "calibrate",
    "costs_note",
    "describe_factors",
    "describe_sizes",
    "snapshot_factors",
]


def describe_factors(factors: Mapping[str, float]) -> str:
    """``m1 x1.42, m2 x1.80``: the factors in a profile's calibration line and a plan's costs note."""
    return ", ".join(f"{m} x{f:.3g}" for m, f in factors.items())


def calibrate(
    profile: Profile,
    factors: Mapping[str, float],
    *,
    source: str,
    busy: Mapping[str, float] | None = None,
    hop: tuple[float, float] | None = None,
    front_door: tuple[float, float] | None = None,
    sizes: Mapping[str, Mapping[int, float]] | None = None,
    spread: Mapping[str, float] | None = None,
) -> Profile:
    """``profile`` with each named model's runtimes multiplied by its factor (others unchanged), and each model named
    in ``busy`` given that ``busy_factor`` (measured afresh: how much slower its batches run with the host's other
    devices all busy, :mod:`cascadeserve.profile.host`), recording how. A model named in ``sizes`` (batch size to
    factor, measured) has each point of its curve scaled by the factor at that size instead (module docstring).

    ``hop`` (mean, p95 in ms), measured while serving on Ray, replaces the profile's ``ray_hop_ms`` and
    ``ray_hop_p95_ms``; ``front_door`` (mean, p95 in ms, what ``bench`` saw of each request beyond the server's
    time) replaces ``front_door_ms`` and ``front_door_p95_ms``. Factors compose: calibrating a calibrated profile
    multiplies again, and the new line says so.
    """
    busy = dict(busy or {})
    spread = dict(spread or {})
    sized = {m: dict(v) for m, v in (sizes or {}).items() if v}
    unknown = sorted((set(factors) | set(busy) | set(sized) | set(spread)) - set(profile.model_names))
    if unknown:
        raise ValueError(f"calibration names model(s) not in profile {profile.name!r}: {', '.join(unknown)}")
    for name, f in factors.items():
        if not (f > 0 and math.isfinite(f)):
            raise ValueError(f"calibration factor of model {name!r} must be a positive number, got {f!r}")
    for what, pair in (("Ray hop", hop), ("front door", front_door)):
        if pair is not None and not (0 <= pair[0] <= pair[1] and math.isfinite(pair[1])):
            raise ValueError(f"{what} must be finite with 0 <= mean <= p95, got {pair!r}")
    for name, by in sized.items():
        if not all(int(b) >= 1 and f > 0 and math.isfinite(f) for b, f in by.items()):
            raise ValueError(f"batch size factors of model {name!r} need sizes >= 1 and positive numbers, got {by!r}")
    for name, f in busy.items():
        if not (f >= 1 and math.isfinite(f)):
            raise ValueError(f"busy factor of model {name!r} must be a number >= 1, got {f!r}")
    for name, f in spread.items():
        if not (0 <= f <= MAX_SPREAD):
            raise ValueError(f"batch spread of model {name!r} must be a number in [0, {MAX_SPREAD:.4g}], got {f!r}")
    models: list[ModelProfile] = []
    for m in profile.models:
        rt = m.runtime
        if m.name in sized:
            by = sized[m.name]
            at = sorted(by)
            fs = np.interp(rt.batch_sizes, at, [by[b] for b in at])  # flat past the measured sizes
            curve = RuntimeCurve(rt.batch_sizes, tuple(float(v * f) for v, f in zip(rt.ms, fs, strict=True)))
        else:
            f = float(factors.get(m.name, 1.0))
            curve = RuntimeCurve(rt.batch_sizes, tuple(v * f for v in rt.ms)) if f != 1.0 else rt
        models.append(
            dataclasses.replace(
                m,
                runtime=curve,
                busy_factor=busy.get(m.name, m.busy_factor),
                batch_spread=spread.get(m.name, m.batch_spread),
            )
        )
    named = [*factors, *(m for m in sized if m not in factors)]  # one entry per model, in the order given
    each = [f"{m} {describe_sizes(sized[m])}" if m in sized else describe_factors({m: factors[m]}) for m in named]
    parts = [f"runtimes {', '.join(each)}"] if each else []
    if busy:
        parts.append(f"busy factors {describe_factors(busy)} (slower with every other device busy)")
    if any(spread.values()):  # a spread measured as none changes nothing worth a line
        each_spread = ", ".join(f"{m} σ{f:.3g}" for m, f in spread.items() if f)
        parts.append(f"batch spread {each_spread} (each batch's time beyond its rule)")
    if hop is not None:
        parts.append(f"Ray process hop {hop[0]:.3g} ms (p95 {hop[1]:.3g} ms)")
    if front_door is not None:
        parts.append(f"front door {front_door[0]:.3g} ms (p95 {front_door[1]:.3g} ms) per request")
    line = f"{'; '.join(parts) or 'nothing'} as measured on {source}"  # "; ": a part lists factors with ", "
    if profile.calibration:
        line = f"{line}; before that: {profile.calibration}"
    out = dataclasses.replace(profile, models=tuple(models), calibration=line)
    if hop is not None:
        out = dataclasses.replace(out, ray_hop_ms=hop[0], ray_hop_p95_ms=hop[1])
    if front_door is not None:
        out = dataclasses.replace(out, front_door_ms=front_door[0], front_door_p95_ms=front_door[1])
    return out


def describe_sizes(by: Mapping[int, float]) -> str:
    """``by batch size 1:x0.52 2:x0.63``: a model's factors per batch size in a calibration line."""
    return "by batch size " + " ".join(f"{b}:x{f:.3g}" for b, f in sorted(by.items()))


def costs_note(profile: Profile) -> str:
    """What a plan says about the costs it was planned with."""
    where = f" ({profile.device})" if profile.device else ""
    if profile.calibration:
        return f"profile {profile.name!r} calibrated: {profile.calibration}"
    return f"profile {profile.name!r} as measured{where}, not calibrated to the serving host"


@dataclass(frozen=True)
class MeasuredFactors:
    """What :func:`snapshot_factors` read: per model the runtime factor, the busy factor where it was fitted, the
    factors per batch size where several sizes had enough batches, and a note per model left out."""

    factors: dict[str, float]
    busy: dict[str, float]
    sizes: dict[str, dict[int, float]]
    notes: list[str]
    spread: dict[str, float] = field(default_factory=dict)  # batch_spread where enough batches were seen

    def drop(self, name: str) -> None:
        for d in (self.factors, self.busy, self.sizes, self.spread):
            d.pop(name, None)


def snapshot_factors(snapshot: dict[str, Any], min_batches: int) -> MeasuredFactors:
    """From a ``/v2/cascade/costs`` answer: per model, the runtime factor (the one with the host's other devices
    idle where the batches could be fitted against the host's load, else the mean), the busy factors fitted, the
    factors per batch size (only where at least two sizes had enough batches: one size says nothing about the
    curve's shape), the batch spread where the server could measure it (:mod:`cascadeserve.profile.spread`), and
    one note per model left out for fewer than ``min_batches`` batches."""
    out = MeasuredFactors({}, {}, {}, [])
    for m in snapshot.get("models", []):
        mean, n = m.get("mean_factor_vs_profile", m.get("factor_vs_profile")), int(m.get("batches") or 0)
        if mean is None or n < min_batches:
            out.notes.append(f"model {m['model']!r}: {n} batches (fewer than --min-batches {min_batches}): unchanged")
            continue
        name = str(m["model"])
        if m.get("busy_factor") is not None and m.get("alone_factor") is not None:
            out.factors[name], out.busy[name] = float(m["alone_factor"]), float(m["busy_factor"])
        else:
            out.factors[name] = float(mean)
        sized = {int(b): float(f) for b, f in (m.get("size_factors") or {}).items()}
        if len(sized) >= 2:
            out.sizes[name] = sized
        if m.get("batch_spread") is not None:
            out.spread[name] = float(m["batch_spread"])
    return out
