"""How far a profile's runtimes can be trusted: each curve point's noise, the host's load, and the notes they raise.

``profile measure`` repeats each batch size's timed runs until the runtime is known to within ``ci_target`` (the
relative half-width of the 95 % confidence interval of the kept mean, 5 % by default) or its repeat budget is spent,
and records per model (:class:`ModelTiming`, the ``timing`` entry of a model in ``profile.yaml``):

* per batch size (:class:`PointNoise`): how many runs were timed, the interval's relative half-width, the runs'
  coefficient of variation (their spread), and whether the target was met;
* the host's 1-minute load average before measuring and right after the model was timed, and its CPU count.

:func:`measurement_notes` turns those facts and the curves into one-line notes, stored in ``profile.yaml``
(``notes``) and printed as warnings by ``profile measure`` and ``up``:

* points whose runtime did not settle within the repeat budget;
* a curve that falls: a larger batch measured cheaper than a smaller one by more than both points' intervals
  (without intervals, by more than 10 %);
* a runtime of (nearly) zero: under :data:`NEAR_ZERO_MS` per batch, which no real model runs in (a timer's
  resolution, a lazy framework that did no work);
* a host that was busy: load per core above :data:`BUSY_LOAD_PER_CORE` before measuring, or after it beyond the
  measuring process's own threads.

:func:`plan_warnings` is what ``plan`` says about a profile before planning from it: one line when it was never
calibrated to a serving host, one when it carries notes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cascadeserve.profile.timing import CI_TARGET, ModelTiming, PointNoise

if TYPE_CHECKING:
    from cascadeserve.profile.profile import ModelProfile, Profile

__all__ = [
    "BUSY_LOAD_PER_CORE",
    "CI_TARGET",
    "NEAR_ZERO_MS",
    "ModelTiming",
    "PointNoise",
    "host_load",
    "measurement_notes",
    "plan_warnings",
]

BUSY_LOAD_PER_CORE = 0.7  # a host busier than this (1-minute load per core) times other work too
NEAR_ZERO_MS = 0.001  # one microsecond per batch: no model's predict call returns faster
_FALL_TOLERANCE = 0.10  # without measured intervals, a fall of more than this share is not noise


def host_load() -> float | None:
    """The host's 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def _points(points: Sequence[tuple[int, float | None]]) -> str:
    return ", ".join(f"b={b}" + ("" if ci is None else f" (±{ci:.0%})") for b, ci in points)


def _model_notes(m: ModelProfile) -> list[str]:
    notes: list[str] = []
    noise = {} if m.timing is None else dict(m.timing.points)
    unstable = [(b, p.ci) for b, p in sorted(noise.items()) if not p.stable]
    if unstable and m.timing is not None:
        most = max(p.runs for p in noise.values())
        within = f"±{m.timing.target:.0%}"
        notes.append(f"model {m.name!r}: runtime not stable to {within} after {most} runs at {_points(unstable)}")
    zero = [(b, ms) for b, ms in zip(m.runtime.batch_sizes, m.runtime.ms, strict=True) if ms < NEAR_ZERO_MS]
    if zero:
        at = ", ".join(f"{ms:.4f} ms @ b={b}" for b, ms in zero)
        notes.append(f"model {m.name!r}: near-zero runtime {at} (under {NEAR_ZERO_MS * 1000:g} µs: not a measurement)")
    worst: tuple[float, int, float, int, float] | None = None  # (excess, small b, its ms, large b, its ms)
    sizes, ms = m.runtime.batch_sizes, m.runtime.ms
    for j in range(1, len(sizes)):
        for i in range(j):
            tol = _half(noise.get(sizes[i]), ms[i]) + _half(noise.get(sizes[j]), ms[j])
            excess = (ms[i] - ms[j]) - tol
            if excess > 0 and (worst is None or excess > worst[0]):
                worst = (excess, sizes[i], ms[i], sizes[j], ms[j])
    if worst is not None:
        _, bi, mi, bj, mj = worst
        notes.append(
            f"model {m.name!r}: runtime falls from {mi:.3f} ms @ b={bi} to {mj:.3f} ms @ b={bj}, more than the "
            "noise (a larger batch measured cheaper)"
        )
    return notes


def _half(point: PointNoise | None, ms: float) -> float:
    """A point's absolute half-interval: measured, or the default tolerance's half where none was."""
    if point is None or point.ci is None:
        return ms * _FALL_TOLERANCE / 2
    return ms * point.ci


def measurement_notes(profile: Profile) -> tuple[str, ...]:
    """The notes a profile's curves and timing facts raise (module docstring), one line each."""
    notes: list[str] = []
    busy: list[tuple[float, int, str]] = []  # (load per core, cores, model)
    for m in profile.models:
        notes.extend(_model_notes(m))
        load = None if m.timing is None else m.timing.busy_per_core()
        if m.timing is not None and load is not None and load > BUSY_LOAD_PER_CORE:
            busy.append((load, m.timing.cpus, m.name))
    if busy:
        which = ", ".join(repr(name) for _, _, name in busy)
        most, cpus, _ = max(busy)
        notes.append(
            f"host busy while measuring {which}: load up to {most:.2f} per core on {cpus} core(s), above "
            f"{BUSY_LOAD_PER_CORE:g}; runtimes may be inflated and noisy: measure again on a quiet host"
        )
    return tuple(notes)


def plan_warnings(profile: Profile) -> list[str]:
    """What to say before planning from ``profile``: never calibrated to a serving host, and its notes (one line
    each)."""
    out: list[str] = []
    if not profile.calibration:
        out.append(
            f"profile {profile.name!r} was never calibrated to a serving host: plans promise quiet-machine runtimes "
            "(profile calibrate, or up with profile.calibrate_s > 0)"
        )
    if profile.notes:
        n = len(profile.notes)
        what = f"{n} measurement note{'s' if n > 1 else ''}"
        out.append(f"profile {profile.name!r} carries {what}: {' | '.join(profile.notes)}")
    return out
