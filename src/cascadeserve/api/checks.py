"""``serve``'s option checks that need no plan: the bounds, the cost watch, the fault-injection schedule, the
bind address, the models config's class names; each bad value is one line naming the option or file (exit code
2). And the start-up measurement of the serving costs a profile lacks (:func:`measure_costs`)."""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from cascadeserve.errors import CascadeServeError
from cascadeserve.hosts import is_loopback_host
from cascadeserve.http.server import check_labels
from cascadeserve.plan import GearPlan
from cascadeserve.policy.costs import CostSettings
from cascadeserve.profile import Profile, record_costs
from cascadeserve.profile.slowdown import Slowdown, Slowdowns
from cascadeserve.runtime import Backend

__all__ = [
    "check_options",
    "class_names",
    "cost_settings",
    "loopback",
    "measure_costs",
    "record_costs_in",
    "slowdowns",
    "thread_note",
]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def thread_note(models: Path, devices: int) -> str | None:
    """A warning when the plan's devices would ask for more intra-op threads than this host has cores (the models
    config's ``threads``; see :meth:`cascadeserve.models.config.ModelsConfig.oversubscription`)."""
    from cascadeserve.models.config import ModelsConfig, load_models_file  # deferred: the models package

    cfg = load_models_file(models)
    if not isinstance(cfg, ModelsConfig):
        return None
    note = cfg.oversubscription(devices, os.cpu_count() or 1)
    return None if note is None else f"warning: {models}: {note}"


def class_names(models: Path | None, profile: Profile) -> dict[int, str] | None:
    """The models config's class names (``labels:``; read with ``--emulate`` too, which loads no model), checked
    against the classes of ``profile``: a name missing is an error naming the file (``None``: no names)."""
    if models is None:
        return None
    from cascadeserve.models.config import load_models_file  # deferred: the models package

    names = load_models_file(models).label_names
    if names is not None:
        try:
            check_labels(names, profile)
        except ValueError as e:
            raise CascadeServeError(f"{models}: {e}") from None
    return names


def cost_settings(tolerance: float, window_s: float) -> CostSettings:
    """``--cost-tolerance`` and ``--cost-window-s`` as the cost watch's settings (sustained for half a window)."""
    if not (tolerance > 0 and math.isfinite(tolerance)):
        raise CascadeServeError(f"--cost-tolerance: {tolerance} must be a positive number")
    if not (window_s > 0 and math.isfinite(window_s)):
        raise CascadeServeError(f"--cost-window-s: {window_s} must be a positive number of seconds")
    return CostSettings(tolerance=tolerance, window_s=window_s, sustain_s=window_s / 2, cooldown_s=3 * window_s)


def slowdowns(specs: list[str]) -> Slowdowns | None:
    """``--slowdown`` specs as a schedule counted from now (the server's start-up)."""
    steps = []
    for spec in specs:
        try:
            steps.append(Slowdown.parse(spec))
        except ValueError as e:
            raise CascadeServeError(f"--slowdown: {e}") from None
    return Slowdowns.of(*steps).shifted(time.monotonic()) if steps else None


def check_options(
    max_in_flight: int,
    max_wait_slos: float,
    capacity_qps: float | None,
    slo_ms: float | None,
    timeout_ms: float | None,
    max_body_bytes: int,
    grace_s: float,
    keep_alive_s: float,
) -> None:
    if max_in_flight < 1:
        raise CascadeServeError(f"--max-in-flight: {max_in_flight} must be at least 1")
    if not max_wait_slos >= 0:
        raise CascadeServeError(f"--max-wait-slos: {max_wait_slos} must be 0 (off) or positive")
    for opt, v in (("--capacity-qps", capacity_qps), ("--slo-p95-ms", slo_ms), ("--timeout-ms", timeout_ms)):
        if v is not None and not (v > 0 and v < float("inf")):
            raise CascadeServeError(f"{opt}: {v} must be a positive number")
    if max_body_bytes < 1:
        raise CascadeServeError(f"--max-body-bytes: {max_body_bytes} must be positive")
    if not grace_s >= 0:
        raise CascadeServeError(f"--grace-s: {grace_s} must not be negative")
    if not (keep_alive_s > 0 and keep_alive_s < float("inf")):
        raise CascadeServeError(f"--keep-alive-s: {keep_alive_s} must be a positive number of seconds")


def loopback(host: str) -> bool:
    return is_loopback_host(host)


def record_costs_in(source: Path, out: Path, costs: dict[str, float]) -> Path:
    """``serve --emulate --out DIR``: the profile folder ``source`` copied to ``out`` (unless they are one) with the
    measured serving ``costs`` recorded in its ``profile.yaml``; returns that file."""
    try:
        if out.resolve() != source.resolve():
            shutil.copytree(source, out, dirs_exist_ok=True)
        return record_costs(out, **costs)
    except OSError as e:
        raise CascadeServeError(f"--out: cannot write {out} ({e.strerror or e})") from None


def measure_costs(
    prof: Profile,
    plan: GearPlan,
    engine: Backend,
    source: Path | None = None,
    out: Path | None = None,
    say: Callable[[str], None] = _stderr,
) -> dict[str, float]:
    """Measure and print the serving costs that neither the profile nor the plan records: the runtime's per-batch
    overhead and, on Ray, the process hop (measured with Ray's own devices; see eval/overhead.py). They are written
    only where asked: ``out`` gets a copy of the profile folder ``source`` with them recorded (``out`` may be
    ``source`` itself, when that is what the user asked for)."""
    ray = engine.name == "ray"
    need_batch = not prof.batch_overhead_ms and not plan.batch_overhead_ms
    need_hop = ray and not prof.ray_hop_ms and not plan.hop_ms
    if ray and plan.backend != "ray":
        say(
            "note: this plan was made for the local backend, so simulate charges it no Ray process hops (make it "
            "with plan --backend ray)"
        )
    if not (need_batch or need_hop):
        return {}
    from cascadeserve.eval.overhead import measure_batch_overhead

    measured = measure_batch_overhead(prof, backend=engine if ray else None)
    costs = {"batch_overhead_ms": measured.median_ms} if need_batch else {}
    if need_hop:
        costs["ray_hop_ms"], costs["ray_hop_p95_ms"] = measured.hop_ms, measured.hop_p95_ms
    hop = f", Ray process hop {measured.hop_ms:.3f} ms (p95 {measured.hop_p95_ms:.3f})" if need_hop else ""
    where = "not recorded; --out DIR records them in a copy of the profile"
    if out is not None:
        where = f"recorded in {record_costs_in(source or out, out, costs)}"
    say(f"runtime per-batch overhead {measured.median_ms:.3f} ms{hop} (median of {measured.samples}; {where})")
    return costs
